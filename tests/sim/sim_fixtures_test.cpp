// What each fixture in sim/nodes/ looks like through the NVML API: identity, PCI, memory,
// topology, NVLink, MIG, telemetry, and the older struct layouts.
#include "sim_support.h"

#include <cstring>

using namespace simtest;

namespace {

class SimFixtures : public SimTest {};

TEST_F(SimFixtures, DgxH100Identity) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml")), NVML_SUCCESS);
    unsigned n = 0;
    ASSERT_EQ(NV(nvmlDeviceGetCount_v2)(&n), NVML_SUCCESS);
    ASSERT_EQ(n, 8u);
    EXPECT_EQ(NV(nvmlDeviceGetCount)(&n), NVML_SUCCESS);
    EXPECT_EQ(n, 8u);
    char buf[96];
    ASSERT_EQ(NV(nvmlSystemGetDriverVersion)(buf, sizeof buf), NVML_SUCCESS);
    EXPECT_STREQ(buf, "550.54.15");
    ASSERT_EQ(NV(nvmlSystemGetNVMLVersion)(buf, sizeof buf), NVML_SUCCESS);
    EXPECT_STREQ(buf, "12.550.54.15");
    EXPECT_EQ(NV(nvmlSystemGetDriverVersion)(buf, 9), NVML_ERROR_INSUFFICIENT_SIZE);  // needs 10 with NUL
    int cuda = 0;
    EXPECT_EQ(NV(nvmlSystemGetCudaDriverVersion)(&cuda), NVML_SUCCESS);
    EXPECT_EQ(cuda, 12040);
    EXPECT_EQ(NV(nvmlSystemGetCudaDriverVersion_v2)(&cuda), NVML_SUCCESS);
    EXPECT_EQ(cuda, 12040);

    const char* buses[] = {"18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"};
    for (unsigned i = 0; i < 8; ++i) {
        SCOPED_TRACE(i);
        nvmlDevice_t d = dev(i);
        EXPECT_EQ(name(d), "NVIDIA H100 80GB HBM3");
        std::string u = uuid(d);
        EXPECT_EQ(u.rfind("GPU-", 0), 0u);
        EXPECT_EQ(u.size(), 40u);
        nvmlDevice_t byUuid = nullptr;
        EXPECT_EQ(NV(nvmlDeviceGetHandleByUUID)(u.c_str(), &byUuid), NVML_SUCCESS);
        EXPECT_EQ(byUuid, d);
        nvmlPciInfo_t p = pci(d);
        EXPECT_EQ(std::string(p.busId), std::string("00000000:") + buses[i] + ":00.0");
        EXPECT_EQ(std::string(p.busIdLegacy), std::string("0000:") + buses[i] + ":00.0");
        EXPECT_EQ(p.pciDeviceId, 0x233010DEu);
        EXPECT_EQ(p.pciSubSystemId, 0x16C110DEu);
        EXPECT_EQ(p.bus, std::stoul(buses[i], nullptr, 16));
        unsigned v = 0;
        EXPECT_EQ(NV(nvmlDeviceGetMinorNumber)(d, &v), NVML_SUCCESS);
        EXPECT_EQ(v, i);
        EXPECT_EQ(NV(nvmlDeviceGetIndex)(d, &v), NVML_SUCCESS);
        EXPECT_EQ(v, i);
        EXPECT_EQ(NV(nvmlDeviceGetNumaNodeId)(d, &v), NVML_SUCCESS);
        EXPECT_EQ(v, i < 4 ? 0u : 1u);
        int major = 0, minor = 0;
        EXPECT_EQ(NV(nvmlDeviceGetCudaComputeCapability)(d, &major, &minor), NVML_SUCCESS);
        EXPECT_EQ(major, 9);
        EXPECT_EQ(minor, 0);
        nvmlDeviceArchitecture_t arch = 0;
        EXPECT_EQ(NV(nvmlDeviceGetArchitecture)(d, &arch), NVML_SUCCESS);
        EXPECT_EQ(arch, static_cast<unsigned>(NVML_DEVICE_ARCH_HOPPER));
        EXPECT_EQ(NV(nvmlDeviceGetEnforcedPowerLimit)(d, &v), NVML_SUCCESS);
        EXPECT_EQ(v, 700000u);
        nvmlMemory_t m{};
        EXPECT_EQ(NV(nvmlDeviceGetMemoryInfo)(d, &m), NVML_SUCCESS);
        EXPECT_EQ(m.total, 81559ull << 20);
        EXPECT_EQ(m.used, 0u);
        EXPECT_EQ(m.free, m.total);
        unsigned cur = 9, pend = 9;
        EXPECT_EQ(NV(nvmlDeviceGetMigMode)(d, &cur, &pend), NVML_SUCCESS);  // MIG capable, off
        EXPECT_EQ(cur, unsigned(NVML_DEVICE_MIG_DISABLE));
        EXPECT_EQ(pend, unsigned(NVML_DEVICE_MIG_DISABLE));
        nvmlFieldValue_t f = field(d, NVML_FI_DEV_MEMORY_TEMP);
        EXPECT_EQ(f.nvmlReturn, NVML_SUCCESS);
        EXPECT_EQ(f.valueType, NVML_VALUE_TYPE_UNSIGNED_INT);
        EXPECT_GE(f.value.uiVal, 35u);
        EXPECT_LE(f.value.uiVal, 45u);
    }
    EXPECT_EQ(NV(nvmlDeviceGetName)(dev(0), buf, 5), NVML_ERROR_INSUFFICIENT_SIZE);
    nvmlDevice_t d = nullptr;
    EXPECT_EQ(NV(nvmlDeviceGetHandleByIndex_v2)(8, &d), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(NV(nvmlDeviceGetHandleByUUID)("GPU-00000000-0000-0000-0000-000000000000", &d), NVML_ERROR_NOT_FOUND);
}

TEST_F(SimFixtures, HandleByPciBusIdAcceptsBothForms) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml")), NVML_SUCCESS);
    for (const char* id : {"00000000:2A:00.0", "0000:2a:00.0", "00000000:2a:00.0", "0000:2A:00.0"}) {
        nvmlDevice_t d = nullptr;
        EXPECT_EQ(NV(nvmlDeviceGetHandleByPciBusId_v2)(id, &d), NVML_SUCCESS) << id;
        EXPECT_EQ(d, dev(1)) << id;
        d = nullptr;
        EXPECT_EQ(NV(nvmlDeviceGetHandleByPciBusId)(id, &d), NVML_SUCCESS) << id;
        EXPECT_EQ(d, dev(1)) << id;
    }
    nvmlDevice_t d = nullptr;
    EXPECT_EQ(NV(nvmlDeviceGetHandleByPciBusId_v2)("0000:2B:00.0", &d), NVML_ERROR_NOT_FOUND);
}

