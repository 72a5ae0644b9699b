// Activity the simulated driver reports beyond nvmlDeviceGetUtilizationRates: GPM profiling
// samples (nvmlGpm*, Hopper and newer), NVLink throughput field values, and per-process
// utilisation (nvmlDeviceGetProcessUtilization).
//
// Model: every GPU and MIG device has integrals of a set of rates (percent for the utilisation
// metrics, MiB/s for the bandwidths) over time. The rates derive from the GPU's utilisation
// (fixture `telemetry.gpu_util` / `mem_util` with its wobble, or a `util` command), the fixture's
// PCIe throughput and the GPU's NVLink link count, unless a `gpm` command set one explicitly.
// A GPM sample copies the integrals and the time; nvmlGpmMetricsGet divides the difference of two
// samples by the time between them, as the real counters do. Integrals advance whenever they are
// read or a rate is about to change, at the rate in force at that moment.
//
// Contracts (as NVML documents them): GPM is supported on Hopper and newer (architecture >= 9);
// older GPUs answer nvmlGpmQueryDeviceSupport with isSupportedDevice 0 and every sample call with
// NOT_SUPPORTED. Sample buffers are plain memory: freeing one twice, or passing one that was never
// allocated, is INVALID_ARGUMENT. Two samples of different devices, or not in time order, make
// nvmlGpmMetricsGet fail with INVALID_ARGUMENT; a metric id the model does not know answers
// NOT_SUPPORTED in its own entry. Per-process utilisation is not supported on MIG-enabled GPUs
// (as NVML says) and answers NOT_FOUND when no process had non-zero utilisation.
#pragma GCC visibility push(default)
#include "nvml/nvml_abi.h"
#pragma GCC visibility pop

#include "handles.h"
#include "model.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <map>
#include <unordered_map>
#include <unordered_set>

using namespace kgpu_sim;

namespace {

// The GPM metric ids the model computes, and the names `gpm` commands use for them.
struct Tracked {
    unsigned id;
    const char* name;
    const char* alias;
    bool bandwidth;  // MiB/s rather than percent
};
constexpr std::array<Tracked, 17> kTracked{{
    {NVML_GPM_METRIC_GRAPHICS_UTIL, "graphics_util", "gr_engine_active", false},
    {NVML_GPM_METRIC_SM_UTIL, "sm_util", "sm_active", false},
    {NVML_GPM_METRIC_SM_OCCUPANCY, "sm_occupancy", "sm_occupancy", false},
    {NVML_GPM_METRIC_INTEGER_UTIL, "integer_util", "integer_util", false},
    {NVML_GPM_METRIC_ANY_TENSOR_UTIL, "any_tensor_util", "any_tensor_util", false},
    {NVML_GPM_METRIC_DFMA_TENSOR_UTIL, "dfma_tensor_util", "dfma_tensor_util", false},
    {NVML_GPM_METRIC_HMMA_TENSOR_UTIL, "hmma_tensor_util", "tensor_util", false},
    {NVML_GPM_METRIC_DMMA_TENSOR_UTIL, "dmma_tensor_util", "dmma_tensor_util", false},
    {NVML_GPM_METRIC_IMMA_TENSOR_UTIL, "imma_tensor_util", "imma_tensor_util", false},
    {NVML_GPM_METRIC_DRAM_BW_UTIL, "dram_bw_util", "dram_active", false},
    {NVML_GPM_METRIC_FP64_UTIL, "fp64_util", "fp64_util", false},
    {NVML_GPM_METRIC_FP32_UTIL, "fp32_util", "fp32_util", false},
    {NVML_GPM_METRIC_FP16_UTIL, "fp16_util", "fp16_util", false},
    {NVML_GPM_METRIC_PCIE_TX_PER_SEC, "pcie_tx", "pcie_tx_per_sec", true},
    {NVML_GPM_METRIC_PCIE_RX_PER_SEC, "pcie_rx", "pcie_rx_per_sec", true},
    {NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, "nvlink_rx", "nvlink_total_rx_per_sec", true},
    {NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, "nvlink_tx", "nvlink_total_tx_per_sec", true},
}};
constexpr std::size_t kN = kTracked.size();
using Values = std::array<double, kN>;

std::size_t slotOf(unsigned id) {
    for (std::size_t i = 0; i < kN; ++i)
        if (kTracked[i].id == id) return i;
    return kN;
}

constexpr std::size_t kNvlinkRx = 15, kNvlinkTx = 16;
static_assert(kTracked[kNvlinkRx].id == NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC);
static_assert(kTracked[kNvlinkTx].id == NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC);

// NVLink bandwidth of a fully busy GPU, per link (MiB/s). The model keeps it simple: a GPU's NVLink
// traffic follows its utilisation.
constexpr double kNvlinkMibPerLink = 1000.0;

struct Activity {
    bool started = false;
    double t = 0;  // seconds since State::loadedAt at the last advance
    Values integral{};
};

// Everything below is guarded by State::mutex. Keys are arena objects (Gpu, MigDevice), which are
// never freed or reused while the library is loaded, so a stale key is never confused with a new one.
std::unordered_map<const Object*, Activity> g_activity;
std::unordered_map<const Object*, std::map<std::size_t, double>> g_overrides;

struct SampleBuf {
    bool filled = false;
    const Object* device = nullptr;  // Gpu or MigDevice
    double t = 0;
    Values integral{};
};
std::unordered_set<SampleBuf*> g_samples;

double now(const State& st) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - st.loadedAt).count();
}

