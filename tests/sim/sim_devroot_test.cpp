// KGPU_SIM_DEV_ROOT (and the fixture key dev_root): the simulator shows only the GPUs whose
// <dir>/dev/nvidia<minor> exists and the MIG devices whose capability nodes exist, as the real
// driver shows a container only the devices whose nodes it can open (DESIGN.md "Fixed interfaces").
#include "sim_support.h"

#include <fstream>

using namespace simtest;

namespace {

class SimDevRoot : public SimTest {
protected:
    void TearDown() override {
        SimTest::TearDown();
        ::unsetenv("KGPU_SIM_DEV_ROOT");
    }
    // An empty file is enough: the driver's rule is about the node being there.
    void node(const std::string& rel) {
        std::filesystem::create_directories(std::filesystem::path(root.file(rel)).parent_path());
        std::ofstream(root.file(rel)) << "";
    }
    unsigned count() {
        unsigned n = 99;
        EXPECT_EQ(NV(nvmlDeviceGetCount_v2)(&n), NVML_SUCCESS);
        return n;
    }
    // The driver's mig-minors numbering: config 1, monitor 2, then 135 per GPU minor, 9 per GI.
    static unsigned cap(unsigned gpu_minor, unsigned gi, int ci = -1) { return 3 + gpu_minor * 135 + gi * 9 + (ci < 0 ? 0 : 1 + ci); }
    TempDir root;
};

const char* kGpu3 = "GPU-2fbe396f-df9c-d5a1-4b31-c1658bb71f80";
const char* kGpu5 = "GPU-2a40fabd-33f4-09e2-3954-664c912cf633";
const char* kGpu0 = "GPU-64bbca15-1776-feaf-35c7-c0761cd05691";

TEST_F(SimDevRoot, OnlyGpusWithDeviceNodesAreEnumeratedAndRenumbered) {
    node("dev/nvidia3");
    node("dev/nvidia5");
    node("dev/nvidiactl");
    ::setenv("KGPU_SIM_DEV_ROOT", root.file("").c_str(), 1);
    ASSERT_EQ(start(fixture("dgx-h100.yaml")), NVML_SUCCESS);
    ASSERT_EQ(count(), 2u);
    EXPECT_EQ(uuid(dev(0)), kGpu3);
    EXPECT_EQ(uuid(dev(1)), kGpu5);
    unsigned idx = 99, minor = 99;
    EXPECT_EQ(NV(nvmlDeviceGetIndex)(dev(1), &idx), NVML_SUCCESS);
    EXPECT_EQ(idx, 1u);
    EXPECT_EQ(NV(nvmlDeviceGetMinorNumber)(dev(0), &minor), NVML_SUCCESS);
    EXPECT_EQ(minor, 3u);
    nvmlDevice_t d = nullptr;
    EXPECT_EQ(NV(nvmlDeviceGetHandleByIndex_v2)(2, &d), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(NV(nvmlDeviceGetHandleByUUID)(kGpu0, &d), NVML_ERROR_NOT_FOUND);
    EXPECT_EQ(NV(nvmlDeviceGetHandleByUUID)(kGpu5, &d), NVML_SUCCESS);
    EXPECT_EQ(NV(nvmlDeviceGetHandleByPciBusId_v2)("00000000:18:00.0", &d), NVML_ERROR_NOT_FOUND);  // GPU 0
    EXPECT_EQ(NV(nvmlDeviceGetHandleByPciBusId_v2)("00000000:5D:00.0", &d), NVML_SUCCESS);          // GPU 3
}

TEST_F(SimDevRoot, NoNodesNoGpus) {
    node("dev/nvidiactl");
    ::setenv("KGPU_SIM_DEV_ROOT", root.file("").c_str(), 1);
    ASSERT_EQ(start(fixture("dgx-h100.yaml")), NVML_SUCCESS);
    EXPECT_EQ(count(), 0u);
}

TEST_F(SimDevRoot, FixtureKeyDoesTheSame) {
    node("dev/nvidia3");
    std::ifstream in(fixture("dgx-h100.yaml"));
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string f = root.write("node.yaml", "dev_root: \"" + root.file("") + "\"\n" + ss.str());
    ASSERT_EQ(start(f), NVML_SUCCESS);
    ASSERT_EQ(count(), 1u);
    EXPECT_EQ(uuid(dev(0)), kGpu3);
}

TEST_F(SimDevRoot, MigDevicesNeedTheirCapabilityNodes) {
    // a100-mig: GPU 0 (minor 0) has seven 1g.10gb devices, GPU instances 7..13, CI 0 each.
    node("dev/nvidia0");
    node("dev/nvidia-caps/nvidia-cap" + std::to_string(cap(0, 9)));
    node("dev/nvidia-caps/nvidia-cap" + std::to_string(cap(0, 9, 0)));
    node("dev/nvidia-caps/nvidia-cap" + std::to_string(cap(0, 10)));  // GI node only: not enough
    ::setenv("KGPU_SIM_DEV_ROOT", root.file("").c_str(), 1);
    ASSERT_EQ(start(fixture("a100-mig.yaml")), NVML_SUCCESS);
    ASSERT_EQ(count(), 1u);
    std::vector<std::string> visible;
    for (unsigned i = 0; i < 7; ++i) {
        nvmlDevice_t m = nullptr;
        nvmlReturn_t r = NV(nvmlDeviceGetMigDeviceHandleByIndex)(dev(0), i, &m);
        if (r == NVML_ERROR_NOT_FOUND) continue;
        ASSERT_EQ(r, NVML_SUCCESS);
        unsigned gi = 0;
        ASSERT_EQ(NV(nvmlDeviceGetGpuInstanceId)(m, &gi), NVML_SUCCESS);
        EXPECT_EQ(gi, 9u);
        visible.push_back(uuid(m));
    }
    ASSERT_EQ(visible.size(), 1u);
    nvmlDevice_t m = nullptr;
    EXPECT_EQ(NV(nvmlDeviceGetHandleByUUID)(visible[0].c_str(), &m), NVML_SUCCESS);
    // A hidden MIG device (GI 7, the fixture's first) is not found by UUID either.
    EXPECT_EQ(NV(nvmlDeviceGetHandleByUUID)("MIG-4b69808b-66a3-1662-f86c-3b76eedd0860", &m), NVML_ERROR_NOT_FOUND);
}

}  // namespace
