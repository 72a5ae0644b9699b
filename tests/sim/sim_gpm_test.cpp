// The simulator's activity model through the C ABI: GPM support, samples and metrics (GPU and MIG
// instance), the `gpm` command, NVLink throughput field values, per-process utilisation and the
// `proc ... sm= mem=` options.
#include "sim_support.h"

#include <cmath>
#include <memory>

using namespace simtest;
using namespace std::chrono_literals;

namespace {

// One H100 with MIG enabled (two GPU instances) and one without MIG, for the MIG paths.
const std::string kH100Mig = std::string(KGPU_SOURCE_DIR) + "/tests/exporter/h100-mig.yaml";

// A sample buffer freed at the end of the test (unless the test freed it).
struct Sample {
    nvmlGpmSample_t s{};
    Sample() { EXPECT_EQ(NV(nvmlGpmSampleAlloc)(&s), NVML_SUCCESS); }
    ~Sample() {
        if (s.handle) NV(nvmlGpmSampleFree)(s);
    }
};

class SimGpm : public SimTest {
protected:
    TempDir tmp;
    std::string events = tmp.file("events");

    unsigned supported(nvmlDevice_t d) {
        nvmlGpmSupport_t s{};
        s.version = NVML_GPM_SUPPORT_VERSION;
        EXPECT_EQ(NV(nvmlGpmQueryDeviceSupport)(d, &s), NVML_SUCCESS);
        return s.isSupportedDevice;
    }
    // Metrics between two samples taken `gap` apart, in the order of `ids`; NaN for a failed one.
    std::vector<double> between(const std::function<nvmlReturn_t(nvmlGpmSample_t)>& take, std::vector<unsigned> ids,
                                std::chrono::milliseconds gap = 150ms) {
        Sample a, b;
        EXPECT_EQ(take(a.s), NVML_SUCCESS);
        std::this_thread::sleep_for(gap);
        EXPECT_EQ(take(b.s), NVML_SUCCESS);
        auto get = std::make_unique<nvmlGpmMetricsGet_t>();
        get->version = NVML_GPM_METRICS_GET_VERSION;
        get->numMetrics = static_cast<unsigned>(ids.size());
        get->sample1 = a.s;
        get->sample2 = b.s;
        for (size_t i = 0; i < ids.size(); ++i) get->metrics[i].metricId = ids[i];
        EXPECT_EQ(NV(nvmlGpmMetricsGet)(get.get()), NVML_SUCCESS);
        std::vector<double> out;
        for (size_t i = 0; i < ids.size(); ++i)
            out.push_back(get->metrics[i].nvmlReturn == NVML_SUCCESS ? get->metrics[i].value : std::nan(""));
        return out;
    }
    std::vector<double> gpuMetrics(unsigned gpu, std::vector<unsigned> ids) {
        nvmlDevice_t d = dev(gpu);
        return between([&](nvmlGpmSample_t s) { return NV(nvmlGpmSampleGet)(d, s); }, std::move(ids));
    }
    std::pair<unsigned long long, long long> nvlink(unsigned gpu, unsigned field, unsigned scope = NVML_NVLINK_SCOPE_ALL_LINKS,
                                                    nvmlReturn_t want = NVML_SUCCESS) {
        nvmlFieldValue_t v{};
        v.fieldId = field;
        v.scopeId = scope;
        EXPECT_EQ(NV(nvmlDeviceGetFieldValues)(dev(gpu), 1, &v), NVML_SUCCESS);
        EXPECT_EQ(v.nvmlReturn, want);
        if (want == NVML_SUCCESS) {
            EXPECT_EQ(v.valueType, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG);
        }
        return {v.value.ullVal, v.timestamp};
    }
};

TEST_F(SimGpm, SupportedOnHopperOnly) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml")), NVML_SUCCESS);
    EXPECT_EQ(supported(dev(0)), 1u);
    nvmlGpmSupport_t bad{};
    bad.version = 7;
    EXPECT_EQ(NV(nvmlGpmQueryDeviceSupport)(dev(0), &bad), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    EXPECT_EQ(NV(nvmlGpmQueryDeviceSupport)(dev(0), nullptr), NVML_ERROR_INVALID_ARGUMENT);
    NV(nvmlShutdown)();

    for (const char* node : {"t4x4.yaml", "a100-mig.yaml", "pcie-nvlink-pairs.yaml"}) {
        SCOPED_TRACE(node);
        ASSERT_EQ(start(fixture(node)), NVML_SUCCESS);
        EXPECT_EQ(supported(dev(0)), 0u);
        Sample s;
        EXPECT_EQ(NV(nvmlGpmSampleGet)(dev(0), s.s), NVML_ERROR_NOT_SUPPORTED) << "never a sample on a pre-Hopper GPU";
        NV(nvmlShutdown)();
    }
}

TEST_F(SimGpm, MetricsFollowUtilisationAndGpmCommands) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml"), events), NVML_SUCCESS);
    const std::vector<unsigned> ids = {NVML_GPM_METRIC_GRAPHICS_UTIL, NVML_GPM_METRIC_SM_UTIL,
                                       NVML_GPM_METRIC_SM_OCCUPANCY, NVML_GPM_METRIC_HMMA_TENSOR_UTIL,
                                       NVML_GPM_METRIC_DRAM_BW_UTIL, NVML_GPM_METRIC_PCIE_TX_PER_SEC,
                                       NVML_GPM_METRIC_PCIE_RX_PER_SEC, NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
                                       NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC};
    // Idle (the fixture's 0 % stays 0): no activity, but PCIe traffic from the fixture (KB/s).
    auto v = gpuMetrics(2, ids);
    EXPECT_EQ(v[0], 0.0);
    EXPECT_EQ(v[3], 0.0);
    EXPECT_NEAR(v[5], 1000.0 / 1024, 1e-6);
    EXPECT_NEAR(v[6], 2000.0 / 1024, 1e-6);