bool gpmCapable(const Gpu& g) { return g.spec.architecture >= NVML_DEVICE_ARCH_HOPPER; }

Values rates(const State& st, const Gpu& gpu, const MigDevice* mig) {
    const Sample s = sample(st, gpu);
    const double g = s.gpuUtil, m = s.memUtil;
    const double links = static_cast<double>(gpu.spec.links.size());
    Values r{g, 0.9 * g, 0.6 * g, 0.2 * g, 0.5 * g, 0.05 * g, 0.45 * g, 0.05 * g, 0.0, m, 0.05 * g, 0.3 * g, 0.1 * g,
             gpu.spec.telemetry.pcieTxKBps / 1024.0, gpu.spec.telemetry.pcieRxKBps / 1024.0,
             g / 100.0 * links * kNvlinkMibPerLink, g / 100.0 * links * kNvlinkMibPerLink};
    auto apply = [&](const Object* o) {
        if (auto it = g_overrides.find(o); it != g_overrides.end())
            for (auto [slot, v] : it->second) r[slot] = v;
    };
    apply(&gpu);
    if (mig) apply(mig);
    return r;
}

Activity& advance(const State& st, const Gpu& gpu, const MigDevice* mig) {
    const Object* key = mig ? static_cast<const Object*>(mig) : &gpu;
    Activity& a = g_activity[key];
    const double t = now(st);
    if (!a.started) {
        a.started = true;
        a.t = t;
        return a;
    }
    if (t > a.t) {
        const Values r = rates(st, gpu, mig);
        for (std::size_t i = 0; i < kN; ++i) a.integral[i] += r[i] * (t - a.t);
        a.t = t;
    }
    return a;
}

SampleBuf* lookupSample(nvmlGpmSample_t s) {
    auto* p = reinterpret_cast<SampleBuf*>(s.handle);
    return p && g_samples.count(p) ? p : nullptr;
}

nvmlReturn_t fillSample(const State& st, const Gpu& gpu, const MigDevice* mig, nvmlGpmSample_t s) {
    SampleBuf* buf = lookupSample(s);
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpmCapable(gpu)) return NVML_ERROR_NOT_SUPPORTED;
    const Activity& a = advance(st, gpu, mig);
    buf->filled = true;
    buf->device = mig ? static_cast<const Object*>(mig) : &gpu;
    buf->t = a.t;
    buf->integral = a.integral;
    return NVML_SUCCESS;
}