TEST_F(SimFixtures, DgxH100Topology) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml")), NVML_SUCCESS);
    EXPECT_EQ(topo(0, 0), NVML_TOPOLOGY_INTERNAL);
    EXPECT_EQ(topo(0, 1), NVML_TOPOLOGY_MULTIPLE);
    EXPECT_EQ(topo(6, 7), NVML_TOPOLOGY_MULTIPLE);
    EXPECT_EQ(topo(0, 2), NVML_TOPOLOGY_NODE);
    EXPECT_EQ(topo(0, 4), NVML_TOPOLOGY_SYSTEM);
    EXPECT_EQ(topo(3, 4), NVML_TOPOLOGY_SYSTEM);
    // 18 links, all to NVSwitches; every pair is NVLink-capable.
    for (unsigned i = 0; i < 8; ++i) EXPECT_EQ(activeLinks(i), 18u) << i;
    nvmlEnableState_t s{};
    EXPECT_EQ(NV(nvmlDeviceGetNvLinkState)(dev(0), 18, &s), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(NV(nvmlDeviceGetNvLinkState)(dev(0), NVML_NVLINK_MAX_LINKS, &s), NVML_ERROR_NOT_SUPPORTED);
    nvmlPciInfo_t p{};
    ASSERT_EQ(NV(nvmlDeviceGetNvLinkRemotePciInfo_v2)(dev(0), 0, &p), NVML_SUCCESS);
    EXPECT_EQ(p.pciDeviceId, 0x22a310deu);
    EXPECT_STREQ(p.busId, "00000000:05:00.0");
    ASSERT_EQ(NV(nvmlDeviceGetNvLinkRemotePciInfo_v2)(dev(0), 1, &p), NVML_SUCCESS);
    EXPECT_STREQ(p.busId, "00000000:06:00.0");
    nvmlIntNvLinkDeviceType_t t{};
    ASSERT_EQ(NV(nvmlDeviceGetNvLinkRemoteDeviceType)(dev(0), 0, &t), NVML_SUCCESS);
    EXPECT_EQ(t, NVML_NVLINK_DEVICE_TYPE_SWITCH);
    nvmlGpuP2PStatus_t st{};
    ASSERT_EQ(NV(nvmlDeviceGetP2PStatus)(dev(0), dev(7), NVML_P2P_CAPS_INDEX_NVLINK, &st), NVML_SUCCESS);
    EXPECT_EQ(st, NVML_P2P_STATUS_OK);
}

