// The library's surface: every NVML entry point name resolves, nothing else is exported,
// unmodelled names answer NOT_SUPPORTED, init reference counting and handle validation.
#include "sim_support.h"

#include <set>

using namespace simtest;

namespace {

std::vector<std::string> entryPoints() {
    std::ifstream in(std::string(KGPU_SOURCE_DIR) + "/sim/entry_points.txt");
    std::vector<std::string> names;
    for (std::string line; std::getline(in, line);)
        if (line.rfind("nvml", 0) == 0) names.push_back(line);
    return names;
}

TEST(SimExports, EveryEntryPointResolves) {
    auto names = entryPoints();
    EXPECT_EQ(names.size(), 415u);
    for (const auto& n : names) EXPECT_NE(::dlsym(library(), n.c_str()), nullptr) << n;
}

TEST(SimExports, OnlyNvmlNamesAreExported) {
    std::string cmd = std::string("nm -D --defined-only '") + KGPU_SIM_LIBRARY + "' 2>/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::set<std::string> exported;
    char line[512];
    while (std::fgets(line, sizeof line, p)) {
        std::istringstream is(line);
        std::string addr, type, sym;
        is >> addr >> type >> sym;
        if (sym.empty()) continue;  // "nm" prints "addr type name"
        auto at = sym.find('@');
        exported.insert(sym.substr(0, at));
    }
    int rc = ::pclose(p);
    if (exported.empty() && rc != 0) GTEST_SKIP() << "nm is not available";
    for (const auto& s : exported) EXPECT_EQ(s.rfind("nvml", 0), 0u) << "unexpected export " << s;
    auto names = entryPoints();
    EXPECT_EQ(exported, std::set<std::string>(names.begin(), names.end()));
}

TEST(SimExports, UnmodelledNamesAnswerNotSupported) {
    // Names from the list that nvml_abi.h does not declare: weak stubs taking no arguments.
    for (const char* n : {"nvmlDeviceGetFanSpeed", "nvmlDeviceSetPersistenceMode", "nvmlVgpuTypeGetName"}) {
        auto f = reinterpret_cast<int (*)()>(::dlsym(library(), n));
        ASSERT_NE(f, nullptr) << n;
        EXPECT_EQ(f(), NVML_ERROR_NOT_SUPPORTED) << n;
    }
}

TEST(SimExports, ErrorStrings) {
    EXPECT_STREQ(NV(nvmlErrorString)(NVML_SUCCESS), "Success");
    EXPECT_STREQ(NV(nvmlErrorString)(NVML_ERROR_GPU_IS_LOST), "GPU is lost");
    EXPECT_STREQ(NV(nvmlErrorString)(NVML_ERROR_UNINITIALIZED), "Uninitialized");
    EXPECT_STREQ(NV(nvmlErrorString)(12345), "Unknown Error");
    EXPECT_STREQ(NV(nvmlErrorString)(NVML_ERROR_UNKNOWN), "Unknown Error");
}

class SimInit : public SimTest {};

TEST_F(SimInit, CallsBeforeInitAreUninitialized) {
    unsigned n = 0;
    EXPECT_EQ(NV(nvmlDeviceGetCount_v2)(&n), NVML_ERROR_UNINITIALIZED);
    char buf[80];
    EXPECT_EQ(NV(nvmlSystemGetDriverVersion)(buf, sizeof buf), NVML_ERROR_UNINITIALIZED);
    nvmlEventSet_t set{};
    EXPECT_EQ(NV(nvmlEventSetCreate)(&set), NVML_ERROR_UNINITIALIZED);
    EXPECT_EQ(NV(nvmlShutdown)(), NVML_ERROR_UNINITIALIZED);
}

TEST_F(SimInit, ReferenceCounted) {
    ASSERT_EQ(start(fixture("t4x4.yaml")), NVML_SUCCESS);
    EXPECT_EQ(NV(nvmlInit)(), NVML_SUCCESS);
    EXPECT_EQ(NV(nvmlInitWithFlags)(0), NVML_SUCCESS);
    unsigned n = 0;
    EXPECT_EQ(NV(nvmlShutdown)(), NVML_SUCCESS);
    EXPECT_EQ(NV(nvmlShutdown)(), NVML_SUCCESS);
    EXPECT_EQ(NV(nvmlDeviceGetCount_v2)(&n), NVML_SUCCESS);
    EXPECT_EQ(n, 4u);
    EXPECT_EQ(NV(nvmlShutdown)(), NVML_SUCCESS);
    EXPECT_EQ(NV(nvmlDeviceGetCount_v2)(&n), NVML_ERROR_UNINITIALIZED);
    EXPECT_EQ(NV(nvmlShutdown)(), NVML_ERROR_UNINITIALIZED);
}

TEST_F(SimInit, ReinitReloadsAndInvalidatesOldHandles) {
    ASSERT_EQ(start(fixture("t4x4.yaml")), NVML_SUCCESS);
    nvmlDevice_t old = dev(0);
    ASSERT_EQ(NV(nvmlShutdown)(), NVML_SUCCESS);
    // Uninitialised first, then stale.
    char buf[96];
    EXPECT_EQ(NV(nvmlDeviceGetName)(old, buf, sizeof buf), NVML_ERROR_UNINITIALIZED);
    ASSERT_EQ(start(fixture("dgx-h100.yaml")), NVML_SUCCESS);
    EXPECT_EQ(NV(nvmlDeviceGetName)(old, buf, sizeof buf), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(name(dev(0)), "NVIDIA H100 80GB HBM3");
}

TEST_F(SimInit, ForeignAndNullHandlesAreRejected) {
    ASSERT_EQ(start(fixture("t4x4.yaml")), NVML_SUCCESS);
    int notAHandle[16] = {};
    char buf[96];
    EXPECT_EQ(NV(nvmlDeviceGetName)(reinterpret_cast<nvmlDevice_t>(notAHandle), buf, sizeof buf),
              NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(NV(nvmlDeviceGetName)(nullptr, buf, sizeof buf), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(NV(nvmlDeviceGetName)(dev(0), nullptr, 96), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(NV(nvmlDeviceGetCount_v2)(nullptr), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(NV(nvmlDeviceGetHandleByIndex_v2)(0, nullptr), NVML_ERROR_INVALID_ARGUMENT);
    nvmlEventData_t e{};
    EXPECT_EQ(NV(nvmlEventSetWait_v2)(reinterpret_cast<nvmlEventSet_t>(notAHandle), &e, 0),
              NVML_ERROR_INVALID_ARGUMENT);
    nvmlGpuInstanceInfo_t gi{};
    EXPECT_EQ(NV(nvmlGpuInstanceGetInfo)(reinterpret_cast<nvmlGpuInstance_t>(dev(0)), &gi),
              NVML_ERROR_INVALID_ARGUMENT);
}

}  // namespace
