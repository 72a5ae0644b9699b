// The KGPU_SIM_EVENTS command file and event sets: XIDs (GPU and MIG), lost/restore, utilisation
// overrides, processes, MIG re-creation, pending rows / recovery action, file handling.
#include "sim_support.h"

#include <atomic>
#include <cstring>

#include "support/files.h"

using namespace simtest;
using namespace std::chrono_literals;

namespace {

class SimEvents : public SimTest {
protected:
    TempDir tmp;
    std::string events = tmp.file("events");

    nvmlEventSet_t registered(std::initializer_list<unsigned> gpus, unsigned long long mask) {
        nvmlEventSet_t set{};
        EXPECT_EQ(NV(nvmlEventSetCreate)(&set), NVML_SUCCESS);
        for (unsigned g : gpus) EXPECT_EQ(NV(nvmlDeviceRegisterEvents)(dev(g), mask, set), NVML_SUCCESS);
        return set;
    }
    nvmlEventData_t wait(nvmlEventSet_t set, unsigned ms = 2000) {
        nvmlEventData_t e{};
        EXPECT_EQ(NV(nvmlEventSetWait_v2)(set, &e, ms), NVML_SUCCESS);
        return e;
    }
    std::vector<nvmlProcessInfo_t> procs(nvmlDevice_t d) {
        unsigned n = 0;
        nvmlReturn_t r = NV(nvmlDeviceGetComputeRunningProcesses_v3)(d, &n, nullptr);
        if (r == NVML_SUCCESS) return {};
        EXPECT_EQ(r, NVML_ERROR_INSUFFICIENT_SIZE);
        std::vector<nvmlProcessInfo_t> v(n);
        EXPECT_EQ(NV(nvmlDeviceGetComputeRunningProcesses_v3)(d, &n, v.data()), NVML_SUCCESS);
        v.resize(n);
        return v;
    }
};

TEST_F(SimEvents, XidIsDeliveredAndTimeoutHonoured) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml"), events), NVML_SUCCESS);  // the file does not exist yet
    nvmlEventSet_t set = registered({0}, nvmlEventTypeXidCriticalError);
    nvmlEventData_t e{};
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(NV(nvmlEventSetWait_v2)(set, &e, 0), NVML_ERROR_TIMEOUT);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
    EXPECT_EQ(NV(nvmlEventSetWait_v2)(set, &e, 50), NVML_ERROR_TIMEOUT);

    append(events, "# a comment, then a blank line\n\nxid 1 31\nxid 0 43\n");
    e = wait(set);
    EXPECT_EQ(e.device, dev(0));  // GPU 1 is not registered: its XID is not seen
    EXPECT_EQ(e.eventType, nvmlEventTypeXidCriticalError);
    EXPECT_EQ(e.eventData, 43u);
    EXPECT_EQ(e.gpuInstanceId, 0xFFFFFFFFu);
    EXPECT_EQ(e.computeInstanceId, 0xFFFFFFFFu);
    EXPECT_EQ(NV(nvmlEventSetWait_v2)(set, &e, 0), NVML_ERROR_TIMEOUT);

