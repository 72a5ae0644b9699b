// The one metric catalogue (DESIGN.md "Exposition"): every metric the exporter serves, with its
// type, unit, help text, NVML source and scale. The collector reads NVML by walking this table,
// the encoder takes HELP/TYPE from it, and docs/metrics.md is generated from it
// (`kgpu exporter --print-metrics-markdown`; a test keeps the committed page equal to it).
//
// There is no Prometheus client library in Debian for C++, and the text format is small
// (facts/metrics-and-exposition.md), so the exposition is written directly (exposition.h).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace kgpu::exporter {

enum class MetricType { gauge, counter };
std::string_view to_string(MetricType type);

// Metric identifiers, in catalogue (and exposition) order.
enum class Metric : unsigned {
    // dcgm-exporter compatible (facts/metrics-and-exposition.md), DCGM device labels.
    sm_clock,
    mem_clock,
    memory_temp,
    gpu_temp,
    power_usage,
    total_energy_consumption,
    pcie_replay_counter,
    gpu_util,
    mem_copy_util,
    enc_util,
    dec_util,
    xid_errors,
    fb_free,
    fb_used,
    fb_reserved,
    ecc_sbe_vol_total,
    ecc_dbe_vol_total,
    correctable_remapped_rows,
    uncorrectable_remapped_rows,
    row_remap_failure,
    nvlink_bandwidth_total,
    // dcgm-exporter's profiling names, from NVML GPM (Hopper and newer) instead of DCGM.
    prof_gr_engine_active,
    prof_sm_active,
    prof_sm_occupancy,
    prof_pipe_tensor_active,
    prof_dram_active,
    prof_pcie_tx_bytes,
    prof_pcie_rx_bytes,
    prof_nvlink_tx_bytes,
    prof_nvlink_rx_bytes,
    // kgpu's own, lint-clean names and labels.
    gpu_health,
    gpu_last_xid,
    gpu_xid_events_total,
    gpu_xid_class_events_total,
    process_fb_used_bytes,
    pod_sm_util_ratio,
    pod_mem_util_ratio,
    // MPS sharing (kgpu mps-control-daemon's status files under --mps-root).
    mps_daemon_up,
    mps_daemon_restarts_total,
    mps_active_thread_percentage,
    mps_pinned_memory_limit_bytes,
    nvml_errors_total,
    // kgpu's processes that use the Kubernetes API (their status files under --kube-api-status-dir).
    kube_api_requests_total,
    kube_api_errors_total,
    kube_api_last_success_timestamp_seconds,
    node_events_total,
    pod_attribution_up,
    pods_over_limit,
    http_connections,
    http_connections_closed_total,
    collection_duration_seconds,
    collections_total,
    last_collection_timestamp_seconds,
    count_
};
inline constexpr std::size_t kMetricCount = static_cast<std::size_t>(Metric::count_);

// One NVML call (or other source) that yields one or more metrics. The collector calls each at
// most once per device and pass, and remembers per device which ones are NOT_SUPPORTED.
enum class Read : unsigned {
    none,           // not read from a device (exporter metrics, events, processes)
    clock_sm,
    clock_mem,
    memory_temp,
    gpu_temp,
    power,
    energy,
    pcie_replay,
    utilization,    // parts: 0 gpu, 1 memory
    enc_util,
    dec_util,
    memory_info,    // parts: 0 free, 1 used, 2 reserved (bytes)
    ecc_sbe,
    ecc_dbe,
    remapped_rows,  // parts: 0 correctable, 1 uncorrectable, 2 failure
    // Reads that need the previous pass's answer; the collector makes them itself.
    nvlink_throughput,  // NVLink KiB counters -> MB/s since the last pass, as DCGM computes it
    gpm,                // GPM metrics between the last pass's sample and this one; part = metric id
    count_
};
inline constexpr std::size_t kReadCount = static_cast<std::size_t>(Read::count_);

// The NVML entry point behind a Read, as kgpu_nvml_errors_total{function} names it.
std::string_view nvml_function(Read read);

// Which series a metric has.
enum class Scope {
    gpu,       // one per GPU (and per pod using it); DCGM labels
    instance,  // one per GPU, or per MIG instance on a MIG-enabled GPU (NVML answers per instance)
    kgpu_gpu,  // one per GPU with kgpu labels (gpu, UUID, ...)
    process,   // one per GPU process
    pod,       // one per GPU and pod using it (kgpu labels + pod labels)
    exporter,  // about the exporter itself
    mps,       // one per MPS-shared resource (`resource`)
    component, // one per kgpu process that uses the Kubernetes API (`component`)
};

struct MetricDef {
    Metric id;
    std::string_view name;
    MetricType type;
    std::string_view unit;    // for the docs: "MHz", "W", "MiB", "%", "1"...
    std::string_view help;    // the # HELP text
    std::string_view source;  // where the value comes from (the docs' "NVML source" column)
    Scope scope;
    Read read = Read::none;
    unsigned part = 0;        // which value of a multi-value Read (for Read::gpm: the GPM metric id)
    double scale = 1.0;       // exported value = source value × scale
    bool whole = false;       // rounded down to an integer after scaling (MiB, as DCGM reports)
    std::string_view labels = {};  // extra labels beyond the scope's, for the docs
};

// Every row, in Metric order (catalogue()[i].id == Metric(i)).
std::span<const MetricDef> catalogue();
const MetricDef& def(Metric m);
// The row named `name` (a DCGM field name or a kgpu_* name), or null.
const MetricDef* find_metric(std::string_view name);

// dcgm-exporter's err_msg label of DCGM_FI_DEV_XID_ERRORS for XID `xid` ("No Error" for 0,
// "Unknown Error" beyond its table), so alerts written against dcgm-exporter match.
std::string_view xid_error_message(unsigned xid);

// The class of XID `xid` as kgpu's device plugin treats it by default (deviceplugin::HealthConfig's
// ignoredXids and recoverableXids; shared/facts/diagnostics.md "Recovery classes"): "application"
// (caused by the workload: the GPU stays healthy), "recoverable" (unhealthy for a recovery period)
// or "reset-required" (every other XID, unknown ones too). kXidClasses lists them in that order.
inline constexpr std::string_view kXidClasses[] = {"application", "recoverable", "reset-required"};
std::size_t xid_class(unsigned xid);  // index into kXidClasses

// docs/metrics.md: the catalogue as a Markdown page (label order, scopes, what is out of scope).
std::string metrics_markdown();

}  // namespace kgpu::exporter