    append(events, "util 2 80 40\n");
    ASSERT_TRUE(eventually([&] {
        nvmlUtilization_t u{};
        return NV(nvmlDeviceGetUtilizationRates)(dev(2), &u) == NVML_SUCCESS && u.gpu == 80;
    }));
    v = gpuMetrics(2, ids);
    EXPECT_NEAR(v[0], 80, 1e-6);
    EXPECT_NEAR(v[1], 72, 1e-6);
    EXPECT_NEAR(v[2], 48, 1e-6);
    EXPECT_NEAR(v[3], 36, 1e-6);
    EXPECT_NEAR(v[4], 40, 1e-6);
    EXPECT_NEAR(v[7], 0.8 * 18 * 1000, 1e-3) << "18 NVLink links";
    EXPECT_NEAR(v[8], 0.8 * 18 * 1000, 1e-3);

    append(events, "gpm 2 tensor_util=55.5 dram_bw_util=12 nvlink_tx=123\n");
    ASSERT_TRUE(eventually([&] { return std::abs(gpuMetrics(2, {NVML_GPM_METRIC_HMMA_TENSOR_UTIL})[0] - 55.5) < 1e-6; }));
    v = gpuMetrics(2, ids);
    EXPECT_NEAR(v[0], 80, 1e-6) << "the others still follow util";
    EXPECT_NEAR(v[3], 55.5, 1e-6);
    EXPECT_NEAR(v[4], 12, 1e-6);
    EXPECT_NEAR(v[8], 123, 1e-6);
    append(events, "gpm 2 7=auto\n");
    ASSERT_TRUE(eventually([&] { return std::abs(gpuMetrics(2, {NVML_GPM_METRIC_HMMA_TENSOR_UTIL})[0] - 36) < 1e-6; }));
    EXPECT_EQ(gpuMetrics(3, {NVML_GPM_METRIC_HMMA_TENSOR_UTIL})[0], 0.0) << "other GPUs untouched";
}

