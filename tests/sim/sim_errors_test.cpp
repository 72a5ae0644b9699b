// A broken environment or fixture makes init fail cleanly, with a message naming file:line:key.
#include <filesystem>

#include "sim_support.h"

using namespace simtest;

namespace {

// A valid one-GPU node; tests replace or append lines to break it.
const std::string kGpu =
    "  - name: \"Test GPU\"\n"                                       // line 4
    "    uuid: \"GPU-11111111-2222-3333-4444-555555555555\"\n"       // 5
    "    serial: \"1\"\n"                                            // 6
    "    minor: 0\n"                                                 // 7
    "    pci_bus_id: \"00000000:18:00.0\"\n"                         // 8
    "    pci_device_id: 0x20B510DE\n"                                // 9
    "    numa_node: 0\n"                                             // 10
    "    memory_mib: 1024\n"                                         // 11
    "    compute_capability: \"8.0\"\n"                              // 12
    "    architecture: ampere\n"                                     // 13
    "    power_limit_w: 300\n"                                       // 14
    "    pcie: {host_bridge: hb0, switches: []}\n";                  // 15
const std::string kHead = "driver_version: \"550.54.15\"\ncuda_driver_version: 12040\ngpus:\n";

std::string replaced(std::string s, const std::string& from, const std::string& to) {
    auto at = s.find(from);
    if (at == std::string::npos) std::abort();
    return s.replace(at, from.size(), to);
}

class SimErrors : public SimTest {
protected:
    TempDir tmp;
    // Initialises with `yaml` as the node file; returns init's result and what went to stderr.
    std::pair<nvmlReturn_t, std::string> tryInit(const std::string& yaml, std::string* file = nullptr) {
        std::string path = tmp.write("node.yaml", yaml);
        if (file) *file = path;
        StderrCapture err;
        nvmlReturn_t r = start(path);
        return {r, err.text()};
    }
};

TEST_F(SimErrors, TheBaseFixtureIsValid) {
    auto [r, err] = tryInit(kHead + kGpu);
    EXPECT_EQ(r, NVML_SUCCESS) << err;
    EXPECT_EQ(name(dev(0)), "Test GPU");
}

TEST_F(SimErrors, InforomVersionsDefaultAndFromTheFixture) {
    char buf[NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE];
    {
        auto [r, err] = tryInit(kHead + kGpu);
        ASSERT_EQ(r, NVML_SUCCESS) << err;
        ASSERT_EQ(NV(nvmlDeviceGetInforomImageVersion)(dev(0), buf, sizeof buf), NVML_SUCCESS);
        EXPECT_STREQ(buf, "G000.0000.00.00");
        ASSERT_EQ(NV(nvmlDeviceGetInforomVersion)(dev(0), NVML_INFOROM_OEM, buf, sizeof buf), NVML_SUCCESS);
        EXPECT_STREQ(buf, "2.1");
        ASSERT_EQ(NV(nvmlDeviceGetInforomVersion)(dev(0), NVML_INFOROM_ECC, buf, sizeof buf), NVML_SUCCESS);
        EXPECT_STREQ(buf, "7.0");
        EXPECT_EQ(NV(nvmlDeviceGetInforomVersion)(dev(0), NVML_INFOROM_POWER, buf, sizeof buf), NVML_ERROR_NOT_SUPPORTED);
        EXPECT_EQ(NV(nvmlDeviceGetInforomVersion)(dev(0), NVML_INFOROM_OEM, buf, 3), NVML_ERROR_INSUFFICIENT_SIZE);
        NV(nvmlShutdown)();
    }
    {
        auto [r, err] = tryInit(kHead + kGpu + "    inforom: {image: \"G520.0200.00.05\", power: \"3.0\", ecc: \"\"}\n");
        ASSERT_EQ(r, NVML_SUCCESS) << err;
        ASSERT_EQ(NV(nvmlDeviceGetInforomImageVersion)(dev(0), buf, sizeof buf), NVML_SUCCESS);
        EXPECT_STREQ(buf, "G520.0200.00.05");
        ASSERT_EQ(NV(nvmlDeviceGetInforomVersion)(dev(0), NVML_INFOROM_POWER, buf, sizeof buf), NVML_SUCCESS);
        EXPECT_STREQ(buf, "3.0");
        EXPECT_EQ(NV(nvmlDeviceGetInforomVersion)(dev(0), NVML_INFOROM_ECC, buf, sizeof buf), NVML_ERROR_NOT_SUPPORTED);
        NV(nvmlShutdown)();
    }
    std::string file;
    auto [r, err] = tryInit(kHead + kGpu + "    inforom: {img: x}\n", &file);
    EXPECT_EQ(r, NVML_ERROR_UNKNOWN);
    EXPECT_NE(err.find(file + ":16: gpus[0].inforom.img: unknown key"), std::string::npos) << err;
}

TEST_F(SimErrors, MissingNodeVariable) {
    StderrCapture err;
    // The simulator's own configuration, not a driver state: UNKNOWN (not DRIVER_NOT_LOADED, whose
    // meaning is "the kernel module is not loaded"), and the error string says what to set.
    EXPECT_EQ(NV(nvmlInit_v2)(), NVML_ERROR_UNKNOWN);
    const std::string fixture = std::filesystem::path(KGPU_SIM_LIBRARY).parent_path().string() + "/nodes/dgx-h100.yaml";
    EXPECT_NE(err.text().find("kgpu-sim: KGPU_SIM_NODE is unset"), std::string::npos) << err.text();
    EXPECT_NE(err.text().find("KGPU_SIM_NODE=" + fixture), std::string::npos) << err.text();
    EXPECT_NE(std::string(NV(nvmlErrorString)(NVML_ERROR_UNKNOWN)).find("KGPU_SIM_NODE=" + fixture), std::string::npos);
    unsigned n = 0;
    EXPECT_EQ(NV(nvmlDeviceGetCount_v2)(&n), NVML_ERROR_UNINITIALIZED);
}

TEST_F(SimErrors, MissingFile) {
    StderrCapture err;
    EXPECT_EQ(start(tmp.file("nope.yaml")), NVML_ERROR_UNKNOWN);
    EXPECT_NE(err.text().find("nope.yaml"), std::string::npos);
}

TEST_F(SimErrors, UnknownKey) {
    std::string file;
    auto [r, err] = tryInit(kHead + kGpu + "    colour: green\n", &file);
    EXPECT_EQ(r, NVML_ERROR_UNKNOWN);
    EXPECT_NE(err.find("kgpu-sim: " + file + ":16: gpus[0].colour: unknown key"), std::string::npos) << err;
}

TEST_F(SimErrors, UnknownTopLevelKey) {
    std::string file;
    auto [r, err] = tryInit("drivr_version: x\n" + kHead + kGpu, &file);
    EXPECT_EQ(r, NVML_ERROR_UNKNOWN);
    EXPECT_NE(err.find(file + ":1: drivr_version: unknown key"), std::string::npos) << err;
}

TEST_F(SimErrors, WrongType) {
    std::string file;
    auto [r, err] = tryInit(kHead + replaced(kGpu, "minor: 0", "minor: zero"), &file);
    EXPECT_EQ(r, NVML_ERROR_UNKNOWN);
    EXPECT_NE(err.find(file + ":7: gpus[0].minor: expected an integer"), std::string::npos) << err;
}

TEST_F(SimErrors, WrongTypeList) {
    std::string file;
    auto [r, err] = tryInit(kHead + replaced(kGpu, "switches: []", "switches: {a: b}"), &file);
    EXPECT_EQ(r, NVML_ERROR_UNKNOWN);
    EXPECT_NE(err.find(file + ":15: gpus[0].pcie.switches: expected a list"), std::string::npos) << err;
}

TEST_F(SimErrors, MissingUuid) {
    std::string file;
    auto [r, err] = tryInit(kHead + replaced(kGpu, "    uuid: \"GPU-11111111-2222-3333-4444-555555555555\"\n", ""),
                            &file);
    EXPECT_EQ(r, NVML_ERROR_UNKNOWN);
    EXPECT_NE(err.find(file + ":4: gpus[0].uuid: required key missing"), std::string::npos) << err;
}

TEST_F(SimErrors, BadUuidAndBusId) {
    std::string file;
    auto [r, err] = tryInit(kHead + replaced(kGpu, "GPU-11111111-2222", "GPU-1111111X-2222"), &file);
    EXPECT_EQ(r, NVML_ERROR_UNKNOWN);
    EXPECT_NE(err.find(file + ":5: gpus[0].uuid: expected a UUID"), std::string::npos) << err;
    auto [r2, err2] = tryInit(kHead + replaced(kGpu, "00000000:18:00.0", "18-00"), &file);
    EXPECT_EQ(r2, NVML_ERROR_UNKNOWN);
    EXPECT_NE(err2.find(file + ":8: gpus[0].pci_bus_id: expected a PCI bus id"), std::string::npos) << err2;
}

TEST_F(SimErrors, YamlSyntaxError) {
    std::string file;
    auto [r, err] = tryInit(kHead + kGpu + "  - name: [unclosed\n", &file);
    EXPECT_EQ(r, NVML_ERROR_UNKNOWN);
    EXPECT_NE(err.find("kgpu-sim: " + file + ":"), std::string::npos) << err;
    EXPECT_NE(err.find("(yaml)"), std::string::npos) << err;
}

TEST_F(SimErrors, AsymmetricNvlink) {
    std::string second = replaced(replaced(replaced(kGpu, "GPU-11111111", "GPU-21111111"), ":18:", ":19:"),
                                  "minor: 0", "minor: 1");
    std::string file;
    auto [r, err] = tryInit(kHead + kGpu + "    nvlink: [{peer: 1, links: 4}]\n" + second, &file);
    EXPECT_EQ(r, NVML_ERROR_UNKNOWN);
    EXPECT_NE(err.find(file + ":16: gpus[0].nvlink[0].peer: a symmetric link"), std::string::npos) << err;
    // Made symmetric, it loads and shows 4 links each way.
    auto [r2, err2] = tryInit(kHead + kGpu + "    nvlink: [{peer: 1, links: 4}]\n" + second +
                              "    nvlink: [{peer: 0, links: 4}]\n");
    ASSERT_EQ(r2, NVML_SUCCESS) << err2;
    EXPECT_EQ(linksTo(0, "00000000:19:00.0"), 4u);
    EXPECT_EQ(linksTo(1, "00000000:18:00.0"), 4u);
}

TEST_F(SimErrors, InitErrorMakesEveryInitFail) {
    auto [r, err] = tryInit("init_error: DRIVER_NOT_LOADED\n" + kHead + kGpu);
    EXPECT_EQ(r, NVML_ERROR_DRIVER_NOT_LOADED);
    EXPECT_EQ(NV(nvmlInit)(), NVML_ERROR_DRIVER_NOT_LOADED);
    unsigned n = 0;
    EXPECT_EQ(NV(nvmlDeviceGetCount_v2)(&n), NVML_ERROR_UNINITIALIZED);
    auto [r2, err2] = tryInit("init_error: LIB_RM_VERSION_MISMATCH\n" + kHead + kGpu);
    EXPECT_EQ(r2, NVML_ERROR_LIB_RM_VERSION_MISMATCH);
    auto [r3, err3] = tryInit("init_error: NO_PERMISSION\n" + kHead + kGpu);
    EXPECT_EQ(r3, NVML_ERROR_NO_PERMISSION);
    auto [r4, err4] = tryInit("init_error: BROKEN\n" + kHead + kGpu);
    EXPECT_EQ(r4, NVML_ERROR_UNKNOWN);
    EXPECT_NE(err4.find(":1: init_error: expected an NVML error name"), std::string::npos) << err4;
}

TEST_F(SimErrors, GpuLostFromTheStart) {
    std::string second = replaced(replaced(replaced(kGpu, "GPU-11111111", "GPU-21111111"), ":18:", ":19:"),
                                  "minor: 0", "minor: 1");
    auto [r, err] = tryInit(kHead + kGpu + second + "    lost: true\n");
    ASSERT_EQ(r, NVML_SUCCESS) << err;
    unsigned n = 0;
    ASSERT_EQ(NV(nvmlDeviceGetCount_v2)(&n), NVML_SUCCESS);
    EXPECT_EQ(n, 2u);
    char buf[96];
    EXPECT_EQ(NV(nvmlDeviceGetName)(dev(1), buf, sizeof buf), NVML_ERROR_GPU_IS_LOST);
    EXPECT_EQ(NV(nvmlDeviceGetName)(dev(0), buf, sizeof buf), NVML_SUCCESS);
}

TEST_F(SimErrors, EveryShippedFixtureLoads) {
    for (const char* f : {"dgx-h100.yaml", "pcie-nvlink-pairs.yaml", "t4x4.yaml", "a100-mig.yaml", "empty.yaml"}) {
        StderrCapture err;
        EXPECT_EQ(start(fixture(f)), NVML_SUCCESS) << f;
        std::string text = err.text();
        EXPECT_TRUE(text.empty()) << f << ": " << text;
        EXPECT_EQ(NV(nvmlShutdown)(), NVML_SUCCESS);
    }
}

}  // namespace
