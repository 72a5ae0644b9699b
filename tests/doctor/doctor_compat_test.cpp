// `kgpu doctor compat` against the tables of facts/diagnostics.md.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "inventory/cuda_compat.h"

using namespace kgpu::inventory::compat;
using ::testing::HasSubstr;

namespace {

std::string text(const Answer& a) {
    std::string s;
    for (const auto& l : a.lines) s += l + "\n";
    return s;
}

TEST(DoctorCompat, Tables) {
    EXPECT_EQ(min_driver({12, 4}).value(), "550.54.14");
    EXPECT_EQ(min_driver({11, 0}).value(), "450.51.05");
    EXPECT_EQ(min_driver({13, 2}).value(), "595.45.04");
    EXPECT_FALSE(min_driver({12, 7}));  // never released
    EXPECT_EQ(minor_compat_driver(12).value(), "525.60.13");
    EXPECT_EQ(newest_cuda("550.54.15").value(), (Cuda{12, 4}));
    EXPECT_EQ(newest_cuda("570.26").value(), (Cuda{12, 8}));
    EXPECT_FALSE(newest_cuda("440.33"));
    EXPECT_LT(compare_driver("550.54.14", "550.54.15"), 0);
    EXPECT_GT(compare_driver("555", "550.54.15"), 0);
    EXPECT_EQ(gpu_model("Tesla V100-SXM2-16GB")->cc, (Cc{7, 0}));
    EXPECT_EQ(gpu_model("NVIDIA A100-SXM4-80GB")->cc, (Cc{8, 0}));
    EXPECT_EQ(gpu_model("NVIDIA A10")->cc, (Cc{8, 6}));
    EXPECT_EQ(gpu_model("NVIDIA L40S")->cc, (Cc{8, 9}));
    EXPECT_EQ(gpu_model("NVIDIA GH200 480GB")->cc, (Cc{9, 0}));
    EXPECT_EQ(architecture({9, 0}), "Hopper");
    EXPECT_EQ(min_cc(12), (Cc{5, 0}));
    EXPECT_EQ(min_cc(13), (Cc{7, 5}));
    EXPECT_EQ(parse_cc("sm_70").value(), (Cc{7, 0}));
    EXPECT_EQ(parse_cc("8.6").value(), (Cc{8, 6}));
}

TEST(DoctorCompat, FullySupported) {
    auto a = answer({"12.4", "550.54.15", "", "Tesla V100"});
    EXPECT_EQ(a.exit_code, 0) << text(a);
    EXPECT_FALSE(a.minor_compat_only);
}

TEST(DoctorCompat, MinorVersionCompatibilityNamesTheFullDriver) {
    auto a = answer({"12.4", "535.54.03", "", ""});
    EXPECT_EQ(a.exit_code, 0) << text(a);
    EXPECT_TRUE(a.minor_compat_only);
    EXPECT_THAT(text(a), HasSubstr("minor-version compatibility"));
    EXPECT_THAT(text(a), HasSubstr("550.54.14"));
}

TEST(DoctorCompat, DriverTooOld) {
    auto a = answer({"12.4", "470.42.01", "", ""});
    EXPECT_EQ(a.exit_code, 1);
    EXPECT_THAT(text(a), HasSubstr("525.60.13"));
    EXPECT_THAT(text(a), HasSubstr("forward compatibility was attempted on non supported HW"));
    EXPECT_THAT(text(a), HasSubstr("CUDA 11.4 or older"));
    auto b = answer({"13.0", "575.51.03", "", ""});  // 13.0 is the first of its major: no minor compat below it
    EXPECT_EQ(b.exit_code, 1);
    EXPECT_THAT(text(b), HasSubstr("580.65.06"));
}

TEST(DoctorCompat, DroppedArchitectures) {
    auto v100 = answer({"13.0", "", "", "Tesla V100"});
    EXPECT_EQ(v100.exit_code, 1);
    EXPECT_THAT(text(v100), HasSubstr("no kernel image is available"));
    EXPECT_THAT(text(v100), HasSubstr("7.5"));
    EXPECT_THAT(text(v100), HasSubstr("CUDA 12.x"));
    auto k80 = answer({"12.0", "", "3.7", ""});
    EXPECT_EQ(k80.exit_code, 1);
    EXPECT_THAT(text(k80), HasSubstr("5.0"));
    EXPECT_THAT(text(k80), HasSubstr("CUDA 11.x"));
    EXPECT_EQ(answer({"12.9", "", "5.2", ""}).exit_code, 0);  // Maxwell still in 12.x
}

TEST(DoctorCompat, GpuNewerThanTheImage) {
    auto a = answer({"11.7", "", "", "H100"});
    EXPECT_EQ(a.exit_code, 1);
    EXPECT_THAT(text(a), HasSubstr("CUDA 11.8 or newer"));
    EXPECT_EQ(answer({"12.8", "570.26", "", "B200"}).exit_code, 0);
}

TEST(DoctorCompat, MalformedQuestions) {
    EXPECT_EQ(answer({"twelve", "", "", ""}).exit_code, 2);
    EXPECT_EQ(answer({"12.7", "", "", ""}).exit_code, 2);
    EXPECT_EQ(answer({"12.4", "abc", "", ""}).exit_code, 2);
    EXPECT_EQ(answer({"12.4", "", "", "Voodoo 3"}).exit_code, 2);
    EXPECT_EQ(answer({"12.4", "", "7.x", ""}).exit_code, 2);
}

}  // namespace