TEST_F(SimGpm, AveragesOverTheWindowLikeRealCounters) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml"), events), NVML_SUCCESS);
    nvmlDevice_t d = dev(0);
    Sample a, b;
    ASSERT_EQ(NV(nvmlGpmSampleGet)(d, a.s), NVML_SUCCESS);
    std::this_thread::sleep_for(200ms);
    append(events, "gpm 0 sm_util=100\n");
    ASSERT_TRUE(eventually([&] { return std::abs(gpuMetrics(0, {NVML_GPM_METRIC_SM_UTIL})[0] - 100) < 1e-6; }));
    ASSERT_EQ(NV(nvmlGpmSampleGet)(d, b.s), NVML_SUCCESS);
    auto get = std::make_unique<nvmlGpmMetricsGet_t>();
    get->version = NVML_GPM_METRICS_GET_VERSION;
    get->numMetrics = 1;
    get->sample1 = a.s;
    get->sample2 = b.s;
    get->metrics[0].metricId = NVML_GPM_METRIC_SM_UTIL;
    ASSERT_EQ(NV(nvmlGpmMetricsGet)(get.get()), NVML_SUCCESS);
    EXPECT_GT(get->metrics[0].value, 0.0);
    EXPECT_LT(get->metrics[0].value, 100.0) << "0 % for the first 200 ms, 100 % afterwards: an average in between";
}

