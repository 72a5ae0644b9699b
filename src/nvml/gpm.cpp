// GpmSample (gpm.h) and the Device getters of telemetry that need their own NVML structs:
// GPM samples, NVLink throughput field values, per-process utilisation.
#include "nvml/gpm.h"

#include <chrono>
#include <memory>

#include "nvml/context.h"
#include "nvml/error.h"
#include "nvml/library.h"

namespace kgpu::nvml {

// ABI checks: these layouts are what a real libnvidia-ml.so.1 reads and writes (LP64).
static_assert(sizeof(nvmlGpmMetric_t) == 40);
static_assert(sizeof(nvmlGpmSample_t) == sizeof(void*));
static_assert(offsetof(nvmlGpmMetricsGet_t, metrics) == 24);
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32);
static_assert(sizeof(nvmlFieldValue_t) == 40);

// ---- GpmSample --------------------------------------------------------------------------------

Result<GpmSample> GpmSample::alloc(const Session& session) {
    nvmlGpmSample_t s{};
    if (nvmlReturn_t r = session.ctx_->api().GpmSampleAlloc(&s); r != NVML_SUCCESS)
        return failed(*session.ctx_, "GpmSampleAlloc", r);
    if (!s.handle) return fail(Code::internal, "nvmlGpmSampleAlloc returned no buffer");
    return GpmSample(session.ctx_, s.handle);
}

GpmSample::GpmSample(GpmSample&& other) noexcept
    : ctx_(std::move(other.ctx_)), handle_(std::exchange(other.handle_, nullptr)) {}

GpmSample& GpmSample::operator=(GpmSample&& other) noexcept {
    if (this != &other) {
        if (handle_ && ctx_) ctx_->api().GpmSampleFree(nvmlGpmSample_t{handle_});
        ctx_ = std::move(other.ctx_);
        handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
}

GpmSample::~GpmSample() {
    if (handle_ && ctx_) ctx_->api().GpmSampleFree(nvmlGpmSample_t{handle_});
}

Result<std::vector<std::optional<double>>> GpmSample::metrics(const GpmSample& older, const GpmSample& newer,
                                                              std::span<const GpmMetric> ids) {
    if (!older.handle_ || !newer.handle_ || !older.ctx_) return fail(Code::invalid_argument, "GPM sample moved from");
    if (ids.size() > NVML_GPM_METRIC_MAX) return fail(Code::invalid_argument, "too many GPM metrics asked at once");
    // About 13 KiB: on the heap, not on the collector thread's stack.
    auto get = std::make_unique<nvmlGpmMetricsGet_t>();
    get->version = NVML_GPM_METRICS_GET_VERSION;
    get->numMetrics = static_cast<unsigned>(ids.size());
    get->sample1 = nvmlGpmSample_t{older.handle_};
    get->sample2 = nvmlGpmSample_t{newer.handle_};
    for (std::size_t i = 0; i < ids.size(); ++i) get->metrics[i].metricId = static_cast<unsigned>(ids[i]);
    if (nvmlReturn_t r = older.ctx_->api().GpmMetricsGet(get.get()); r != NVML_SUCCESS)
        return failed(*older.ctx_, "GpmMetricsGet", r);
    std::vector<std::optional<double>> out(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i)
        if (get->metrics[i].nvmlReturn == NVML_SUCCESS) out[i] = get->metrics[i].value;
    return out;
}

// ---- Device -----------------------------------------------------------------------------------

Result<bool> Device::gpm_supported() const {
    nvmlGpmSupport_t support{};
    support.version = NVML_GPM_SUPPORT_VERSION;
    KGPU_DEVICE_CALL(GpmQueryDeviceSupport, &support);
    return support.isSupportedDevice != 0;
}

Status Device::gpm_sample(GpmSample& into) const {
    if (!into.handle_) return fail(Code::invalid_argument, "GPM sample moved from");
    KGPU_DEVICE_CALL(GpmSampleGet, nvmlGpmSample_t{into.handle_});
    return {};
}

Status Device::gpm_mig_sample(unsigned gpu_instance_id, GpmSample& into) const {
    if (!into.handle_) return fail(Code::invalid_argument, "GPM sample moved from");
    KGPU_DEVICE_CALL(GpmMigSampleGet, gpu_instance_id, nvmlGpmSample_t{into.handle_});
    return {};
}

Result<NvLinkThroughput> Device::nvlink_throughput() const {
    nvmlFieldValue_t v[2]{};
    v[0].fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX;
    v[1].fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX;
    v[0].scopeId = v[1].scopeId = NVML_NVLINK_SCOPE_ALL_LINKS;
    KGPU_DEVICE_CALL(DeviceGetFieldValues, 2, v);
    // Each field carries its own status; NOT_SUPPORTED on a GPU without NVLink.
    for (const auto& f : v)
        if (f.nvmlReturn != NVML_SUCCESS) return failed(*ctx_, "DeviceGetFieldValues", f.nvmlReturn);
    auto as_u64 = [](const nvmlFieldValue_t& f) -> std::uint64_t {
        switch (f.valueType) {
            case NVML_VALUE_TYPE_DOUBLE: return static_cast<std::uint64_t>(f.value.dVal);
            case NVML_VALUE_TYPE_UNSIGNED_INT: return f.value.uiVal;
            case NVML_VALUE_TYPE_UNSIGNED_LONG: return f.value.ulVal;
            case NVML_VALUE_TYPE_SIGNED_LONG_LONG: return static_cast<std::uint64_t>(f.value.sllVal);
            case NVML_VALUE_TYPE_SIGNED_INT: return static_cast<std::uint64_t>(f.value.siVal);
            default: return f.value.ullVal;
        }
    };
    return NvLinkThroughput{as_u64(v[0]), as_u64(v[1]), std::max(v[0].timestamp, v[1].timestamp)};
}

Result<std::vector<ProcessUtilization>> Device::process_utilization(std::uint64_t since_us) const {
    // The driver answers how many samples it has; it may have more by the second call, so retry
    // a few times with a larger buffer.
    unsigned count = 0;
    auto r = call(ctx_->api().DeviceGetProcessUtilization, nullptr, &count, since_us);
    for (int attempt = 0; attempt < 4; ++attempt) {
        if (!r) return std::unexpected(r.error());
        if (*r == NVML_ERROR_NOT_FOUND) return std::vector<ProcessUtilization>{};
        if (*r != NVML_ERROR_INSUFFICIENT_SIZE && *r != NVML_SUCCESS) return failed(*ctx_, "DeviceGetProcessUtilization", *r);
        if (*r == NVML_SUCCESS && count == 0) return std::vector<ProcessUtilization>{};
        std::vector<nvmlProcessUtilizationSample_t> buf(count + 8);
        unsigned n = static_cast<unsigned>(buf.size());
        r = call(ctx_->api().DeviceGetProcessUtilization, buf.data(), &n, since_us);
        if (r && *r == NVML_SUCCESS) {
            std::vector<ProcessUtilization> out;
            out.reserve(n);
            for (unsigned i = 0; i < n && i < buf.size(); ++i)
                out.push_back(ProcessUtilization{buf[i].pid, buf[i].timeStamp, buf[i].smUtil, buf[i].memUtil,
                                                 buf[i].encUtil, buf[i].decUtil});
            return out;
        }
        count = n;
    }
    if (!r) return std::unexpected(r.error());
    return failed(*ctx_, "DeviceGetProcessUtilization", *r);
}

}  // namespace kgpu::nvml