    // Two sets each get their own copy, in order.
    nvmlEventSet_t other = registered({0, 1}, nvmlEventTypeXidCriticalError);
    append(events, "xid 1 13\nxid 0 94\n");
    EXPECT_EQ(wait(set).eventData, 94u);
    EXPECT_EQ(wait(other).eventData, 13u);
    EXPECT_EQ(wait(other).eventData, 94u);
    EXPECT_EQ(NV(nvmlEventSetFree)(set), NVML_SUCCESS);
    EXPECT_EQ(NV(nvmlEventSetFree)(set), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(NV(nvmlEventSetFree)(other), NVML_SUCCESS);
}

TEST_F(SimEvents, V1WaitFillsTheOlderRecordOnly) {
    ASSERT_EQ(start(fixture("a100-mig.yaml"), events), NVML_SUCCESS);
    nvmlEventSet_t set = registered({1}, nvmlEventTypeXidCriticalError);
    append(events, "xid 1:2 31\n");
    unsigned char buf[sizeof(nvmlEventData_v1_t) + 16];
    std::memset(buf, 0xCD, sizeof buf);
    auto* e = reinterpret_cast<nvmlEventData_v1_t*>(buf);
    ASSERT_EQ(NV(nvmlEventSetWait)(set, e, 2000), NVML_SUCCESS);
    EXPECT_EQ(e->eventType, nvmlEventTypeXidCriticalError);
    EXPECT_EQ(e->eventData, 31u);
    EXPECT_EQ(e->device, mig(1, 2));
    for (size_t i = sizeof(nvmlEventData_v1_t); i < sizeof buf; ++i) ASSERT_EQ(buf[i], 0xCD) << i;
}

TEST_F(SimEvents, MigXidCarriesInstanceIds) {
    ASSERT_EQ(start(fixture("a100-mig.yaml"), events), NVML_SUCCESS);
    nvmlEventSet_t set = registered({1}, nvmlEventTypeXidCriticalError);
    append(events, "xid 1:2 31\n");
    nvmlEventData_t e = wait(set);
    EXPECT_EQ(e.device, mig(1, 2));
    EXPECT_EQ(e.eventData, 31u);
    EXPECT_EQ(e.gpuInstanceId, 13u);
    EXPECT_EQ(e.computeInstanceId, 0u);
}

TEST_F(SimEvents, LostAndRestore) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml"), events), NVML_SUCCESS);
    nvmlEventSet_t set = registered({2}, nvmlEventTypeXidCriticalError);
    append(events, "lost 2\n");
    nvmlEventData_t e = wait(set);
    EXPECT_EQ(e.device, dev(2));
    EXPECT_EQ(e.eventData, 79u);
    char buf[96];
    EXPECT_EQ(NV(nvmlDeviceGetName)(dev(2), buf, sizeof buf), NVML_ERROR_GPU_IS_LOST);
    nvmlMemory_t m{};
    EXPECT_EQ(NV(nvmlDeviceGetMemoryInfo)(dev(2), &m), NVML_ERROR_GPU_IS_LOST);
    nvmlGpuTopologyLevel_t l{};
    EXPECT_EQ(NV(nvmlDeviceGetTopologyCommonAncestor)(dev(0), dev(2), &l), NVML_ERROR_GPU_IS_LOST);
    EXPECT_EQ(NV(nvmlDeviceRegisterEvents)(dev(2), nvmlEventTypeXidCriticalError, set), NVML_ERROR_GPU_IS_LOST);
    unsigned n = 0;
    EXPECT_EQ(NV(nvmlDeviceGetCount_v2)(&n), NVML_SUCCESS);
    EXPECT_EQ(n, 8u);  // a lost GPU still counts
    EXPECT_EQ(name(dev(3)), "NVIDIA H100 80GB HBM3");

    append(events, "restore 2\n");
    EXPECT_TRUE(eventually([&] { return NV(nvmlDeviceGetName)(dev(2), buf, sizeof buf) == NVML_SUCCESS; }));
}

TEST_F(SimEvents, FailMakesOneEntryPointOfOneGpuAnswerAnError) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml"), events), NVML_SUCCESS);
    unsigned mw = 0, temp = 0;
    ASSERT_EQ(NV(nvmlDeviceGetPowerUsage)(dev(1), &mw), NVML_SUCCESS);
    append(events, "fail 1 nvmlDeviceGetPowerUsage UNKNOWN\nfail 1 nvmlDeviceGetTemperature TIMEOUT\n");
    EXPECT_TRUE(eventually([&] { return NV(nvmlDeviceGetPowerUsage)(dev(1), &mw) == NVML_ERROR_UNKNOWN; }));
    EXPECT_EQ(NV(nvmlDeviceGetTemperature)(dev(1), NVML_TEMPERATURE_GPU, &temp), NVML_ERROR_TIMEOUT);
    EXPECT_EQ(NV(nvmlDeviceGetPowerUsage)(dev(0), &mw), NVML_SUCCESS) << "only GPU 1";
    char buf[96];
    EXPECT_EQ(NV(nvmlDeviceGetName)(dev(1), buf, sizeof buf), NVML_SUCCESS) << "only the named entry points";
    append(events, "fail 1 nvmlDeviceGetPowerUsage off\n");
    EXPECT_TRUE(eventually([&] { return NV(nvmlDeviceGetPowerUsage)(dev(1), &mw) == NVML_SUCCESS; }));
    EXPECT_EQ(NV(nvmlDeviceGetTemperature)(dev(1), NVML_TEMPERATURE_GPU, &temp), NVML_ERROR_TIMEOUT);
    append(events, "restore 1\n");
    EXPECT_TRUE(eventually(
        [&] { return NV(nvmlDeviceGetTemperature)(dev(1), NVML_TEMPERATURE_GPU, &temp) == NVML_SUCCESS; }));
}

