// The collector: samples NVML (and, with --kubernetes, the kubelet and the container runtime) at
// the interval on its own thread into an immutable Snapshot whose exposition text is rendered
// once; /metrics hands out the latest Snapshot and never waits on NVML (issue #5, DESIGN.md
// "Health events and telemetry sampling each run on their own thread and publish immutable
// snapshots"). XID events are counted by a second thread blocked in nvmlEventSetWait.
//
// Failure policy: an NVML error on one GPU drops only that GPU's failing values for this pass
// (counted in kgpu_nvml_errors_total{function}); NOT_SUPPORTED values are simply absent and not
// asked again until the GPUs are re-discovered; a GPU answering GPU_IS_LOST loses its DCGM series
// and shows as kgpu_gpu_health{state="lost"} until it answers again (then the node is re-read).
// A failing PodResources or CRI socket is logged once per distinct error (by the clients of
// attribution.h); series lose their pod labels and kgpu_exporter_pod_attribution_up goes to 0.
//
// Stateful reads keep the previous pass's answer: GPM samples (profiling metrics are computed
// between the previous pass's sample and this one, so they appear from the second pass on, and
// only when the samples are at least 100 ms apart, as NVML requires), NVLink byte counters (a
// rate, as DCGM serves DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL) and per-process utilisation (samples
// newer than the last pass's).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "exporter/attribution.h"
#include "exporter/counters.h"
#include "exporter/http.h"
#include "nvml/device.h"
#include "mps/mps.h"

namespace kgpu::exporter {

struct CollectorOptions {
    std::chrono::milliseconds interval{30000};
    // The Hostname label's value; nullopt leaves the label out (--no-hostname).
    std::optional<std::string> hostname;
    std::string hostname_label = "Hostname";  // or "hostname" (newer dcgm-exporter)
    bool kubernetes = false;                  // pod attribution (PodResources + CRI)
    PodResourcesOptions pod_resources;
    std::string proc_root = "/proc";
    std::string cri_endpoint = "unix:///run/containerd/containerd.sock";
    // What is served, with which type and help (--collectors); everything by default.
    CounterSelection counters = all_counters();
    // dcgm-exporter's --replace-blanks-in-model-name: "NVIDIA H100 80GB HBM3" -> "NVIDIA-H100-80GB-HBM3".
    bool replace_blanks_in_model_name = false;
    // dcgm-exporter's --kubernetes-virtual-gpus: a shared GPU gets one series per container using
    // it (with `vgpu`), and per-pod DCGM_FI_DEV_GPU_UTIL / DCGM_FI_DEV_FB_USED from its processes.
    // Off: one pod labels each GPU, as dcgm-exporter does.
    bool kubernetes_virtual_gpus = false;
    bool kubernetes_pod_uid = false;     // `pod_uid` label (from the CRI runtime's pod sandboxes)
    bool kubernetes_pod_labels = false;  // the pod's labels (idem)
    // dcgm-exporter's --kubernetes-pod-label-allowlist-regex: with kubernetes_pod_labels, only the
    // pod labels whose name (as Kubernetes spells it, before sanitising) one of these RE2 patterns
    // finds, unanchored, as Go's regexp.MatchString does. Empty: every label. A pattern RE2 cannot
    // compile is logged and skipped; when none compiles, every label is kept (dcgm-exporter's rule).
    std::vector<std::string> pod_label_allowlist;
    // dcgm-exporter's -d g:0,1: serve only these GPU indices (nullopt: every GPU). An index the
    // node does not have is logged at each discovery.
    std::optional<std::vector<unsigned>> gpu_indices;
    // dcgm-exporter's --use-old-namespace names the GPU's UUID label `uuid` instead of `UUID`.
    std::string uuid_label = "UUID";
    // kgpu_mps_*: the MPS daemons' status files under this directory (--mps-root); empty: none.
    std::string mps_root = std::string(mps::kDefaultRoot);
    // kgpu_kube_api_*, kgpu_node_events_total: the status files of kgpu's processes that use the
    // Kubernetes API (--kube-api-status-dir, kube_status.h); empty: none.
    std::string kube_api_status_dir;
};

// One pass's result. Immutable once published; shared by every request that serves it.
class Snapshot {
public:
    Snapshot(std::string text, std::chrono::steady_clock::time_point finished);
    const std::shared_ptr<const std::string>& text() const { return text_; }
    // The text gzip-compressed, made by the first caller that asks (then shared).
    std::shared_ptr<const std::string> gzip() const;
    std::chrono::steady_clock::time_point finished() const { return finished_; }

private:
    std::shared_ptr<const std::string> text_;
    std::chrono::steady_clock::time_point finished_;
    mutable std::once_flag gzip_once_;
    mutable std::shared_ptr<const std::string> gzip_;
};

// gzip (RFC 1952) of `data`, at a fast level. Empty on a zlib failure (never expected).
std::string gzip_compress(std::string_view data);

class Collector {
public:
    Collector(nvml::Session session, CollectorOptions options);
    ~Collector();
    Collector(const Collector&) = delete;
    Collector& operator=(const Collector&) = delete;

    // One pass on the caller's thread: the first one runs before the HTTP server starts, tests
    // and benchmarks call it directly. Not to be called concurrently with the thread.
    void collect();
    // Starts the collector thread (a pass every interval, the first one interval after the call)
    // and the XID event thread. The GPUs are registered for XID events before it returns, so an
    // XID raised after the call is counted (NVML does not deliver earlier ones to a new set).
    void start();
    void stop();

    // The latest snapshot; null before the first pass.
    std::shared_ptr<const Snapshot> snapshot() const;
    // Where kgpu_exporter_http_* come from; without it they are not served. Set before start().
    void set_http_stats(std::function<HttpServerStats()> stats);
    // With --kubernetes, why the last pass had no pod labels ("" when they worked or attribution
    // is off): "<kind>: <message>", kind as PodResourcesClient::failure() says (hung, garbage,
    // over-size, ...). The same pass set kgpu_exporter_pod_attribution_up to 0.
    std::string attribution_problem() const;
    // For /health: ok while the collector thread runs and its last pass ended within three
    // intervals; otherwise the reason. `now` is steady_clock time.
    Status health(std::chrono::steady_clock::time_point now) const;
    const CollectorOptions& options() const { return options_; }

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    CollectorOptions options_;
};

}  // namespace kgpu::exporter