TEST_F(SimFixtures, PcieNvlinkPairs) {
    ASSERT_EQ(start(fixture("pcie-nvlink-pairs.yaml")), NVML_SUCCESS);
    unsigned n = 0;
    ASSERT_EQ(NV(nvmlDeviceGetCount_v2)(&n), NVML_SUCCESS);
    ASSERT_EQ(n, 4u);
    for (unsigned i = 0; i < 4; ++i) {
        EXPECT_EQ(name(dev(i)), "NVIDIA A100 80GB PCIe");
        EXPECT_EQ(pci(dev(i)).pciDeviceId, 0x20B510DEu);
        nvmlMemory_t m{};
        EXPECT_EQ(NV(nvmlDeviceGetMemoryInfo)(dev(i), &m), NVML_SUCCESS);
        EXPECT_EQ(m.total, 81920ull << 20);
    }
    EXPECT_EQ(topo(0, 1), NVML_TOPOLOGY_SINGLE);
    EXPECT_EQ(topo(2, 3), NVML_TOPOLOGY_SINGLE);
    EXPECT_EQ(topo(1, 2), NVML_TOPOLOGY_SYSTEM);
    const std::string bus1 = pci(dev(1)).busId, bus0 = pci(dev(0)).busId, bus3 = pci(dev(3)).busId;
    EXPECT_EQ(linksTo(0, bus1), 12u);
    EXPECT_EQ(linksTo(1, bus0), 12u);
    EXPECT_EQ(linksTo(2, bus3), 12u);
    EXPECT_EQ(linksTo(0, bus3), 0u);
    EXPECT_EQ(activeLinks(0), 12u);
    nvmlIntNvLinkDeviceType_t t{};
    ASSERT_EQ(NV(nvmlDeviceGetNvLinkRemoteDeviceType)(dev(0), 11, &t), NVML_SUCCESS);
    EXPECT_EQ(t, NVML_NVLINK_DEVICE_TYPE_GPU);
    EXPECT_EQ(NV(nvmlDeviceGetNvLinkRemoteDeviceType)(dev(0), 12, &t), NVML_ERROR_NOT_SUPPORTED);
    nvmlGpuP2PStatus_t st{};
    ASSERT_EQ(NV(nvmlDeviceGetP2PStatus)(dev(0), dev(1), NVML_P2P_CAPS_INDEX_NVLINK, &st), NVML_SUCCESS);
    EXPECT_EQ(st, NVML_P2P_STATUS_OK);
    ASSERT_EQ(NV(nvmlDeviceGetP2PStatus)(dev(0), dev(2), NVML_P2P_CAPS_INDEX_NVLINK, &st), NVML_SUCCESS);
    EXPECT_EQ(st, NVML_P2P_STATUS_NOT_SUPPORTED);
    ASSERT_EQ(NV(nvmlDeviceGetP2PStatus)(dev(0), dev(2), NVML_P2P_CAPS_INDEX_READ, &st), NVML_SUCCESS);
    EXPECT_EQ(st, NVML_P2P_STATUS_OK);
}