TEST_F(SimEvents, PendingRowsRecoveryActionAndRestore) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml"), events), NVML_SUCCESS);
    nvmlEventSet_t set = registered({0}, nvmlEventTypeXidCriticalError | nvmlEventTypeGpuRecoveryAction);
    append(events, "xid 0 48\n");
    EXPECT_EQ(wait(set).eventData, 48u);
    unsigned corr = 9, unc = 9, pending = 9, failed = 9;
    ASSERT_EQ(NV(nvmlDeviceGetRemappedRows)(dev(0), &corr, &unc, &pending, &failed), NVML_SUCCESS);
    EXPECT_EQ(corr, 0u);
    EXPECT_EQ(unc, 1u);
    EXPECT_EQ(pending, 1u);
    EXPECT_EQ(failed, 0u);
    nvmlEnableState_t retired{};
    ASSERT_EQ(NV(nvmlDeviceGetRetiredPagesPendingStatus)(dev(0), &retired), NVML_SUCCESS);
    EXPECT_EQ(retired, NVML_FEATURE_ENABLED);
    EXPECT_EQ(field(dev(0), NVML_FI_DEV_ECC_DBE_VOL_TOTAL).value.ullVal, 1u);
    EXPECT_EQ(field(dev(0), NVML_FI_DEV_GET_GPU_RECOVERY_ACTION).value.uiVal, unsigned(NVML_GPU_RECOVERY_ACTION_NONE));

    append(events, "xid 0 95\n");
    EXPECT_EQ(wait(set).eventData, 95u);
    nvmlEventData_t e = wait(set);
    EXPECT_EQ(e.eventType, nvmlEventTypeGpuRecoveryAction);
    EXPECT_EQ(e.eventData, unsigned(NVML_GPU_RECOVERY_ACTION_GPU_RESET));
    nvmlFieldValue_t f = field(dev(0), NVML_FI_DEV_GET_GPU_RECOVERY_ACTION);
    EXPECT_EQ(f.nvmlReturn, NVML_SUCCESS);
    EXPECT_EQ(f.valueType, NVML_VALUE_TYPE_UNSIGNED_INT);
    EXPECT_EQ(f.value.uiVal, unsigned(NVML_GPU_RECOVERY_ACTION_GPU_RESET));

    append(events, "restore 0\n");
    EXPECT_TRUE(eventually([&] {
        return field(dev(0), NVML_FI_DEV_GET_GPU_RECOVERY_ACTION).value.uiVal == NVML_GPU_RECOVERY_ACTION_NONE;
    }));
    ASSERT_EQ(NV(nvmlDeviceGetRemappedRows)(dev(0), &corr, &unc, &pending, &failed), NVML_SUCCESS);
    EXPECT_EQ(pending, 0u);
    ASSERT_EQ(NV(nvmlDeviceGetRetiredPagesPendingStatus)(dev(0), &retired), NVML_SUCCESS);
    EXPECT_EQ(retired, NVML_FEATURE_DISABLED);
}

TEST_F(SimEvents, LinesPresentAtInitApplySynchronously) {
    tmp.write("events", "util 0 42 17\nproc 0 1234 1073741824\nproc 0 99 2048 worker\n");
    ASSERT_EQ(start(fixture("t4x4.yaml"), events), NVML_SUCCESS);
    nvmlUtilization_t u = util(0);
    EXPECT_EQ(u.gpu, 42u);
    EXPECT_EQ(u.memory, 17u);
    auto p = procs(dev(0));
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(p[0].pid, 99u);
    EXPECT_EQ(p[1].pid, 1234u);
    EXPECT_EQ(p[1].usedGpuMemory, 1073741824u);
    EXPECT_EQ(p[1].gpuInstanceId, 0xFFFFFFFFu);
    EXPECT_EQ(p[1].computeInstanceId, 0xFFFFFFFFu);
    nvmlMemory_t m{};
    ASSERT_EQ(NV(nvmlDeviceGetMemoryInfo)(dev(0), &m), NVML_SUCCESS);
    EXPECT_EQ(m.used, 1073741824ull + 2048);
    EXPECT_EQ(m.free, (15360ull << 20) - m.used);
    char buf[64];
    ASSERT_EQ(NV(nvmlSystemGetProcessName)(1234, buf, sizeof buf), NVML_SUCCESS);
    EXPECT_STREQ(buf, "python3");
    ASSERT_EQ(NV(nvmlSystemGetProcessName)(99, buf, sizeof buf), NVML_SUCCESS);
    EXPECT_STREQ(buf, "worker");
    EXPECT_EQ(NV(nvmlSystemGetProcessName)(4321, buf, sizeof buf), NVML_ERROR_NOT_FOUND);
}

