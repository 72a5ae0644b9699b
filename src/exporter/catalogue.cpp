#include "exporter/catalogue.h"

#include <array>

#include "exporter/counters.h"

#include <fmt/format.h>

namespace kgpu::exporter {

std::string_view to_string(MetricType type) { return type == MetricType::counter ? "counter" : "gauge"; }

namespace {

constexpr double kMiB = 1.0 / (1024.0 * 1024.0);
constexpr double kPercent = 0.01;              // NVML percent -> DCGM ratio 0..1
constexpr double kMiBps = 1024.0 * 1024.0;     // NVML MiB/s -> DCGM bytes/s

using enum Metric;
using MT = MetricType;
using S = Scope;
using R = Read;

// dcgm-exporter's names, types and units (facts/metrics-and-exposition.md); help texts in the
// words of its default counters file.
constexpr std::array<MetricDef, kMetricCount> kCatalogue{{
    {sm_clock, "DCGM_FI_DEV_SM_CLOCK", MT::gauge, "MHz", "SM clock frequency (in MHz).",
     "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)", S::gpu, R::clock_sm},
    {mem_clock, "DCGM_FI_DEV_MEM_CLOCK", MT::gauge, "MHz", "Memory clock frequency (in MHz).",
     "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)", S::gpu, R::clock_mem},
    {memory_temp, "DCGM_FI_DEV_MEMORY_TEMP", MT::gauge, "°C", "Memory temperature (in C).",
     "nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP); HBM parts only", S::gpu, R::memory_temp},
    {gpu_temp, "DCGM_FI_DEV_GPU_TEMP", MT::gauge, "°C", "GPU temperature (in C).",
     "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)", S::gpu, R::gpu_temp},
    {power_usage, "DCGM_FI_DEV_POWER_USAGE", MT::gauge, "W", "Power draw (in W).", "nvmlDeviceGetPowerUsage (mW)",
     S::gpu, R::power, 0, 0.001},
    {total_energy_consumption, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", MT::counter, "mJ",
     "Total energy consumption since boot (in mJ).", "nvmlDeviceGetTotalEnergyConsumption", S::gpu, R::energy},
    {pcie_replay_counter, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", MT::counter, "1", "Total number of PCIe retries.",
     "nvmlDeviceGetPcieReplayCounter", S::gpu, R::pcie_replay},
    {gpu_util, "DCGM_FI_DEV_GPU_UTIL", MT::gauge, "%", "GPU utilization (in %).",
     "nvmlDeviceGetUtilizationRates().gpu", S::gpu, R::utilization, 0},
    {mem_copy_util, "DCGM_FI_DEV_MEM_COPY_UTIL", MT::gauge, "%", "Memory utilization (in %).",
     "nvmlDeviceGetUtilizationRates().memory", S::gpu, R::utilization, 1},
    {enc_util, "DCGM_FI_DEV_ENC_UTIL", MT::gauge, "%", "Encoder utilization (in %).",
     "nvmlDeviceGetEncoderUtilization", S::gpu, R::enc_util},
    {dec_util, "DCGM_FI_DEV_DEC_UTIL", MT::gauge, "%", "Decoder utilization (in %).",
     "nvmlDeviceGetDecoderUtilization", S::gpu, R::dec_util},
    {xid_errors, "DCGM_FI_DEV_XID_ERRORS", MT::gauge, "XID", "Value of the last XID error encountered.",
     "NVML XID events (nvmlEventSetWait, nvmlEventTypeXidCriticalError); 0 before any", S::gpu},
    {fb_free, "DCGM_FI_DEV_FB_FREE", MT::gauge, "MiB", "Framebuffer memory free (in MiB).",
     "nvmlDeviceGetMemoryInfo_v2().free (bytes)", S::instance, R::memory_info, 0, kMiB, true},
    {fb_used, "DCGM_FI_DEV_FB_USED", MT::gauge, "MiB", "Framebuffer memory used (in MiB).",
     "nvmlDeviceGetMemoryInfo_v2().used (bytes)", S::instance, R::memory_info, 1, kMiB, true},
    {fb_reserved, "DCGM_FI_DEV_FB_RESERVED", MT::gauge, "MiB", "Framebuffer memory reserved (in MiB).",
     "nvmlDeviceGetMemoryInfo_v2().reserved (bytes)", S::instance, R::memory_info, 2, kMiB, true},
    {ecc_sbe_vol_total, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", MT::counter, "errors",
     "Total number of single-bit volatile ECC errors.",
     "nvmlDeviceGetTotalEccErrors(CORRECTED, VOLATILE); absent with ECC off", S::gpu, R::ecc_sbe},
    {ecc_dbe_vol_total, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", MT::counter, "errors",
     "Total number of double-bit volatile ECC errors.",
     "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE); absent with ECC off", S::gpu, R::ecc_dbe},
    {correctable_remapped_rows, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", MT::counter, "rows",
     "Number of remapped rows for correctable errors.", "nvmlDeviceGetRemappedRows (Ampere and newer)", S::gpu,
     R::remapped_rows, 0},
    {uncorrectable_remapped_rows, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", MT::counter, "rows",
     "Number of remapped rows for uncorrectable errors.", "nvmlDeviceGetRemappedRows (Ampere and newer)", S::gpu,
     R::remapped_rows, 1},
    {row_remap_failure, "DCGM_FI_DEV_ROW_REMAP_FAILURE", MT::gauge, "0/1", "Whether remapping of rows has failed.",
     "nvmlDeviceGetRemappedRows (Ampere and newer)", S::gpu, R::remapped_rows, 2},
    {nvlink_bandwidth_total, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", MT::counter, "MB/s",
     "Total number of NVLink bandwidth counters for all lanes.",
     "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX + _RX, all links): KiB moved since the "
     "previous pass / seconds / 1000, as DCGM computes it (0 on the first pass); GPUs with NVLink only",
     S::gpu, R::nvlink_throughput},

    // Profiling: NVML GPM on Hopper and newer, averaged between this pass's sample and the
    // previous one (DCGM's profiling module does the same between two samples of its watch).
    {prof_gr_engine_active, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", MT::gauge, "ratio",
     "Ratio of time the graphics engine is active.", "NVML GPM metric 1 (GRAPHICS_UTIL, %); Hopper and newer",
     S::instance, R::gpm, 1, kPercent},
    {prof_sm_active, "DCGM_FI_PROF_SM_ACTIVE", MT::gauge, "ratio",
     "The ratio of cycles an SM has at least 1 warp assigned.", "NVML GPM metric 2 (SM_UTIL, %); Hopper and newer",
     S::instance, R::gpm, 2, kPercent},
    {prof_sm_occupancy, "DCGM_FI_PROF_SM_OCCUPANCY", MT::gauge, "ratio",
     "The ratio of number of warps resident on an SM.", "NVML GPM metric 3 (SM_OCCUPANCY, %); Hopper and newer",
     S::instance, R::gpm, 3, kPercent},
    {prof_pipe_tensor_active, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", MT::gauge, "ratio",
     "Ratio of cycles the tensor (HMMA) pipe is active.",
     "NVML GPM metric 7 (HMMA_TENSOR_UTIL, %); Hopper and newer", S::instance, R::gpm, 7, kPercent},
    {prof_dram_active, "DCGM_FI_PROF_DRAM_ACTIVE", MT::gauge, "ratio",
     "Ratio of cycles the device memory interface is active sending or receiving data.",
     "NVML GPM metric 10 (DRAM_BW_UTIL, %); Hopper and newer", S::instance, R::gpm, 10, kPercent},
    {prof_pcie_tx_bytes, "DCGM_FI_PROF_PCIE_TX_BYTES", MT::gauge, "B/s",
     "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in "
     "bytes per second.",
     "NVML GPM metric 20 (PCIE_TX_PER_SEC, MiB/s); Hopper and newer", S::instance, R::gpm, 20, kMiBps},
    {prof_pcie_rx_bytes, "DCGM_FI_PROF_PCIE_RX_BYTES", MT::gauge, "B/s",
     "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes "
     "per second.",
     "NVML GPM metric 21 (PCIE_RX_PER_SEC, MiB/s); Hopper and newer", S::instance, R::gpm, 21, kMiBps},
    {prof_nvlink_tx_bytes, "DCGM_FI_PROF_NVLINK_TX_BYTES", MT::gauge, "B/s",
     "The rate of data transmitted over NVLink, including both protocol headers and data payloads, in bytes per "
     "second.",
     "NVML GPM metric 61 (NVLINK_TOTAL_TX_PER_SEC, MiB/s); Hopper and newer", S::instance, R::gpm, 61, kMiBps},
    {prof_nvlink_rx_bytes, "DCGM_FI_PROF_NVLINK_RX_BYTES", MT::gauge, "B/s",
     "The rate of data received over NVLink, including both protocol headers and data payloads, in bytes per "
     "second.",
     "NVML GPM metric 60 (NVLINK_TOTAL_RX_PER_SEC, MiB/s); Hopper and newer", S::instance, R::gpm, 60, kMiBps},

    {gpu_health, "kgpu_gpu_health", MT::gauge, "0/1",
     "GPU state as the exporter sees it: 1 for the current state (ok, error: some NVML reads failed this pass, "
     "lost: the GPU does not answer), 0 for the others.",
     "every NVML read of the pass; GPU_IS_LOST means lost", S::kgpu_gpu, R::none, 0, 1.0, false, "state"},
    {gpu_last_xid, "kgpu_gpu_last_xid", MT::gauge, "XID", "The last XID reported for this GPU, 0 before any.",
     "NVML XID events", S::kgpu_gpu},
    {gpu_xid_events_total, "kgpu_gpu_xid_events_total", MT::counter, "events",
     "XID events reported for this GPU (or one of its MIG devices) since the exporter started.",
     "NVML XID events", S::kgpu_gpu},
    {gpu_xid_class_events_total, "kgpu_gpu_xid_class_events_total", MT::counter, "events",
     "XID events reported for this GPU (or one of its MIG devices) since the exporter started, by class as kgpu's "
     "device plugin treats them by default: application (13, 31, 43, 45, 68, 109: the GPU stays healthy), "
     "recoverable (92, 94) or reset-required (every other XID); all three series from the start.",
     "NVML XID events", S::kgpu_gpu, R::none, 0, 1.0, false, "xid_class"},
    {process_fb_used_bytes, "kgpu_process_fb_used_bytes", MT::gauge, "bytes",
     "GPU memory used by one compute process (host PID), with the pod that runs it when known.",
     "nvmlDeviceGetComputeRunningProcesses_v3 (per MIG device on MIG GPUs), nvmlSystemGetProcessName; "
     "<proc-root>/<pid>/cgroup + CRI ListContainers for the pod",
     S::process, R::none, 0, 1.0, false, "GPU_I_ID (MIG only), pid, process, pod, namespace, container"},
    {pod_sm_util_ratio, "kgpu_pod_sm_util_ratio", MT::gauge, "ratio",
     "Share of the GPU's SM time the pod's processes used in the last interval (only with --kubernetes; "
     "not on MIG-enabled GPUs, where NVML has no per-process utilisation).",
     "nvmlDeviceGetProcessUtilization (smUtil, %, newest samples since the last pass, summed over the pod's "
     "processes); <proc-root>/<pid>/cgroup + CRI for the pod; pods allocated the GPU without a sample get 0",
     S::pod, R::none, 0, kPercent, false, "pod, namespace, container"},
    {pod_mem_util_ratio, "kgpu_pod_mem_util_ratio", MT::gauge, "ratio",
     "Share of the GPU's memory bandwidth the pod's processes used in the last interval (only with --kubernetes; "
     "not on MIG-enabled GPUs).",
     "nvmlDeviceGetProcessUtilization (memUtil, %), as kgpu_pod_sm_util_ratio", S::pod, R::none, 0, kPercent, false,
     "pod, namespace, container"},
    {mps_daemon_up, "kgpu_mps_daemon_up", MT::gauge, "0/1",
     "Whether the MPS control daemon of this resource runs with its limits set (1) or is down, restarting or "
     "stopped (0); its replicas are Unhealthy in the device plugin while it is 0.",
     "<mps-root>/<resource>/status.json and .started, written by kgpu mps-control-daemon", S::mps},
    {mps_daemon_restarts_total, "kgpu_mps_daemon_restarts_total", MT::counter, "restarts",
     "Times kgpu mps-control-daemon started this resource's MPS control daemon again after it died or stopped "
     "answering.",
     "<mps-root>/<resource>/status.json", S::mps},
    {mps_active_thread_percentage, "kgpu_mps_active_thread_percentage", MT::gauge, "%",
     "The default active thread percentage the MPS control daemon gives each client (100 / replicas).",
     "<mps-root>/<resource>/status.json (set_default_active_thread_percentage)", S::mps},
    {mps_pinned_memory_limit_bytes, "kgpu_mps_pinned_memory_limit_bytes", MT::gauge, "bytes",
     "The default pinned device memory limit of each MPS client on this GPU (the GPU's memory / replicas).",
     "<mps-root>/<resource>/status.json (set_default_device_pinned_mem_limit)", S::mps, R::none, 0, 1.0, false,
     "gpu, UUID"},
    {nvml_errors_total, "kgpu_nvml_errors_total", MT::counter, "errors",
     "NVML calls that failed with something other than NOT_SUPPORTED, by NVML function.",
     "every NVML read of the collector", S::exporter, R::none, 0, 1.0, false, "function"},
    {kube_api_requests_total, "kgpu_kube_api_requests_total", MT::counter, "requests",
     "Kubernetes API requests this kgpu process made, by method (WATCH for a watch) and HTTP status code "
     "(<error> when no answer came: see kgpu_kube_api_errors_total), since it started.",
     "<kube-api-status-dir>/*.json, written by kgpu device-plugin, labels and config-manager "
     "(--kube-api-status-file)",
     S::component, R::none, 0, 1.0, false, "method, code"},
    {kube_api_errors_total, "kgpu_kube_api_errors_total", MT::counter, "errors",
     "Kubernetes API requests of this kgpu process that failed, by kind: unreachable, tls, timeout, cut, malformed "
     "(not HTTP, or not the JSON expected), token (the token file unreadable), unauthorized (401), forbidden (403), "
     "not_found (404), conflict (409), invalid (422), throttled (429), client_error (other 4xx), server_error (5xx), "
     "unexpected (1xx, 3xx). The process keeps serving from its last state and logs its failures once each.",
     "<kube-api-status-dir>/*.json", S::component, R::none, 0, 1.0, false, "kind"},
    {kube_api_last_success_timestamp_seconds, "kgpu_kube_api_last_success_timestamp_seconds", MT::gauge, "s",
     "Unix time of this kgpu process's last Kubernetes API request answered with a success (absent before one).",
     "<kube-api-status-dir>/*.json", S::component},
    {node_events_total, "kgpu_node_events_total", MT::counter, "events",
     "GPU health Events (and node annotation/label patches) of this kgpu process by what became of them: created, "
     "updated (the same Event again: count+1), annotated, rate_limited (the spam filter's 25 then 1 per 5 min), "
     "queue_full, failed (the API server refused or stayed away through every retry, or the process was stopping).",
     "<kube-api-status-dir>/*.json (kgpu device-plugin --node-health-events)", S::component, R::none, 0, 1.0, false,
     "result"},
    {pod_attribution_up, "kgpu_exporter_pod_attribution_up", MT::gauge, "0/1",
     "Whether the last kubelet PodResources List succeeded (only with --kubernetes).",
     "PodResources v1 List on --pod-resources-kubelet-socket", S::exporter},
    {pods_over_limit, "kgpu_exporter_pods_over_limit", MT::gauge, "containers",
     "Containers holding this GPU that got no series of their own in the last pass because more than "
     "--max-pods-per-gpu hold it (only with --kubernetes, and absent while PodResources fails).",
     "PodResources v1 List on --pod-resources-kubelet-socket", S::kgpu_gpu},
    {http_connections, "kgpu_exporter_http_connections", MT::gauge, "connections",
     "HTTP connections open at the last collection pass.", "the HTTP server", S::exporter},
    {http_connections_closed_total, "kgpu_exporter_http_connections_closed_total", MT::counter, "connections",
     "HTTP connections the server closed before they were done, by reason: evicted (the connection limit was "
     "reached: the oldest idle or slowest one made room), peer_limit (one client address held too many), timeout "
     "(no complete request head, or response not taken, within --http-request-timeout), oversize (request head "
     "over 8 KiB, answered 431), malformed (a request head refused: 400, 505, or 431 for over 100 header fields), "
     "tls (TLS handshake failed, or plain HTTP on a TLS port).",
     "the HTTP server", S::exporter, R::none, 0, 1.0, false, "reason"},
    {collection_duration_seconds, "kgpu_collection_duration_seconds", MT::gauge, "s",
     "Time the last collection pass spent reading NVML and the kubelet.", "the collector thread", S::exporter},
    {collections_total, "kgpu_collections_total", MT::counter, "passes",
     "Collection passes since the exporter started.", "the collector thread", S::exporter},
    {last_collection_timestamp_seconds, "kgpu_last_collection_timestamp_seconds", MT::gauge, "s",
     "Unix time at which the last collection pass ended.", "the collector thread", S::exporter},
}};

constexpr bool in_order() {
    for (std::size_t i = 0; i < kCatalogue.size(); ++i)
        if (static_cast<std::size_t>(kCatalogue[i].id) != i) return false;
    return true;
}
static_assert(in_order(), "kCatalogue rows must be in Metric order");

std::string_view scope_labels(Scope s) {
    switch (s) {
        case Scope::gpu: return "DCGM labels";
        case Scope::instance: return "DCGM labels; per MIG instance on MIG GPUs";
        case Scope::kgpu_gpu: return "gpu, UUID";
        case Scope::process: return "gpu, UUID";
        case Scope::pod: return "gpu, UUID";
        case Scope::exporter: return "—";
        case Scope::mps: return "resource";
        case Scope::component: return "component";
    }
    return "";
}

std::string md_cell(std::string_view s) {
    std::string out;
    for (char c : s) {
        if (c == '|') out += "\\|";
        else if (c == '<') out += "&lt;";
        else if (c == '>') out += "&gt;";
        else out += c;
    }
    return out;
}

}  // namespace

std::string_view nvml_function(Read read) {
    switch (read) {
        case Read::none: return "";
        case Read::clock_sm:
        case Read::clock_mem: return "nvmlDeviceGetClockInfo";
        case Read::memory_temp: return "nvmlDeviceGetFieldValues";
        case Read::gpu_temp: return "nvmlDeviceGetTemperature";
        case Read::power: return "nvmlDeviceGetPowerUsage";
        case Read::energy: return "nvmlDeviceGetTotalEnergyConsumption";
        case Read::pcie_replay: return "nvmlDeviceGetPcieReplayCounter";
        case Read::utilization: return "nvmlDeviceGetUtilizationRates";
        case Read::enc_util: return "nvmlDeviceGetEncoderUtilization";
        case Read::dec_util: return "nvmlDeviceGetDecoderUtilization";
        case Read::memory_info: return "nvmlDeviceGetMemoryInfo_v2";
        case Read::ecc_sbe:
        case Read::ecc_dbe: return "nvmlDeviceGetTotalEccErrors";
        case Read::remapped_rows: return "nvmlDeviceGetRemappedRows";
        case Read::nvlink_throughput: return "nvmlDeviceGetFieldValues";
        case Read::gpm: return "nvmlGpmMetricsGet";
        case Read::count_: break;
    }
    return "";
}

std::span<const MetricDef> catalogue() { return kCatalogue; }

const MetricDef& def(Metric m) { return kCatalogue[static_cast<std::size_t>(m)]; }

const MetricDef* find_metric(std::string_view name) {
    for (const auto& m : kCatalogue)
        if (m.name == name) return &m;
    return nullptr;
}

namespace {

// One metric's row of the markdown catalogue table.
std::string catalogue_row(const MetricDef& m) {
    std::string labels{scope_labels(m.scope)};
    if (!m.labels.empty()) labels = labels == "—" ? std::string(m.labels) : fmt::format("{}, {}", labels, m.labels);
    if (m.id == xid_errors) labels += ", err_code, err_msg";
    std::string scale = m.scale == 1.0      ? "1"
                        : m.scale == 0.001  ? "0.001"
                        : m.scale == 0.01   ? "0.01"
                        : m.scale == kMiBps ? "1048576"
                                            : "1/1048576";
    if (m.whole) scale += ", rounded down";
    return fmt::format("| `{}` | {} | {} | {} | {} | {} | {} |\n", m.name, to_string(m.type), md_cell(m.unit),
                       md_cell(labels), md_cell(m.help), md_cell(m.source), scale);
}

}  // namespace

std::string metrics_markdown() {
    std::string out;
    auto w = [&](std::string_view s) { out += s; };
    w("# Metrics served by `kgpu exporter`\n\n");
    w("<!-- Generated by `kgpu exporter --print-metrics-markdown` from src/exporter/catalogue.cpp; "
      "a test keeps this page equal to it. Do not edit by hand. -->\n\n");
    w("Text exposition format 0.0.4 on `GET /metrics` (gzip when the client accepts it). A metric a GPU does\n"
      "not support is absent for that GPU, never a sentinel value; a supported counter or gauge with nothing\n"
      "to report yet is 0 (`DCGM_FI_DEV_XID_ERRORS` before any XID). A GPU that stops answering\n"
      "(`GPU_IS_LOST`) disappears from the `DCGM_FI_*` series and shows as `kgpu_gpu_health{state=\"lost\"} 1`.\n\n");
    w("## Labels\n\n");
    w("**DCGM labels**, in this order (dcgm-exporter's): `gpu` (NVML index), `UUID`, `pci_bus_id`,\n"
      "`device` (`nvidia<index>`), `modelName` (with `--replace-blanks-in-model-name`, runs of blanks become\n"
      "one `-`: `NVIDIA-H100-80GB-HBM3`); on a MIG instance's series also `GPU_I_PROFILE` and `GPU_I_ID`\n"
      "(`gpu`/`UUID` stay the parent's); then `Hostname` (`--hostname-label hostname` for the newer\n"
      "spelling, `--no-hostname` to drop it; the value is `$NODE_NAME`, else the host name), then the\n"
      "label fields, by name: `DCGM_FI_DRIVER_VERSION` alone by default, those a `--collectors` file lists\n"
      "as `label` rows with one (table below; a GPU whose NVML does not answer one has no such label).\n"
      "`DCGM_FI_DEV_XID_ERRORS` also has `err_code` (the XID number, `0` before any) and `err_msg`\n"
      "(dcgm-exporter's text for it: `No Error`, `Double Bit ECC Error`, ..., `Unknown Error` past its table).\n\n");
    w("With `--kubernetes`, the series of a GPU (or MIG instance) allocated to a pod also have `pod`,\n"
      "`namespace`, `container`; with `--kubernetes-enable-pod-uid` also `pod_uid`, and with\n"
      "`--kubernetes-enable-pod-labels` the pod's own labels (names with characters outside\n"
      "`[a-zA-Z0-9_]` turned into `_`). As in dcgm-exporter, a GPU shared by several pods (time-slicing,\n"
      "MPS) is labelled with one of them (the first by pod name), unless `--kubernetes-virtual-gpus` is set:\n"
      "then it has one series per container using it, each with `vgpu` (the replica number of the device\n"
      "ID, `GPU-...::<n>`), and "
      "`DCGM_FI_DEV_GPU_UTIL` and `DCGM_FI_DEV_FB_USED` of those per-pod series carry the pod's own share\n"
      "(SM percent and MiB of its processes, 0 for a pod with none) next to the GPU's unlabelled series.\n\n");
    w("On a MIG-enabled GPU, the memory and profiling metrics (`DCGM_FI_DEV_FB_*`, `DCGM_FI_PROF_*`) are\n"
      "reported per MIG instance only (NVML answers them per instance); the device-wide ones (clocks,\n"
      "temperatures, power, energy, ECC, XID, remapped rows, NVLink) stay on the GPU's series.\n\n");
    w("`kgpu_*` metrics use lint-clean labels only: `gpu`, `UUID`, `GPU_I_ID`, `state`, `pid`, `process`, `pod`,\n"
      "`namespace`, `container`, `function`, `reason`, `resource`, `xid_class`, `component`, `method`, `code`,\n"
      "`kind`, `result`.\n\n");
    w("## MPS\n\n");
    w("`kgpu_mps_*` show each MPS-shared resource (`sharing.mps`) as `kgpu mps-control-daemon` runs it: one\n"
      "series per resource (`resource`, e.g. `nvidia.com/gpu`), read each pass from the status files under\n"
      "`--mps-root` (default `/run/nvidia/mps`, the host directory the MPS DaemonSet and the device plugin\n"
      "share; the exporter's container mounts it read-only). A node without MPS has none of these series.\n\n");
    w("## Kubernetes API\n\n");
    w("`kgpu_kube_api_*` and `kgpu_node_events_total` count what kgpu's other processes did with the\n"
      "Kubernetes API: the device plugin (GPU health Events, the config label's watch), `kgpu labels` and\n"
      "`kgpu config-manager` each keep a JSON status file (`--kube-api-status-file`) in a directory the\n"
      "exporter reads each pass (`--kube-api-status-dir`; the DaemonSet shares an `emptyDir` at\n"
      "`/run/kgpu/status`), so they need no HTTP server of their own. One series set per process\n"
      "(`component`: `device-plugin`, `labels`, `config-manager`); the counts restart with the process. A\n"
      "file that is not such a status (not JSON, a wrong type, a repeated entry, over 64 KiB, a symlink) is\n"
      "left out, logged once naming it.\n\n");
    w("## Profiling metrics without DCGM\n\n");
    w("The `DCGM_FI_PROF_*` metrics come from NVML's GPU performance monitoring (GPM) on GPUs that support it\n"
      "(Hopper and newer; `nvmlGpmQueryDeviceSupport`), not from DCGM's host engine: each collection pass takes\n"
      "one GPM sample per GPU (per MIG instance on a MIG-enabled GPU, `nvmlGpmMigSampleGet`) and serves the\n"
      "metrics between it and the previous pass's sample, so they appear from the second pass on. NVML's\n"
      "percentages become DCGM's ratios (0-1) and its MiB/s become bytes/s. A GPU without GPM has none of\n"
      "these series.\n\n");
    w("## Choosing what is served (`--collectors`)\n\n");
    w("`-f`/`--collectors FILE` (env `DCGM_EXPORTER_COLLECTORS`) takes dcgm-exporter's counters CSV: one\n"
      "`field, type, help` line per metric (`#` starts a comment line; quoted fields as in CSV). Only the\n"
      "`DCGM_FI_*` fields it lists are served, with its type and help text; its `label` rows choose the label\n"
      "fields. Fields kgpu does not serve are named in one warning at start; a malformed line\n"
      "(not three fields, an unknown type) stops the exporter with `file:line`. Without the flag every metric\n"
      "below is served. `kgpu_*` metrics are always served. `-f /etc/dcgm-exporter/default-counters.csv`\n"
      "(dcgm-exporter's default, a file of its image) where that file does not exist serves kgpu's copy of\n"
      "dcgm-exporter's default counters (`kgpu exporter --print-default-counters` prints it) with one warning.\n\n");
    w("Label fields (`FIELD, label, help` rows): each becomes a label named after the field on every\n"
      "`DCGM_FI_*` series of the GPU and of its MIG instances, with the GPU's value, as dcgm-exporter adds them.\n\n");
    w("| label | NVML source |\n|---|---|\n");
    for (const auto& f : label_fields()) out += fmt::format("| `{}` | {} |\n", f.name, md_cell(f.source));
    w("\n");
    w("## Catalogue\n\n");
    w("| metric | type | unit | labels | help | source | scale |\n|---|---|---|---|---|---|---|\n");
    for (const auto& m : kCatalogue) out += catalogue_row(m);
    return out;
}

}  // namespace kgpu::exporter