TEST_F(SimGpm, SamplesAndMetricsAreCheckedLikeNvmlDoes) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml")), NVML_SUCCESS);
    Sample a, b, c, unfilled;
    ASSERT_EQ(NV(nvmlGpmSampleGet)(dev(0), a.s), NVML_SUCCESS);
    ASSERT_EQ(NV(nvmlGpmSampleGet)(dev(1), c.s), NVML_SUCCESS);
    std::this_thread::sleep_for(20ms);
    ASSERT_EQ(NV(nvmlGpmSampleGet)(dev(0), b.s), NVML_SUCCESS);
    auto get = std::make_unique<nvmlGpmMetricsGet_t>();
    auto ask = [&](nvmlGpmSample_t x, nvmlGpmSample_t y, unsigned n = 1, unsigned version = NVML_GPM_METRICS_GET_VERSION) {
        get->version = version;
        get->numMetrics = n;
        get->sample1 = x;
        get->sample2 = y;
        return NV(nvmlGpmMetricsGet)(get.get());
    };
    for (auto& m : get->metrics) {
        m.metricId = NVML_GPM_METRIC_GRAPHICS_UTIL;
        m.nvmlReturn = 4242;  // untouched entries keep this
    }
    get->metrics[1].metricId = 99;   // not modelled
    get->metrics[2].metricId = 5000;  // not a metric id
    EXPECT_EQ(ask(a.s, b.s, 3), NVML_SUCCESS);
    EXPECT_EQ(get->metrics[0].nvmlReturn, NVML_SUCCESS);
    EXPECT_EQ(get->metrics[1].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(get->metrics[2].nvmlReturn, NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(get->metrics[3].nvmlReturn, 4242) << "only numMetrics entries are written (older callers' arrays are shorter)";
    EXPECT_EQ(ask(b.s, a.s), NVML_ERROR_INVALID_ARGUMENT) << "samples out of time order";
    EXPECT_EQ(ask(a.s, c.s), NVML_ERROR_INVALID_ARGUMENT) << "samples of two GPUs";
    EXPECT_EQ(ask(a.s, unfilled.s), NVML_ERROR_INVALID_ARGUMENT) << "a sample never filled";
    EXPECT_EQ(ask(a.s, b.s, 1, 2), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    EXPECT_EQ(ask(a.s, b.s, NVML_GPM_METRIC_MAX + 1), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(NV(nvmlGpmMetricsGet)(nullptr), NVML_ERROR_INVALID_ARGUMENT);

    nvmlGpmSample_t foreign{reinterpret_cast<nvmlGpmSample_st*>(get.get())};
    EXPECT_EQ(NV(nvmlGpmSampleGet)(dev(0), foreign), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(NV(nvmlGpmSampleFree)(foreign), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(NV(nvmlGpmSampleFree)(a.s), NVML_SUCCESS);
    EXPECT_EQ(NV(nvmlGpmSampleFree)(a.s), NVML_ERROR_INVALID_ARGUMENT) << "double free";
    a.s.handle = nullptr;
    EXPECT_EQ(NV(nvmlGpmSampleAlloc)(nullptr), NVML_ERROR_INVALID_ARGUMENT);

    NV(nvmlShutdown)();
    nvmlGpmSample_t s{};
    EXPECT_EQ(NV(nvmlGpmSampleAlloc)(&s), NVML_ERROR_UNINITIALIZED);
}

TEST_F(SimGpm, MigInstancesHaveTheirOwnSamples) {
    ASSERT_EQ(start(kH100Mig, events), NVML_SUCCESS);
    EXPECT_EQ(supported(dev(0)), 1u);
    EXPECT_EQ(supported(mig(0, 0)), 1u) << "the query takes MIG device handles too";
    // GPU 0 has MIG on, so NVML answers no utilisation for it: GPU 1's (MIG off), set by the last
    // line, says when the lines before it have been applied.
    append(events, "util 0 60 10\ngpm 0:1 sm_util=25\nutil 1 1 0\n");
    ASSERT_TRUE(eventually([&] {
        nvmlUtilization_t u{};
        return NV(nvmlDeviceGetUtilizationRates)(dev(1), &u) == NVML_SUCCESS && u.gpu == 1;
    }));
    nvmlDevice_t gpu = dev(0);
    auto instance = [&](unsigned gi) {
        return between([&](nvmlGpmSample_t s) { return NV(nvmlGpmMigSampleGet)(gpu, gi, s); },
                       {NVML_GPM_METRIC_GRAPHICS_UTIL, NVML_GPM_METRIC_SM_UTIL});
    };
    auto first = instance(1);
    EXPECT_NEAR(first[0], 60, 1e-6);
    EXPECT_NEAR(first[1], 54, 1e-6) << "the instance's own figures follow its GPU";
    auto second = instance(9);
    EXPECT_NEAR(second[1], 25, 1e-6) << "`gpm 0:1` is the second MIG device, GPU instance 9";
    // nvmlGpmSampleGet on the MIG device handle samples the same instance.
    nvmlDevice_t m1 = mig(0, 1);
    auto by_handle = between([&](nvmlGpmSample_t s) { return NV(nvmlGpmSampleGet)(m1, s); }, {NVML_GPM_METRIC_SM_UTIL});
    EXPECT_NEAR(by_handle[0], 25, 1e-6);

    Sample s;
    EXPECT_EQ(NV(nvmlGpmMigSampleGet)(gpu, 4, s.s), NVML_ERROR_NOT_FOUND) << "no GPU instance 4";
    EXPECT_EQ(NV(nvmlGpmMigSampleGet)(dev(1), 1, s.s), NVML_ERROR_INVALID_STATE) << "GPU 1 is not in MIG mode";
    EXPECT_EQ(NV(nvmlGpmMigSampleGet)(m1, 1, s.s), NVML_ERROR_NOT_SUPPORTED) << "takes the parent GPU's handle";
}

TEST_F(SimGpm, NvlinkThroughputFieldsCountKibibytes) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml"), events), NVML_SUCCESS);
    append(events, "util 1 50 0\n");
    ASSERT_TRUE(eventually([&] {
        nvmlUtilization_t u{};
        return NV(nvmlDeviceGetUtilizationRates)(dev(1), &u) == NVML_SUCCESS && u.gpu == 50;
    }));
    const auto t0 = std::chrono::steady_clock::now();
    const auto a = nvlink(1, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX);
    std::this_thread::sleep_for(300ms);
    const auto b = nvlink(1, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double kib_per_s = static_cast<double>(b.first - a.first) / secs;
    EXPECT_GT(kib_per_s, 0.5 * 18 * 1000 * 1024 * 0.8) << "0.5 x 18 links x 1000 MiB/s, in KiB/s";
    EXPECT_LT(kib_per_s, 0.5 * 18 * 1000 * 1024 * 1.2);
    EXPECT_GT(b.second, 0) << "field values carry a timestamp";
    EXPECT_GE(nvlink(1, NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX).first, nvlink(1, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX).first);
    EXPECT_LT(nvlink(1, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 3).first, nvlink(1, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX).first)
        << "one link carries a share";
    nvlink(1, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 18, NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvlink(0, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX).first, 0u) << "an idle GPU moves nothing";
    NV(nvmlShutdown)();

    ASSERT_EQ(start(fixture("t4x4.yaml")), NVML_SUCCESS);
    nvlink(0, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, NVML_NVLINK_SCOPE_ALL_LINKS, NVML_ERROR_NOT_SUPPORTED);
}

TEST_F(SimGpm, ProcessUtilizationFromProcCommands) {
    ASSERT_EQ(start(fixture("t4x4.yaml"), events), NVML_SUCCESS);
    nvmlDevice_t d = dev(1);
    unsigned n = 0;
    EXPECT_EQ(NV(nvmlDeviceGetProcessUtilization)(d, nullptr, &n, 0), NVML_ERROR_NOT_FOUND) << "no process";
    append(events, "proc 1 100 1048576 train sm=40 mem=10\nproc 1 200 1048576 idle\nproc 1 300 4096 sm=5\n");
    ASSERT_TRUE(eventually([&] {
        n = 0;
        return NV(nvmlDeviceGetProcessUtilization)(d, nullptr, &n, 0) == NVML_ERROR_INSUFFICIENT_SIZE && n == 2;
    })) << "processes with no utilisation have no sample";
    std::vector<nvmlProcessUtilizationSample_t> buf(1);
    n = 1;
    EXPECT_EQ(NV(nvmlDeviceGetProcessUtilization)(d, buf.data(), &n, 0), NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT_EQ(n, 2u);
    buf.resize(4);
    n = 4;
    ASSERT_EQ(NV(nvmlDeviceGetProcessUtilization)(d, buf.data(), &n, 0), NVML_SUCCESS);
    ASSERT_EQ(n, 2u);
    EXPECT_EQ(buf[0].pid, 100u);
    EXPECT_EQ(buf[0].smUtil, 40u);
    EXPECT_EQ(buf[0].memUtil, 10u);
    EXPECT_EQ(buf[1].pid, 300u);
    EXPECT_EQ(buf[1].smUtil, 5u);
    EXPECT_GT(buf[0].timeStamp, 1600000000ull * 1000000) << "microseconds since 1970";
    n = 4;
    EXPECT_EQ(NV(nvmlDeviceGetProcessUtilization)(d, buf.data(), &n, buf[0].timeStamp + 60'000'000), NVML_ERROR_NOT_FOUND)
        << "nothing newer than lastSeenTimeStamp";
    // The name is still the process name.
    char name[64] = {};
    ASSERT_EQ(NV(nvmlSystemGetProcessName)(100, name, sizeof name), NVML_SUCCESS);
    EXPECT_STREQ(name, "train");
    EXPECT_EQ(NV(nvmlDeviceGetProcessUtilization)(d, buf.data(), nullptr, 0), NVML_ERROR_INVALID_ARGUMENT);
    NV(nvmlShutdown)();

    ASSERT_EQ(start(fixture("a100-mig.yaml")), NVML_SUCCESS);
    n = 4;
    EXPECT_EQ(NV(nvmlDeviceGetProcessUtilization)(dev(0), buf.data(), &n, 0), NVML_ERROR_NOT_SUPPORTED)
        << "not on MIG-enabled GPUs";
}

TEST_F(SimGpm, BadLinesAreReportedAndChangeNothing) {
    ASSERT_EQ(start(fixture("dgx-h100.yaml"), events), NVML_SUCCESS);
    StderrCapture err;
    append(events,
           "gpm 0 sm_util=50 bogus=1\ngpm 0 sm_util=150\ngpm 0 sm_util\ngpm 0\ngpm 9 sm_util=1\n"
           "proc 0 1 10 a sm=101\nproc 0 1 10 a b\ngpm 0 nvlink_rx=2000000\n");
    ASSERT_TRUE(eventually([&] { return std::abs(gpuMetrics(0, {NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC})[0] - 2e6) < 1e-3; }));
    const std::string text = err.text();
    EXPECT_NE(text.find(":1: unknown GPM metric 'bogus'"), std::string::npos) << text;
    EXPECT_NE(text.find(":2: '150' is not a valid value for sm_util"), std::string::npos) << text;
    EXPECT_NE(text.find(":3: 'sm_util' is not <metric>=<value>"), std::string::npos) << text;
    EXPECT_NE(text.find(":4: usage: gpm"), std::string::npos) << text;
    EXPECT_NE(text.find(":5: GPU index 9 out of range"), std::string::npos) << text;
    EXPECT_NE(text.find(":6: '101' is not a valid SM percentage"), std::string::npos) << text;
    EXPECT_NE(text.find(":7: usage: proc"), std::string::npos) << text;
    EXPECT_EQ(gpuMetrics(0, {NVML_GPM_METRIC_SM_UTIL})[0], 0.0) << "the first line set nothing: it had a bad setting";
}

}  // namespace