TEST_F(SimEvents, ProcessListsInEveryLayout) {
    tmp.write("events", "proc 1 1234 1073741824\nproc 1 1300 4096\n");
    ASSERT_EQ(start(fixture("t4x4.yaml"), events), NVML_SUCCESS);
    nvmlDevice_t d = dev(1);
    // Too small: INSUFFICIENT_SIZE with the count needed.
    unsigned n = 1;
    nvmlProcessInfo_t one[1];
    EXPECT_EQ(NV(nvmlDeviceGetComputeRunningProcesses_v3)(d, &n, one), NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT_EQ(n, 2u);
    n = 0;
    EXPECT_EQ(NV(nvmlDeviceGetComputeRunningProcesses_v2)(d, &n, nullptr), NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT_EQ(n, 2u);
    // v1 writes 16-byte entries only: a canary right after two of them survives.
    unsigned char buf[2 * sizeof(nvmlProcessInfo_v1_t) + 32];
    std::memset(buf, 0xEE, sizeof buf);
    n = 2;
    ASSERT_EQ(NV(nvmlDeviceGetComputeRunningProcesses)(d, &n, reinterpret_cast<nvmlProcessInfo_v1_t*>(buf)),
              NVML_SUCCESS);
    ASSERT_EQ(n, 2u);
    static_assert(sizeof(nvmlProcessInfo_v1_t) == 16 && sizeof(nvmlProcessInfo_t) == 24);
    auto* v1 = reinterpret_cast<nvmlProcessInfo_v1_t*>(buf);
    EXPECT_EQ(v1[0].pid, 1234u);
    EXPECT_EQ(v1[0].usedGpuMemory, 1073741824u);
    EXPECT_EQ(v1[1].pid, 1300u);
    EXPECT_EQ(v1[1].usedGpuMemory, 4096u);
    for (size_t i = 2 * sizeof(nvmlProcessInfo_v1_t); i < sizeof buf; ++i) ASSERT_EQ(buf[i], 0xEE) << i;
    nvmlProcessInfo_t v2[2];
    n = 2;
    ASSERT_EQ(NV(nvmlDeviceGetComputeRunningProcesses_v2)(d, &n, v2), NVML_SUCCESS);
    EXPECT_EQ(v2[1].pid, 1300u);
    EXPECT_EQ(v2[1].gpuInstanceId, 0xFFFFFFFFu);

    append(events, "noproc 1 1234\n");
    EXPECT_TRUE(eventually([&] { return procs(d).size() == 1; }));
    char name[64];
    EXPECT_EQ(NV(nvmlSystemGetProcessName)(1234, name, sizeof name), NVML_ERROR_NOT_FOUND);
    append(events, "noproc 1 1300\n");
    EXPECT_TRUE(eventually([&] { return procs(d).empty(); }));
    n = 0;
    EXPECT_EQ(NV(nvmlDeviceGetComputeRunningProcesses_v3)(d, &n, nullptr), NVML_SUCCESS);
    EXPECT_EQ(n, 0u);
}

TEST_F(SimEvents, MigProcessesAreAttributedToTheirInstance) {
    tmp.write("events", "proc 0:3 777 1048576\nproc 0 778 1048576\n");
    ASSERT_EQ(start(fixture("a100-mig.yaml"), events), NVML_SUCCESS);
    auto all = procs(dev(0));
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[0].pid, 777u);
    EXPECT_EQ(all[0].gpuInstanceId, 10u);
    EXPECT_EQ(all[0].computeInstanceId, 0u);
    EXPECT_EQ(all[1].gpuInstanceId, 0xFFFFFFFFu);
    auto inst = procs(mig(0, 3));
    ASSERT_EQ(inst.size(), 1u);
    EXPECT_EQ(inst[0].pid, 777u);
    EXPECT_TRUE(procs(mig(0, 2)).empty());
    nvmlMemory_t m{};
    ASSERT_EQ(NV(nvmlDeviceGetMemoryInfo)(mig(0, 3), &m), NVML_SUCCESS);
    EXPECT_EQ(m.used, 1048576u);
}

TEST_F(SimEvents, UtilOverrideIsExact) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml"), events), NVML_SUCCESS);
    append(events, "util 5 87 33\n");
    EXPECT_TRUE(eventually([&] { return util(5).gpu == 87; }));
    for (int i = 0; i < 5; ++i) {
        nvmlUtilization_t u = util(5);
        EXPECT_EQ(u.gpu, 87u);
        EXPECT_EQ(u.memory, 33u);
        std::this_thread::sleep_for(10ms);
    }
}

