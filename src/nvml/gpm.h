// GPU performance monitoring (GPM, NVML's profiling counters on Hopper and newer): sample
// buffers and the metrics computed from two samples. kgpu serves dcgm-exporter's DCGM_FI_PROF_*
// metrics from these without DCGM's host engine (issue #15).
//
// Usage: allocate two GpmSamples once per device, fill one with Device::gpm_sample (or
// gpm_mig_sample for a MIG instance) each collection pass, and compute the metrics between the
// previous pass's sample and this one. NVML wants the two samples at least 100 ms apart.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "common/error.h"
#include "nvml/device.h"

struct nvmlGpmSample_st;

namespace kgpu::nvml {

// nvmlGpmMetricId_t values kgpu reads (NVML's units: percent, or MiB/s for the bandwidths).
enum class GpmMetric : unsigned {
    graphics_util = 1,
    sm_util = 2,
    sm_occupancy = 3,
    hmma_tensor_util = 7,
    dram_bw_util = 10,
    pcie_tx_per_sec = 20,
    pcie_rx_per_sec = 21,
    nvlink_total_rx_per_sec = 60,
    nvlink_total_tx_per_sec = 61,
};

// The NVML entry points behind the calls below, as kgpu_nvml_errors_total{function} names them.
inline constexpr std::string_view kGpmSampleGet = "nvmlGpmSampleGet";
inline constexpr std::string_view kGpmMigSampleGet = "nvmlGpmMigSampleGet";
inline constexpr std::string_view kGpmMetricsGet = "nvmlGpmMetricsGet";

// One sample buffer (nvmlGpmSampleAlloc, freed with nvmlGpmSampleFree). Move-only; keeps the
// NVML session alive.
class GpmSample {
public:
    static Result<GpmSample> alloc(const Session& session);
    GpmSample(GpmSample&& other) noexcept;
    GpmSample& operator=(GpmSample&& other) noexcept;
    GpmSample(const GpmSample&) = delete;
    GpmSample& operator=(const GpmSample&) = delete;
    ~GpmSample();

    // The metrics between `older` and `newer` (two samples of the same device): one value per
    // id, in order; nullopt for a metric NVML could not compute (its own status is not SUCCESS).
    // The call as a whole fails when the samples do not fit together.
    static Result<std::vector<std::optional<double>>> metrics(const GpmSample& older, const GpmSample& newer,
                                                              std::span<const GpmMetric> ids);

private:
    friend class Device;
    GpmSample(std::shared_ptr<const Context> ctx, nvmlGpmSample_st* handle) : ctx_(std::move(ctx)), handle_(handle) {}
    std::shared_ptr<const Context> ctx_;
    nvmlGpmSample_st* handle_ = nullptr;
};

}  // namespace kgpu::nvml
