// NVIDIA_REQUIRE_* semantics (toolkit/requirements.h) and the message an unmet one gives.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "toolkit/requirements.h"

using namespace kgpu;
using namespace kgpu::toolkit;
using ::testing::HasSubstr;

namespace {

NodeProperties node(std::string cuda = "12.4", std::string driver = "550.54.15", std::string brand = "tesla",
                    std::string arch = "9.0") {
    return {cuda, driver, {{3, "NVIDIA H100 80GB HBM3", arch, brand}}};
}

bool met(std::string value, const NodeProperties& n = node()) {
    auto r = check_requirements({{"NVIDIA_REQUIRE_CUDA", value}}, n);
    EXPECT_TRUE(r) << r.error().message;
    return r && !*r;
}

TEST(Requirements, SpacesOrCommasAnd) {
    // The example: cuda>=12.4 OR (brand=tesla AND driver>=535).
    const std::string req = "cuda>=12.8 brand=tesla,driver>=535";
    EXPECT_TRUE(met(req));                                   // cuda fails, the second term holds
    EXPECT_FALSE(met(req, node("12.4", "530.30.02")));       // both terms fail
    EXPECT_FALSE(met(req, node("12.4", "550.54.15", "geforce")));
    EXPECT_TRUE(met(req, node("12.8", "570.86.10", "geforce")));
    EXPECT_TRUE(met("  cuda>=12.0   "));
}

TEST(Requirements, SeparateVariablesAreAnded) {
    auto r = check_requirements({{"NVIDIA_REQUIRE_CUDA", "cuda>=12.0"}, {"NVIDIA_REQUIRE_ARCH", "arch>=10.0"}}, node());
    ASSERT_TRUE(r);
    ASSERT_TRUE(*r);
    EXPECT_EQ((*r)->variable, "NVIDIA_REQUIRE_ARCH");
    EXPECT_EQ((*r)->gpu, 3u);
}

TEST(Requirements, Versions) {
    EXPECT_TRUE(met("cuda=12.4.0"));
    EXPECT_TRUE(met("cuda>=12.4"));
    EXPECT_TRUE(met("cuda<=12.4"));
    EXPECT_FALSE(met("cuda<12.4"));
    EXPECT_FALSE(met("cuda>12.4"));
    EXPECT_TRUE(met("cuda!=12.3"));
    EXPECT_TRUE(met("cuda>12.3.99"));
    EXPECT_TRUE(met("driver>=550.54"));
    EXPECT_TRUE(met("driver<550.100"));   // numeric, not text, comparison
    EXPECT_TRUE(met("arch>=8.0"));
    EXPECT_FALSE(met("arch<9.0"));
}

TEST(Requirements, BrandIsCaseInsensitive) {
    EXPECT_TRUE(met("brand=Tesla"));
    EXPECT_TRUE(met("brand!=geforce"));
    EXPECT_FALSE(met("brand=nvidia"));
    auto r = check_requirements({{"NVIDIA_REQUIRE_BRAND", "brand>=tesla"}}, node());
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().message, HasSubstr("brand compares only with = or !="));
}

TEST(Requirements, EveryGpuMustMeetDeviceRules) {
    NodeProperties n = node();
    n.gpus.push_back({5, "Tesla T4", "7.5", "tesla"});
    auto r = check_requirements({{"NVIDIA_REQUIRE_ARCH", "arch>=8.0"}}, n);
    ASSERT_TRUE(r);
    ASSERT_TRUE(*r);
    EXPECT_EQ((*r)->gpu, 5u);
    // No GPU selected: device rules cannot hold, node rules still can.
    n.gpus.clear();
    EXPECT_FALSE(met("brand=tesla", n));
    EXPECT_TRUE(met("cuda>=12.0 brand=tesla", n));
}

TEST(Requirements, UnknownPropertiesAreSkippedMalformedOnesFail) {
    EXPECT_TRUE(met("foo=bar"));
    EXPECT_TRUE(met("cuda>=12.0,foo>=3"));
    EXPECT_FALSE(met("cuda>=13.0 foo=bar"));
    for (std::string bad : {"cuda", "cuda>=twelve", ">=12", "cuda=>12"}) {
        auto r = check_requirements({{"NVIDIA_REQUIRE_CUDA", bad}}, node());
        EXPECT_FALSE(r) << bad;
        if (!r) {
            EXPECT_THAT(r.error().message, HasSubstr("NVIDIA_REQUIRE_CUDA")) << bad;
        }
    }
}

TEST(Requirements, ExplainNamesRequirementVersionsAndTheFix) {
    NodeProperties n = node("12.4", "550.54.15");
    auto r = check_requirements({{"NVIDIA_REQUIRE_CUDA", "cuda>=12.8"}}, n);
    ASSERT_TRUE(r && *r);
    const std::string msg = explain(**r, n);
    EXPECT_THAT(msg, HasSubstr("NVIDIA_REQUIRE_CUDA=\"cuda>=12.8\""));
    EXPECT_THAT(msg, HasSubstr("driver 550.54.15"));
    EXPECT_THAT(msg, HasSubstr("CUDA 12.4"));
    EXPECT_THAT(msg, HasSubstr("CUDA 12.8 needs NVIDIA driver >= 570"));  // the compat table's minimum
    EXPECT_THAT(msg, HasSubstr("minor-version compatibility"));
    EXPECT_THAT(msg, HasSubstr("kgpu doctor compat --cuda 12.8 --driver 550.54.15"));
    auto arch = check_requirements({{"NVIDIA_REQUIRE_ARCH", "arch>=10.0"}}, n);
    ASSERT_TRUE(arch && *arch);
    EXPECT_THAT(explain(**arch, n), HasSubstr("GPU 3 NVIDIA H100 80GB HBM3 (compute capability 9.0"));
}

}  // namespace