TEST_F(SimEvents, MigRecreationInvalidatesOldHandlesAndNotifies) {
    ASSERT_EQ(start(fixture("a100-mig.yaml"), events), NVML_SUCCESS);
    nvmlEventSet_t set = registered({0, 2}, nvmlEventMigConfigChange);
    nvmlDevice_t old = mig(0, 0);
    const std::string oldUuid = uuid(old);
    nvmlGpuInstance_t oldGi{};
    ASSERT_EQ(NV(nvmlDeviceGetGpuInstanceById)(dev(0), 7, &oldGi), NVML_SUCCESS);

    append(events, "mig 0 3g.40gb,3g.40gb\n");
    nvmlEventData_t e = wait(set);
    EXPECT_EQ(e.device, dev(0));
    EXPECT_EQ(e.eventType, nvmlEventMigConfigChange);
    char buf[96];
    EXPECT_EQ(NV(nvmlDeviceGetUUID)(old, buf, sizeof buf), NVML_ERROR_INVALID_ARGUMENT);
    nvmlGpuInstanceInfo_t gi{};
    EXPECT_EQ(NV(nvmlGpuInstanceGetInfo)(oldGi, &gi), NVML_ERROR_INVALID_ARGUMENT);
    nvmlDevice_t h = nullptr;
    EXPECT_EQ(NV(nvmlDeviceGetHandleByUUID)(oldUuid.c_str(), &h), NVML_ERROR_NOT_FOUND);
    EXPECT_EQ(NV(nvmlDeviceGetMigDeviceHandleByIndex)(dev(0), 2, &h), NVML_ERROR_NOT_FOUND);
    for (unsigned i = 0; i < 2; ++i) {
        nvmlDevice_t m = mig(0, i);
        EXPECT_EQ(name(m), "NVIDIA A100-SXM4-80GB MIG 3g.40gb");
        EXPECT_EQ(uuid(m).rfind("MIG-", 0), 0u);
        EXPECT_NE(uuid(m), oldUuid);
        nvmlDeviceAttributes_t a{};
        ASSERT_EQ(NV(nvmlDeviceGetAttributes_v2)(m, &a), NVML_SUCCESS);
        EXPECT_EQ(a.memorySizeMB, 40192u);  // the fixture's figure for 3g.40gb (GPU 1)
        EXPECT_EQ(a.multiprocessorCount, 42u);
        unsigned id = 0;
        ASSERT_EQ(NV(nvmlDeviceGetGpuInstanceId)(m, &id), NVML_SUCCESS);
        EXPECT_GE(id, 14u);  // new ids from the counter
    }
    EXPECT_NE(uuid(mig(0, 0)), uuid(mig(0, 1)));

    append(events, "mig 0 off\n");
    e = wait(set);
    EXPECT_EQ(e.device, dev(0));
    unsigned cur = 9, pend = 9, max = 9;
    ASSERT_EQ(NV(nvmlDeviceGetMigMode)(dev(0), &cur, &pend), NVML_SUCCESS);
    EXPECT_EQ(cur, unsigned(NVML_DEVICE_MIG_DISABLE));
    ASSERT_EQ(NV(nvmlDeviceGetMaxMigDeviceCount)(dev(0), &max), NVML_SUCCESS);
    EXPECT_EQ(max, 0u);

    append(events, "mig 2 1g.10gb\n");
    e = wait(set);
    EXPECT_EQ(e.device, dev(2));
    ASSERT_EQ(NV(nvmlDeviceGetMigMode)(dev(2), &cur, &pend), NVML_SUCCESS);
    EXPECT_EQ(cur, unsigned(NVML_DEVICE_MIG_ENABLE));
    nvmlDeviceAttributes_t a{};
    ASSERT_EQ(NV(nvmlDeviceGetAttributes_v2)(mig(2, 0), &a), NVML_SUCCESS);
    EXPECT_EQ(a.memorySizeMB, 9728u);
}