bool parseNumber(const std::string& s, double& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

namespace kgpu_sim {

void advanceActivity(State& st, Gpu& gpu) {
    advance(st, gpu, nullptr);
    for (MigDevice* m : gpu.migs) advance(st, gpu, m);
}

std::string applyGpmCommand(State& st, Gpu& gpu, MigDevice* mig, const std::vector<std::string>& settings) {
    // Validate everything before changing anything: a bad line changes nothing.
    std::vector<std::pair<std::size_t, std::optional<double>>> parsed;
    for (const std::string& s : settings) {
        const auto eq = s.find('=');
        if (eq == std::string::npos || eq == 0) return "'" + s + "' is not <metric>=<value>";
        const std::string name = s.substr(0, eq), value = s.substr(eq + 1);
        std::size_t slot = kN;
        for (std::size_t i = 0; i < kN; ++i)
            if (name == kTracked[i].name || name == kTracked[i].alias || name == std::to_string(kTracked[i].id)) slot = i;
        if (slot == kN) {
            std::string known;
            for (const auto& t : kTracked) known += (known.empty() ? "" : ", ") + std::string(t.name);
            return "unknown GPM metric '" + name + "' (expected one of: " + known + ", or its NVML id)";
        }
        if (value == "auto") {
            parsed.emplace_back(slot, std::nullopt);
            continue;
        }
        double v = 0;
        const double max = kTracked[slot].bandwidth ? 1e9 : 100.0;
        if (!parseNumber(value, v) || v < 0 || v > max)
            return "'" + value + "' is not a valid value for " + kTracked[slot].name + " (0 to " +
                   (kTracked[slot].bandwidth ? "1e9 MiB/s" : "100 %") + ", or auto)";
        parsed.emplace_back(slot, v);
    }
    if (parsed.empty()) return "usage: gpm <gpu>[:<mig>] <metric>=<value>|auto ...";
    advanceActivity(st, gpu);  // the old rates up to now
    auto& o = g_overrides[mig ? static_cast<const Object*>(mig) : &gpu];
    for (auto [slot, v] : parsed) {
        if (v) o[slot] = *v;
        else o.erase(slot);
    }
    return "";
}

bool nvlinkThroughputField(State& st, const Gpu& gpu, nvmlFieldValue_t& v) {
    const bool tx = v.fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX || v.fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX;
    const bool rx = v.fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX || v.fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX;
    if (!tx && !rx) return false;
    const std::size_t links = gpu.spec.links.size();
    if (links == 0) {
        v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        return true;
    }
    double share = 1.0;
    if (v.scopeId != NVML_NVLINK_SCOPE_ALL_LINKS) {
        if (v.scopeId >= links) {
            v.nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
            return true;
        }
        share = 1.0 / static_cast<double>(links);
    }
    const Activity& a = advance(st, gpu, nullptr);
    const bool raw = v.fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX || v.fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX;
    const double mib = a.integral[tx ? kNvlinkTx : kNvlinkRx] * share * (raw ? 1.06 : 1.0);  // headers: ~6 %
    v.valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    v.value.ullVal = static_cast<unsigned long long>(mib * 1024.0);  // KiB
    return true;
}

}  // namespace kgpu_sim

extern "C" {

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t* gpmSupport) {
    return withDevice(device, On::Any, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!gpmSupport) return NVML_ERROR_INVALID_ARGUMENT;
        if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        gpmSupport->isSupportedDevice = gpmCapable(*d.gpu) ? 1 : 0;
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t* gpmSample) {
    return withState([&](State&) -> nvmlReturn_t {
        if (!gpmSample) return NVML_ERROR_INVALID_ARGUMENT;
        auto* buf = new SampleBuf;
        g_samples.insert(buf);
        gpmSample->handle = reinterpret_cast<nvmlGpmSample_st*>(buf);
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample) {
    // Plain memory: freeing works after nvmlShutdown too.
    State& st = state();
    std::lock_guard lk(st.mutex);
    SampleBuf* buf = lookupSample(gpmSample);
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    g_samples.erase(buf);
    delete buf;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample) {
    return withDevice(device, On::Any,
                      [&](State& st, DevRef d) { return fillSample(st, *d.gpu, d.mig, gpmSample); });
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId, nvmlGpmSample_t gpmSample) {
    return withDevice(device, On::Gpu, [&](State& st, DevRef d) -> nvmlReturn_t {
        if (!lookupSample(gpmSample)) return NVML_ERROR_INVALID_ARGUMENT;
        if (!gpmCapable(*d.gpu)) return NVML_ERROR_NOT_SUPPORTED;
        if (!d.gpu->migEnabled) return NVML_ERROR_INVALID_STATE;
        for (MigDevice* m : d.gpu->migs)
            if (m->giId == gpuInstanceId) return fillSample(st, *d.gpu, m, gpmSample);
        return NVML_ERROR_NOT_FOUND;
    });
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t* metricsGet) {
    return withState([&](State&) -> nvmlReturn_t {
        if (!metricsGet) return NVML_ERROR_INVALID_ARGUMENT;
        if (metricsGet->version != NVML_GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        if (metricsGet->numMetrics > NVML_GPM_METRIC_MAX) return NVML_ERROR_INVALID_ARGUMENT;
        const SampleBuf* a = lookupSample(metricsGet->sample1);
        const SampleBuf* b = lookupSample(metricsGet->sample2);
        if (!a || !b || !a->filled || !b->filled || a->device != b->device || !(b->t > a->t))
            return NVML_ERROR_INVALID_ARGUMENT;
        const double dt = b->t - a->t;
        // Only the first numMetrics entries: callers built against older headers have a shorter array.
        for (unsigned i = 0; i < metricsGet->numMetrics; ++i) {
            nvmlGpmMetric_t& m = metricsGet->metrics[i];
            m.metricInfo = nvmlGpmMetricMetricInfo_t{nullptr, nullptr, nullptr};
            m.value = 0;
            if (m.metricId == 0 || m.metricId >= NVML_GPM_METRIC_MAX) {
                m.nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
                continue;
            }
            const std::size_t slot = slotOf(m.metricId);
            if (slot == kN) {
                m.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
                continue;
            }
            m.value = (b->integral[slot] - a->integral[slot]) / dt;
            m.nvmlReturn = NVML_SUCCESS;
        }
        return NVML_SUCCESS;
    });
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
                                             unsigned int* processSamplesCount, unsigned long long lastSeenTimeStamp) {
    return withDevice(device, On::Gpu, [&](State&, DevRef d) -> nvmlReturn_t {
        if (!processSamplesCount) return NVML_ERROR_INVALID_ARGUMENT;
        if (d.gpu->migEnabled) return NVML_ERROR_NOT_SUPPORTED;
        const unsigned long long ts = static_cast<unsigned long long>(
            std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
                .count());
        std::vector<nvmlProcessUtilizationSample_t> samples;
        if (ts > lastSeenTimeStamp)
            for (const auto& [pid, p] : d.gpu->procs)
                if (p.smUtil > 0 || p.memUtil > 0)
                    samples.push_back(nvmlProcessUtilizationSample_t{pid, ts, p.smUtil, p.memUtil, 0, 0});
        if (samples.empty()) return NVML_ERROR_NOT_FOUND;
        if (!utilization || *processSamplesCount < samples.size()) {
            *processSamplesCount = static_cast<unsigned>(samples.size());
            return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        std::copy(samples.begin(), samples.end(), utilization);
        *processSamplesCount = static_cast<unsigned>(samples.size());
        return NVML_SUCCESS;
    });
}

}  // extern "C"