TEST_F(SimFixtures, T4x4) {
    ASSERT_EQ(start(fixture("t4x4.yaml")), NVML_SUCCESS);
    unsigned n = 0;
    ASSERT_EQ(NV(nvmlDeviceGetCount_v2)(&n), NVML_SUCCESS);
    ASSERT_EQ(n, 4u);
    for (unsigned i = 0; i < 4; ++i) {
        SCOPED_TRACE(i);
        EXPECT_EQ(name(dev(i)), "Tesla T4");
        EXPECT_EQ(pci(dev(i)).pciDeviceId, 0x1EB810DEu);
        int major = 0, minor = 0;
        EXPECT_EQ(NV(nvmlDeviceGetCudaComputeCapability)(dev(i), &major, &minor), NVML_SUCCESS);
        EXPECT_EQ(major * 10 + minor, 75);
        EXPECT_EQ(activeLinks(i), 0u);
        unsigned cur = 0, pend = 0;
        EXPECT_EQ(NV(nvmlDeviceGetMigMode)(dev(i), &cur, &pend), NVML_ERROR_NOT_SUPPORTED);
        nvmlFieldValue_t f = field(dev(i), NVML_FI_DEV_MEMORY_TEMP);
        EXPECT_EQ(f.nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
        nvmlMemory_v2_t m{};
        m.version = nvmlMemory_v2;
        EXPECT_EQ(NV(nvmlDeviceGetMemoryInfo_v2)(dev(i), &m), NVML_SUCCESS);
        EXPECT_EQ(m.total, 15360ull << 20);
        EXPECT_EQ(m.free + m.used + m.reserved, m.total);
    }
    EXPECT_EQ(topo(0, 1), NVML_TOPOLOGY_SINGLE);
    EXPECT_EQ(topo(2, 3), NVML_TOPOLOGY_SINGLE);
    EXPECT_EQ(topo(0, 2), NVML_TOPOLOGY_SYSTEM);
    nvmlGpuP2PStatus_t st{};
    ASSERT_EQ(NV(nvmlDeviceGetP2PStatus)(dev(0), dev(1), NVML_P2P_CAPS_INDEX_NVLINK, &st), NVML_SUCCESS);
    EXPECT_EQ(st, NVML_P2P_STATUS_NOT_SUPPORTED);
    nvmlMemory_v2_t bad{};
    bad.version = 1;
    EXPECT_EQ(NV(nvmlDeviceGetMemoryInfo_v2)(dev(0), &bad), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
}

// What nvml.h documents as not supported on MIG-enabled GPUs (utilisation rates, encoder and
// decoder utilisation; remapped rows while instances exist) and on MIG device handles: the
// simulator refuses it as the driver does (issue #23), and answers for the GPUs with MIG off.
TEST_F(SimFixtures, MigEnabledGpusAndMigHandlesRefuseWhatNvmlRefuses) {
    ASSERT_EQ(start(fixture("a100-mig.yaml")), NVML_SUCCESS);
    for (nvmlDevice_t d : {dev(0), dev(1), mig(0, 0), mig(1, 2)}) {
        nvmlUtilization_t u{};
        unsigned v = 0, p = 0, a = 0, b = 0, c = 0, e = 0;
        EXPECT_EQ(NV(nvmlDeviceGetUtilizationRates)(d, &u), NVML_ERROR_NOT_SUPPORTED);
        EXPECT_EQ(NV(nvmlDeviceGetEncoderUtilization)(d, &v, &p), NVML_ERROR_NOT_SUPPORTED);
        EXPECT_EQ(NV(nvmlDeviceGetDecoderUtilization)(d, &v, &p), NVML_ERROR_NOT_SUPPORTED);
        EXPECT_EQ(NV(nvmlDeviceGetRemappedRows)(d, &a, &b, &c, &e), NVML_ERROR_NOT_SUPPORTED);
        unsigned n = 4;
        nvmlProcessUtilizationSample_t s[4];
        EXPECT_EQ(NV(nvmlDeviceGetProcessUtilization)(d, s, &n, 0), NVML_ERROR_NOT_SUPPORTED);
    }
    for (unsigned i : {2u, 3u}) {  // MIG capable, MIG off
        nvmlUtilization_t u{};
        unsigned v = 0, p = 0, a = 0, b = 0, c = 0, e = 0;
        EXPECT_EQ(NV(nvmlDeviceGetUtilizationRates)(dev(i), &u), NVML_SUCCESS);
        EXPECT_EQ(NV(nvmlDeviceGetEncoderUtilization)(dev(i), &v, &p), NVML_SUCCESS);
        EXPECT_EQ(NV(nvmlDeviceGetDecoderUtilization)(dev(i), &v, &p), NVML_SUCCESS);
        EXPECT_EQ(NV(nvmlDeviceGetRemappedRows)(dev(i), &a, &b, &c, &e), NVML_SUCCESS);
    }
    // What NVML answers per GPU instance stays answered on the MIG handle.
    nvmlMemory_t mem{};
    EXPECT_EQ(NV(nvmlDeviceGetMemoryInfo)(mig(0, 0), &mem), NVML_SUCCESS);
}

TEST_F(SimFixtures, A100MigDevices) {
    ASSERT_EQ(start(fixture("a100-mig.yaml")), NVML_SUCCESS);
    unsigned cur = 9, pend = 9, max = 0;
    ASSERT_EQ(NV(nvmlDeviceGetMigMode)(dev(0), &cur, &pend), NVML_SUCCESS);
    EXPECT_EQ(cur, unsigned(NVML_DEVICE_MIG_ENABLE));
    EXPECT_EQ(pend, unsigned(NVML_DEVICE_MIG_ENABLE));
    ASSERT_EQ(NV(nvmlDeviceGetMaxMigDeviceCount)(dev(0), &max), NVML_SUCCESS);
    EXPECT_EQ(max, 7u);
    for (unsigned i = 0; i < 7; ++i) {
        SCOPED_TRACE(i);
        nvmlDevice_t m = mig(0, i);
        unsigned v = 0;
        EXPECT_EQ(NV(nvmlDeviceIsMigDeviceHandle)(m, &v), NVML_SUCCESS);
        EXPECT_EQ(v, 1u);
        EXPECT_EQ(NV(nvmlDeviceGetGpuInstanceId)(m, &v), NVML_SUCCESS);
        EXPECT_EQ(v, 7 + i);
        EXPECT_EQ(NV(nvmlDeviceGetComputeInstanceId)(m, &v), NVML_SUCCESS);
        EXPECT_EQ(v, 0u);
        EXPECT_EQ(name(m), "NVIDIA A100-SXM4-80GB MIG 1g.10gb");
        std::string u = uuid(m);
        EXPECT_EQ(u.rfind("MIG-", 0), 0u);
        nvmlDevice_t back = nullptr;
        EXPECT_EQ(NV(nvmlDeviceGetHandleByUUID)(u.c_str(), &back), NVML_SUCCESS);
        EXPECT_EQ(back, m);
        EXPECT_EQ(NV(nvmlDeviceGetDeviceHandleFromMigDeviceHandle)(m, &back), NVML_SUCCESS);
        EXPECT_EQ(back, dev(0));
        nvmlMemory_t mem{};
        EXPECT_EQ(NV(nvmlDeviceGetMemoryInfo)(m, &mem), NVML_SUCCESS);
        EXPECT_EQ(mem.total, 9728ull << 20);
        nvmlDeviceAttributes_t a{};
        EXPECT_EQ(NV(nvmlDeviceGetAttributes_v2)(m, &a), NVML_SUCCESS);
        EXPECT_EQ(a.multiprocessorCount, 14u);
        EXPECT_EQ(a.gpuInstanceSliceCount, 1u);
        EXPECT_EQ(a.memorySizeMB, 9728u);
        nvmlEventSet_t set{};
        ASSERT_EQ(NV(nvmlEventSetCreate)(&set), NVML_SUCCESS);
        EXPECT_EQ(NV(nvmlDeviceRegisterEvents)(m, nvmlEventTypeXidCriticalError, set), NVML_ERROR_NOT_SUPPORTED);
        EXPECT_EQ(NV(nvmlEventSetFree)(set), NVML_SUCCESS);
    }
    nvmlDevice_t m = nullptr;
    EXPECT_EQ(NV(nvmlDeviceGetMigDeviceHandleByIndex)(dev(0), 7, &m), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(NV(nvmlDeviceGetMigDeviceHandleByIndex)(dev(1), 4, &m), NVML_ERROR_NOT_FOUND);
    unsigned v = 0;
    EXPECT_EQ(NV(nvmlDeviceIsMigDeviceHandle)(dev(0), &v), NVML_SUCCESS);
    EXPECT_EQ(v, 0u);
    EXPECT_EQ(NV(nvmlDeviceGetGpuInstanceId)(dev(0), &v), NVML_ERROR_NOT_SUPPORTED);

    // GPU 1: 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb.
    const char* profiles[] = {"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"};
    const unsigned long long mems[] = {40192, 19968, 9728, 9728};
    const unsigned sms[] = {42, 28, 14, 14};
    const unsigned giProfiles[] = {9, 14, 19, 19};  // the ids the A100 reports for 3g, 2g, 1g (not the indices)
    const unsigned ciProfiles[] = {2, 1, 0, 0};     // NVML_COMPUTE_INSTANCE_PROFILE_3/2/1_SLICE
    for (unsigned i = 0; i < 4; ++i) {
        SCOPED_TRACE(i);
        nvmlDevice_t d = mig(1, i);
        EXPECT_EQ(name(d), std::string("NVIDIA A100-SXM4-80GB MIG ") + profiles[i]);
        nvmlDeviceAttributes_t a{};
        EXPECT_EQ(NV(nvmlDeviceGetAttributes_v2)(d, &a), NVML_SUCCESS);
        EXPECT_EQ(a.memorySizeMB, mems[i]);
        EXPECT_EQ(a.multiprocessorCount, sms[i]);
        unsigned gi = 0;
        ASSERT_EQ(NV(nvmlDeviceGetGpuInstanceId)(d, &gi), NVML_SUCCESS);
        nvmlGpuInstance_t gih{};
        ASSERT_EQ(NV(nvmlDeviceGetGpuInstanceById)(dev(1), gi, &gih), NVML_SUCCESS);
        nvmlGpuInstanceInfo_t info{};
        ASSERT_EQ(NV(nvmlGpuInstanceGetInfo)(gih, &info), NVML_SUCCESS);
        EXPECT_EQ(info.device, dev(1));
        EXPECT_EQ(info.id, gi);
        EXPECT_EQ(info.profileId, giProfiles[i]);
        nvmlComputeInstance_t ci{};
        ASSERT_EQ(NV(nvmlGpuInstanceGetComputeInstanceById)(gih, 0, &ci), NVML_SUCCESS);
        EXPECT_EQ(NV(nvmlGpuInstanceGetComputeInstanceById)(gih, 1, &ci), NVML_ERROR_NOT_FOUND);
        ASSERT_EQ(NV(nvmlGpuInstanceGetComputeInstanceById)(gih, 0, &ci), NVML_SUCCESS);
        nvmlComputeInstanceInfo_t cinfo{};
        ASSERT_EQ(NV(nvmlComputeInstanceGetInfo_v2)(ci, &cinfo), NVML_SUCCESS);
        EXPECT_EQ(cinfo.device, dev(1));
        EXPECT_EQ(cinfo.gpuInstance, gih);
        EXPECT_EQ(cinfo.id, 0u);
        EXPECT_EQ(cinfo.profileId, ciProfiles[i]);  // a full compute instance: its slice count's index
        nvmlComputeInstanceInfo_v1_t c1{};
        ASSERT_EQ(NV(nvmlComputeInstanceGetInfo)(ci, &c1), NVML_SUCCESS);
        EXPECT_EQ(c1.profileId, cinfo.profileId);
        nvmlComputeInstanceProfileInfo_t cp{};
        ASSERT_EQ(NV(nvmlGpuInstanceGetComputeInstanceProfileInfo)(gih, cinfo.profileId, 0, &cp), NVML_SUCCESS);
        EXPECT_EQ(cp.multiprocessorCount, sms[i]);
    }
    EXPECT_NE(uuid(mig(1, 2)), uuid(mig(1, 3)));

    nvmlGpuInstanceProfileInfo_t p{};
    ASSERT_EQ(NV(nvmlDeviceGetGpuInstanceProfileInfo)(dev(0), 2, &p), NVML_SUCCESS);
    EXPECT_EQ(p.sliceCount, 3u);
    EXPECT_EQ(p.instanceCount, 2u);
    EXPECT_EQ(p.memorySizeMB, 40192u);
    EXPECT_EQ(p.multiprocessorCount, 42u);
    ASSERT_EQ(NV(nvmlDeviceGetGpuInstanceProfileInfo)(dev(3), 0, &p), NVML_SUCCESS);  // MIG off, still capable
    EXPECT_EQ(p.sliceCount, 1u);
    EXPECT_EQ(p.instanceCount, 7u);
    EXPECT_EQ(p.memorySizeMB, 9728u);
    ASSERT_EQ(NV(nvmlDeviceGetGpuInstanceProfileInfo)(dev(0), 4, &p), NVML_SUCCESS);
    EXPECT_EQ(p.sliceCount, 7u);
    EXPECT_EQ(p.multiprocessorCount, 98u);
    EXPECT_EQ(NV(nvmlDeviceGetGpuInstanceProfileInfo)(dev(0), 5, &p), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(NV(nvmlDeviceGetGpuInstanceProfileInfo)(dev(0), NVML_GPU_INSTANCE_PROFILE_COUNT, &p),
              NVML_ERROR_INVALID_ARGUMENT);

    for (unsigned g : {2u, 3u}) {
        ASSERT_EQ(NV(nvmlDeviceGetMigMode)(dev(g), &cur, &pend), NVML_SUCCESS);
        EXPECT_EQ(cur, unsigned(NVML_DEVICE_MIG_DISABLE));
        EXPECT_EQ(NV(nvmlDeviceGetMaxMigDeviceCount)(dev(g), &max), NVML_SUCCESS);
        EXPECT_EQ(max, 0u);
        EXPECT_EQ(NV(nvmlDeviceGetMigDeviceHandleByIndex)(dev(g), 0, &m), NVML_ERROR_NOT_FOUND);
    }
    EXPECT_EQ(activeLinks(3), 12u);
    nvmlGpuP2PStatus_t st{};
    ASSERT_EQ(NV(nvmlDeviceGetP2PStatus)(dev(0), dev(3), NVML_P2P_CAPS_INDEX_NVLINK, &st), NVML_SUCCESS);
    EXPECT_EQ(st, NVML_P2P_STATUS_OK);
}

// nvml.h: with a MIG device handle nvmlDeviceGetIndex answers the index that
// nvmlDeviceGetMigDeviceHandleByIndex takes back (nvidia-ctk's CDI generation for a MIG device
// asks it; the simulator answered NOT_SUPPORTED).
TEST_F(SimFixtures, MigDeviceIndexIsItsIndexUnderTheParent) {
    ASSERT_EQ(start(fixture("a100-mig.yaml")), NVML_SUCCESS);
    for (unsigned g : {0u, 1u}) {
        for (unsigned i = 0; i < (g == 0 ? 7u : 4u); ++i) {
            SCOPED_TRACE(std::to_string(g) + ":" + std::to_string(i));
            nvmlDevice_t m = mig(g, i);
            unsigned idx = 99;
            ASSERT_EQ(NV(nvmlDeviceGetIndex)(m, &idx), NVML_SUCCESS);
            EXPECT_EQ(idx, i);
            nvmlDevice_t back = nullptr;
            ASSERT_EQ(NV(nvmlDeviceGetMigDeviceHandleByIndex)(dev(g), idx, &back), NVML_SUCCESS);
            EXPECT_EQ(back, m);
        }
        unsigned idx = 99;
        ASSERT_EQ(NV(nvmlDeviceGetIndex)(dev(g), &idx), NVML_SUCCESS);  // the GPU's own index stays
        EXPECT_EQ(idx, g);
    }
}

TEST_F(SimFixtures, Empty) {
    ASSERT_EQ(start(fixture("empty.yaml")), NVML_SUCCESS);
    unsigned n = 7;
    ASSERT_EQ(NV(nvmlDeviceGetCount_v2)(&n), NVML_SUCCESS);
    EXPECT_EQ(n, 0u);
    nvmlDevice_t d = nullptr;
    EXPECT_EQ(NV(nvmlDeviceGetHandleByIndex_v2)(0, &d), NVML_ERROR_INVALID_ARGUMENT);
    char buf[80];
    EXPECT_EQ(NV(nvmlSystemGetDriverVersion)(buf, sizeof buf), NVML_SUCCESS);
}

TEST_F(SimFixtures, OldPciStructIsFilledWithinItsSize) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml")), NVML_SUCCESS);
    for (auto fn : {NV(nvmlDeviceGetPciInfo), NV(nvmlDeviceGetPciInfo_v2)}) {
        unsigned char buf[sizeof(nvmlPciInfo_v2_t) + 32];
        std::memset(buf, 0xAB, sizeof buf);
        auto* p = reinterpret_cast<nvmlPciInfo_v2_t*>(buf);
        ASSERT_EQ(fn(dev(1), p), NVML_SUCCESS);
        EXPECT_STREQ(p->busId, "0000:2A:00.0");
        EXPECT_EQ(p->pciDeviceId, 0x233010DEu);
        EXPECT_EQ(p->bus, 0x2Au);
        for (size_t i = sizeof(nvmlPciInfo_v2_t); i < sizeof buf; ++i) ASSERT_EQ(buf[i], 0xAB) << i;
    }
    unsigned char buf[sizeof(nvmlPciInfo_v2_t) + 32];
    std::memset(buf, 0xAB, sizeof buf);
    ASSERT_EQ(NV(nvmlDeviceGetNvLinkRemotePciInfo)(dev(0), 0, reinterpret_cast<nvmlPciInfo_v2_t*>(buf)),
              NVML_SUCCESS);
    EXPECT_STREQ(reinterpret_cast<nvmlPciInfo_v2_t*>(buf)->busId, "0000:05:00.0");
    for (size_t i = sizeof(nvmlPciInfo_v2_t); i < sizeof buf; ++i) ASSERT_EQ(buf[i], 0xAB) << i;
}

TEST_F(SimFixtures, TelemetryStaysNearTheFixtureValues) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml")), NVML_SUCCESS);
    nvmlDevice_t d = dev(3);
    unsigned long long e1 = 0, e2 = 0;
    ASSERT_EQ(NV(nvmlDeviceGetTotalEnergyConsumption)(d, &e1), NVML_SUCCESS);
    EXPECT_GE(e1, 1203000ull * 1000);
    for (int k = 0; k < 3; ++k) {
        nvmlUtilization_t u = util(3);
        EXPECT_EQ(u.gpu, 0u);  // an idle GPU (base 0) stays at 0
        EXPECT_EQ(u.memory, 0u);
        unsigned t = 0, p = 0, c = 0;
        ASSERT_EQ(NV(nvmlDeviceGetTemperature)(d, NVML_TEMPERATURE_GPU, &t), NVML_SUCCESS);
        EXPECT_GE(t, 31u);  // base 33 (GPU 3: 33 + 3 % 3) ± 2
        EXPECT_LE(t, 35u);
        ASSERT_EQ(NV(nvmlDeviceGetPowerUsage)(d, &p), NVML_SUCCESS);
        EXPECT_GE(p, 73000u * 95 / 100);
        EXPECT_LE(p, 73000u * 105 / 100);
        ASSERT_EQ(NV(nvmlDeviceGetClockInfo)(d, NVML_CLOCK_SM, &c), NVML_SUCCESS);
        EXPECT_EQ(c, 1980u);
        ASSERT_EQ(NV(nvmlDeviceGetMaxClockInfo)(d, NVML_CLOCK_MEM, &c), NVML_SUCCESS);
        EXPECT_EQ(c, 2619u);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_EQ(NV(nvmlDeviceGetTotalEnergyConsumption)(d, &e2), NVML_SUCCESS);
    EXPECT_GT(e2, e1);
    unsigned t = 0;
    EXPECT_EQ(NV(nvmlDeviceGetTemperature)(d, static_cast<nvmlTemperatureSensors_t>(1), &t),
              NVML_ERROR_INVALID_ARGUMENT);
    unsigned long long ecc = 9;
    EXPECT_EQ(NV(nvmlDeviceGetTotalEccErrors)(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &ecc),
              NVML_SUCCESS);
    EXPECT_EQ(ecc, 0u);
    nvmlFieldValue_t f[3] = {};
    f[0].fieldId = NVML_FI_DEV_GET_GPU_RECOVERY_ACTION;
    f[1].fieldId = 99999;
    f[2].fieldId = NVML_FI_DEV_ECC_SBE_VOL_TOTAL;
    ASSERT_EQ(NV(nvmlDeviceGetFieldValues)(d, 3, f), NVML_SUCCESS);
    EXPECT_EQ(f[0].nvmlReturn, NVML_SUCCESS);
    EXPECT_EQ(f[0].value.uiVal, unsigned(NVML_GPU_RECOVERY_ACTION_NONE));
    EXPECT_EQ(f[1].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(f[2].nvmlReturn, NVML_SUCCESS);
    EXPECT_EQ(f[2].valueType, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG);
    EXPECT_EQ(f[2].value.ullVal, 0u);
    unsigned count = 5;
    EXPECT_EQ(NV(nvmlDeviceGetComputeRunningProcesses_v3)(d, &count, nullptr), NVML_SUCCESS);
    EXPECT_EQ(count, 0u);
    count = 0;
    EXPECT_EQ(NV(nvmlDeviceGetComputeRunningProcesses_v3)(d, &count, nullptr), NVML_SUCCESS);
    EXPECT_EQ(count, 0u);
}

// The H100 SXM5 80GB's GPU instance profiles as its driver lists them (`nvidia-smi mig -lgip`,
// NVIDIA's MIG user guide): memory, SMs and engines are the product's, not slices x a 1g figure.
TEST_F(SimFixtures, H100MigProfiles) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml")), NVML_SUCCESS);
    struct Want {
        unsigned index, id, slices, instances;  // NVML_GPU_INSTANCE_PROFILE_* and the id the GPU reports
        unsigned long long mib;
        unsigned sm, copy, dec, jpeg, ofa;
    };
    const Want table[] = {
        {0, 19, 1, 7, 9984, 16, 1, 1, 1, 0},    // 1g.10gb
        {7, 20, 1, 1, 9984, 16, 1, 1, 1, 1},    // 1g.10gb+me
        {9, 15, 1, 4, 20096, 26, 1, 1, 1, 0},   // 1g.20gb
        {1, 14, 2, 3, 20096, 32, 2, 2, 2, 0},   // 2g.20gb
        {2, 9, 3, 2, 40448, 60, 3, 3, 3, 0},    // 3g.40gb
        {3, 5, 4, 1, 40448, 64, 4, 4, 4, 0},    // 4g.40gb
        {4, 0, 7, 1, 81152, 132, 8, 7, 7, 1},   // 7g.80gb
    };
    for (const Want& w : table) {
        SCOPED_TRACE(w.index);
        nvmlGpuInstanceProfileInfo_t p{};
        ASSERT_EQ(NV(nvmlDeviceGetGpuInstanceProfileInfo)(dev(5), w.index, &p), NVML_SUCCESS);
        EXPECT_EQ(p.id, w.id);
        EXPECT_EQ(p.sliceCount, w.slices);
        EXPECT_EQ(p.instanceCount, w.instances);
        EXPECT_EQ(p.memorySizeMB, w.mib);
        EXPECT_EQ(p.multiprocessorCount, w.sm);
        EXPECT_EQ(p.copyEngineCount, w.copy);
        EXPECT_EQ(p.decoderCount, w.dec);
        EXPECT_EQ(p.encoderCount, 0u);
        EXPECT_EQ(p.jpegCount, w.jpeg);
        EXPECT_EQ(p.ofaCount, w.ofa);
    }
    nvmlGpuInstanceProfileInfo_t p{};
    EXPECT_EQ(NV(nvmlDeviceGetGpuInstanceProfileInfo)(dev(0), 5, &p), NVML_ERROR_NOT_SUPPORTED);  // 8 slices
    EXPECT_EQ(NV(nvmlDeviceGetGpuInstanceProfileInfo)(dev(0), 6, &p), NVML_ERROR_NOT_SUPPORTED);  // 6 slices
}

// Engine counts of MIG instances on an A100, as NVIDIA's MIG user guide lists them: one copy
// engine per slice, NVDECs 0/1/2/5 for 1g/2g/3g/7g, JPEG and OFA only on 7g and 1g+me.
TEST_F(SimFixtures, A100MigEngineCounts) {
    ASSERT_EQ(start(fixture("a100-mig.yaml")), NVML_SUCCESS);
    struct Want {
        unsigned copy, dec, jpeg, ofa;
    };
    const Want per_mig[] = {{3, 2, 0, 0}, {2, 1, 0, 0}, {1, 0, 0, 0}};  // GPU 1: 3g, 2g, 1g
    for (unsigned i = 0; i < 3; ++i) {
        SCOPED_TRACE(i);
        nvmlDeviceAttributes_t a{};
        ASSERT_EQ(NV(nvmlDeviceGetAttributes_v2)(mig(1, i), &a), NVML_SUCCESS);
        EXPECT_EQ(a.sharedCopyEngineCount, per_mig[i].copy);
        EXPECT_EQ(a.sharedDecoderCount, per_mig[i].dec);
        EXPECT_EQ(a.sharedEncoderCount, 0u);
        EXPECT_EQ(a.sharedJpegCount, per_mig[i].jpeg);
        EXPECT_EQ(a.sharedOfaCount, per_mig[i].ofa);
        EXPECT_EQ(a.computeInstanceSliceCount, a.gpuInstanceSliceCount);
    }
    const std::pair<unsigned, Want> per_profile[] = {{4, {7, 5, 1, 1}}, {7, {1, 1, 1, 1}}, {3, {4, 2, 0, 0}}};
    for (const auto& [profile, want] : per_profile) {
        SCOPED_TRACE(profile);
        nvmlGpuInstanceProfileInfo_t p{};
        ASSERT_EQ(NV(nvmlDeviceGetGpuInstanceProfileInfo)(dev(0), profile, &p), NVML_SUCCESS);
        EXPECT_EQ(p.copyEngineCount, want.copy);
        EXPECT_EQ(p.decoderCount, want.dec);
        EXPECT_EQ(p.encoderCount, 0u);
        EXPECT_EQ(p.jpegCount, want.jpeg);
        EXPECT_EQ(p.ofaCount, want.ofa);
    }
}

}  // namespace