// Issue #23: a live MIG change on an A100 PCIe (MIG capable, MIG off in the fixture) is applied,
// not refused as "GPU 1 is not MIG capable"; the GPU then refuses what NVML refuses on a
// MIG-enabled GPU, and answers again when MIG goes off.
TEST_F(SimEvents, LiveMigOnAnA100PcieAndWhatTheGpuAnswersThen) {
    StderrCapture err;
    ASSERT_EQ(start(fixture("pcie-nvlink-pairs.yaml"), events), NVML_SUCCESS);
    nvmlEventSet_t set = registered({1}, nvmlEventMigConfigChange);
    nvmlUtilization_t u{};
    ASSERT_EQ(NV(nvmlDeviceGetUtilizationRates)(dev(1), &u), NVML_SUCCESS);
    append(events, "mig 1 3g.40gb,1g.10gb\n");
    nvmlEventData_t e = wait(set);
    EXPECT_EQ(e.device, dev(1));
    EXPECT_EQ(err.text().find("not MIG capable"), std::string::npos) << err.text();
    unsigned cur = 9, pend = 9, v = 0, p = 0;
    ASSERT_EQ(NV(nvmlDeviceGetMigMode)(dev(1), &cur, &pend), NVML_SUCCESS);
    EXPECT_EQ(cur, unsigned(NVML_DEVICE_MIG_ENABLE));
    EXPECT_EQ(name(mig(1, 0)), "NVIDIA A100 80GB PCIe MIG 3g.40gb");
    EXPECT_EQ(NV(nvmlDeviceGetUtilizationRates)(dev(1), &u), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(NV(nvmlDeviceGetEncoderUtilization)(dev(1), &v, &p), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(NV(nvmlDeviceGetDecoderUtilization)(dev(1), &v, &p), NVML_ERROR_NOT_SUPPORTED);
    unsigned a = 0, b = 0, c = 0, d = 0;
    EXPECT_EQ(NV(nvmlDeviceGetRemappedRows)(dev(1), &a, &b, &c, &d), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(NV(nvmlDeviceGetUtilizationRates)(dev(0), &u), NVML_SUCCESS) << "GPU 0 keeps MIG off";
    append(events, "mig 1 off\n");
    wait(set);
    EXPECT_EQ(NV(nvmlDeviceGetUtilizationRates)(dev(1), &u), NVML_SUCCESS);
    EXPECT_EQ(NV(nvmlDeviceGetRemappedRows)(dev(1), &a, &b, &c, &d), NVML_SUCCESS);
}

// MIG devices created on a part with a known profile table (H100) get that table's figures.
TEST_F(SimEvents, MigOnH100UsesItsProfileTable) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml"), events), NVML_SUCCESS);
    nvmlEventSet_t set = registered({3}, nvmlEventMigConfigChange);
    append(events, "mig 3 3g.40gb,1g.20gb,1g.10gb+me\n");
    nvmlEventData_t e = wait(set);
    EXPECT_EQ(e.device, dev(3));
    const struct {
        const char* profile;
        unsigned mib, sm, dec, jpeg, ofa;
    } want[] = {{"3g.40gb", 40448, 60, 3, 3, 0}, {"1g.20gb", 20096, 26, 1, 1, 0}, {"1g.10gb+me", 9984, 16, 1, 1, 1}};
    for (unsigned i = 0; i < 3; ++i) {
        SCOPED_TRACE(want[i].profile);
        nvmlDevice_t m = mig(3, i);
        EXPECT_EQ(name(m), std::string("NVIDIA H100 80GB HBM3 MIG ") + want[i].profile);
        nvmlDeviceAttributes_t a{};
        ASSERT_EQ(NV(nvmlDeviceGetAttributes_v2)(m, &a), NVML_SUCCESS);
        EXPECT_EQ(a.memorySizeMB, want[i].mib);
        EXPECT_EQ(a.multiprocessorCount, want[i].sm);
        EXPECT_EQ(a.sharedDecoderCount, want[i].dec);
        EXPECT_EQ(a.sharedJpegCount, want[i].jpeg);
        EXPECT_EQ(a.sharedOfaCount, want[i].ofa);
    }
}

TEST_F(SimEvents, BadLinesAreReportedAndSkipped) {
    tmp.write("events",
              "frobnicate 0\n"
              "xid 9 13\n"
              "util 0 120 3\n"
              "xid 0\n"
              "mig 0 5g.50gb\n"
              "fail 0 nvmlInit UNKNOWN\n"
              "fail 0 nvmlDeviceGetName BOGUS\n"
              "util 0 61 62\n");
    StderrCapture err;
    ASSERT_EQ(start(fixture("t4x4.yaml"), events), NVML_SUCCESS);
    std::string text = err.text();
    EXPECT_NE(text.find("kgpu-sim: " + events + ":1: unknown command 'frobnicate'"), std::string::npos) << text;
    EXPECT_NE(text.find(events + ":2: GPU index 9 out of range"), std::string::npos) << text;
    EXPECT_NE(text.find(events + ":3: "), std::string::npos) << text;
    EXPECT_NE(text.find(events + ":4: usage: xid"), std::string::npos) << text;
    EXPECT_NE(text.find(events + ":5: GPU 0 (Tesla T4) is not MIG capable in this node's fixture"), std::string::npos)
        << text;
    EXPECT_NE(text.find(events + ":6: 'nvmlInit' is not an nvmlDevice* entry point"), std::string::npos) << text;
    EXPECT_NE(text.find(events + ":7: 'BOGUS' is not an NVML error name"), std::string::npos) << text;
    EXPECT_EQ(util(0).gpu, 61u);  // the good line after the bad ones still applies
}

TEST_F(SimEvents, PartialLineWaitsForItsNewline) {
    ASSERT_EQ(start(fixture("t4x4.yaml"), events), NVML_SUCCESS);
    append(events, "util 0 11 12");
    std::this_thread::sleep_for(300ms);
    EXPECT_NE(util(0).gpu, 11u);
    append(events, "\n");
    EXPECT_TRUE(eventually([&] { return util(0).gpu == 11; }));
}

TEST_F(SimEvents, TruncatedFileIsReadFromTheStart) {
    tmp.write("events", "util 0 10 10\n# a longer comment line so the file shrinks on rewrite\n");
    ASSERT_EQ(start(fixture("t4x4.yaml"), events), NVML_SUCCESS);
    EXPECT_EQ(util(0).gpu, 10u);
    tmp.write("events", "util 0 20 20\n");
    EXPECT_TRUE(eventually([&] { return util(0).gpu == 20; }));
}

TEST_F(SimEvents, WaitDoesNotBlockOtherCalls) {
    ASSERT_EQ(start(fixture("t4x4.yaml"), events), NVML_SUCCESS);
    nvmlEventSet_t set = registered({0}, nvmlEventTypeXidCriticalError);
    std::atomic<bool> done{false};
    std::atomic<pid_t> tid{0};
    nvmlReturn_t r = NVML_SUCCESS;
    std::thread waiter([&] {
        tid = ::gettid();
        nvmlEventData_t e{};
        r = NV(nvmlEventSetWait_v2)(set, &e, 1500);
        done = true;
    });
    // The waiter asleep in its wait (the only place it can sleep) before the calls below.
    auto sleeping = [&] {
        const std::string text = kgpu::test::slurp("/proc/self/task/" + std::to_string(tid.load()) + "/stat");
        const auto close = text.rfind(") ");
        return tid.load() != 0 && close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'S';
    };
    if (!kgpu::test::eventually(sleeping, 1000ms)) {
        waiter.join();  // a joinable thread at the end of the test would end the whole binary
        FAIL() << "the waiter never began its wait";
    }
    unsigned n = 0;
    EXPECT_EQ(NV(nvmlDeviceGetCount_v2)(&n), NVML_SUCCESS);  // would deadlock if the wait held the lock
    EXPECT_EQ(name(dev(1)), "Tesla T4");
    EXPECT_FALSE(done.load());
    waiter.join();
    EXPECT_EQ(r, NVML_ERROR_TIMEOUT);
}

}  // namespace

namespace {

int computeModeOf(nvmlDevice_t d) {
    nvmlComputeMode_t m = -1;
    EXPECT_EQ(NV(nvmlDeviceGetComputeMode)(d, &m), NVML_SUCCESS);
    return m;
}

TEST_F(SimEvents, ComputeModeIsSetAndCheckedWithoutAnEventsFile) {
    ASSERT_EQ(start(fixture("a100-mig.yaml")), NVML_SUCCESS);
    EXPECT_EQ(computeModeOf(dev(0)), NVML_COMPUTEMODE_DEFAULT);
    EXPECT_EQ(NV(nvmlDeviceSetComputeMode)(dev(0), NVML_COMPUTEMODE_EXCLUSIVE_PROCESS), NVML_SUCCESS);
    EXPECT_EQ(computeModeOf(dev(0)), NVML_COMPUTEMODE_EXCLUSIVE_PROCESS);
    EXPECT_EQ(computeModeOf(dev(1)), NVML_COMPUTEMODE_DEFAULT);
    EXPECT_EQ(NV(nvmlDeviceSetComputeMode)(dev(0), 1), NVML_ERROR_NOT_SUPPORTED);  // EXCLUSIVE_THREAD
    EXPECT_EQ(NV(nvmlDeviceSetComputeMode)(dev(0), 7), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(NV(nvmlDeviceSetComputeMode)(mig(1, 0), NVML_COMPUTEMODE_DEFAULT), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(computeModeOf(dev(0)), NVML_COMPUTEMODE_EXCLUSIVE_PROCESS);
    EXPECT_EQ(NV(nvmlDeviceSetComputeMode)(dev(0), NVML_COMPUTEMODE_DEFAULT), NVML_SUCCESS);
    EXPECT_EQ(computeModeOf(dev(0)), NVML_COMPUTEMODE_DEFAULT);
}

// Compute mode is the GPU's: with an events file a change is written there, so another process
// (here: the next load of the node) sees it, and a `computemode` line written by anyone applies.
TEST_F(SimEvents, ComputeModeIsSharedThroughTheEventsFile) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml"), events), NVML_SUCCESS);
    EXPECT_EQ(NV(nvmlDeviceSetComputeMode)(dev(2), NVML_COMPUTEMODE_EXCLUSIVE_PROCESS), NVML_SUCCESS);
    EXPECT_EQ(computeModeOf(dev(2)), NVML_COMPUTEMODE_EXCLUSIVE_PROCESS);  // at once, not after a poll
    std::ifstream in(events);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_EQ(text.str(), "computemode 2 3\n");

    append(events, "computemode 5 EXCLUSIVE_PROCESS\ncomputemode 6 prohibited\n");
    EXPECT_TRUE(eventually([&] { return computeModeOf(dev(6)) == NVML_COMPUTEMODE_PROHIBITED; }));
    EXPECT_EQ(computeModeOf(dev(5)), NVML_COMPUTEMODE_EXCLUSIVE_PROCESS);

    ASSERT_EQ(NV(nvmlShutdown)(), NVML_SUCCESS);  // the node is read again from the files
    ASSERT_EQ(start(fixture("dgx-h100.yaml"), events), NVML_SUCCESS);
    EXPECT_EQ(computeModeOf(dev(2)), NVML_COMPUTEMODE_EXCLUSIVE_PROCESS);
    EXPECT_EQ(computeModeOf(dev(5)), NVML_COMPUTEMODE_EXCLUSIVE_PROCESS);
    EXPECT_EQ(computeModeOf(dev(0)), NVML_COMPUTEMODE_DEFAULT);

    ASSERT_EQ(NV(nvmlShutdown)(), NVML_SUCCESS);
    append(events, "computemode 0 EXCLUSIVE_THREAD\ncomputemode 0\n");
    StderrCapture err;
    ASSERT_EQ(start(fixture("dgx-h100.yaml"), events), NVML_SUCCESS);  // lines already there apply at init
    std::string msg = err.text();
    EXPECT_NE(msg.find(events + ":4: 'EXCLUSIVE_THREAD' is not a compute mode"), std::string::npos) << msg;
    EXPECT_NE(msg.find(events + ":5: usage: computemode <gpu>"), std::string::npos) << msg;
    EXPECT_EQ(computeModeOf(dev(0)), NVML_COMPUTEMODE_DEFAULT);
}

}  // namespace
