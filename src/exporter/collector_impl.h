// Collector::Impl (collector.h), shared by the files that define it (internal to src/exporter):
// collector.cpp (construction, discovery, the pass, pods, attribution, the threads and events),
// collector_read.cpp (the NVML reads of a pass) and collector_render.cpp (the exposition).
#pragma once

#include <array>
#include <atomic>
#include <bitset>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <re2/re2.h>

#include "exporter/collector.h"
#include "common/log.h"
#include "common/log_once.h"
#include "exporter/catalogue.h"
#include "exporter/exposition.h"
#include "exporter/kube_status.h"
#include "inventory/discovery.h"
#include "mps/supervisor.h"
#include "nvml/brand.h"
#include "nvml/events.h"
#include "nvml/gpm.h"

namespace kgpu::exporter {

using Clock = std::chrono::steady_clock;
using Values = std::array<std::optional<double>, kMetricCount>;
using ReadSet = std::bitset<kReadCount>;

// NVML wants GPM samples at least this far apart (nvmlGpmMetricsGet's note).
inline constexpr auto kGpmMinGap = std::chrono::milliseconds(100);

// A device (GPU, or MIG instance by GPU instance id) as pods and processes name it.
using DeviceKey = std::pair<unsigned, std::optional<unsigned>>;

// A container using a device, with the replica of its device ID (the `vgpu` label).
struct PodSlot {
    PodRef pod;
    std::string vgpu;
};

// Previous-sample state of one GPM-sampled device.
struct GpmState {
    std::optional<nvml::GpmSample> prev, spare;
    Clock::time_point prev_at{};
    std::vector<std::optional<double>> last;  // the metrics of the last computation, per gpm row
};

bool stateful(Read r);
// The plain Reads each kind of device is asked for, in catalogue order, for the served metrics.
std::vector<Read> reads_for(const CounterSelection& sel, bool gpu_scope, bool instance_scope);
// One NVML call: up to three raw values (see Read's parts).
Result<std::array<double, 3>> read_source(Read read, const nvml::Device& d);
// dcgm-exporter's getGPUModel with --replace-blanks-in-model-name: runs of blanks become one "-".
std::string model_name(std::string_view name, bool replace_blanks);
// dcgm-exporter's SanitizeLabelName: every character outside [a-zA-Z0-9_] becomes "_".
std::string sanitize_label_name(std::string_view name);
std::string xid_key(const inventory::Gpu& g);

struct Collector::Impl {
    struct Mig {
        inventory::MigDevice info;
        std::optional<nvml::Device> device;
        LabelSet labels;  // DCGM labels with GPU_I_PROFILE / GPU_I_ID
        GpmState gpm;
    };
    struct Gpu {
        inventory::Gpu info;
        std::optional<nvml::Device> device;
        std::vector<Mig> migs;
        bool mig_enabled = false;
        LabelSet dcgm;  // DCGM labels of the GPU's own series
        LabelSet kgpu;  // gpu, UUID
        ReadSet unsupported, mig_unsupported;
        bool processes_unsupported = false;
        bool lost = false;
        // Stateful reads.
        bool gpm_supported = false;
        GpmState gpm;
        std::optional<nvml::NvLinkThroughput> nvlink_prev;
        Clock::time_point nvlink_prev_at{};
        bool utilization_unsupported = false;
        std::uint64_t utilization_seen_us = 0;  // newest process utilisation sample so far
    };
    struct Xid {
        unsigned last = 0;
        std::uint64_t count = 0;
        std::array<std::uint64_t, std::size(kXidClasses)> by_class{};  // counts per xid_class()
    };
    struct Process {
        unsigned gpu = 0;
        std::optional<unsigned> gi_id;
        unsigned pid = 0;
        std::uint64_t bytes = 0;
    };
    // A process's share of a GPU since the last pass (mean of the samples NVML returned).
    struct ProcessShare {
        unsigned gpu = 0;
        unsigned pid = 0;
        double sm = 0, memory = 0;  // percent
    };

    Impl(nvml::Session s, const CollectorOptions& o);

    nvml::Session session;
    CollectorOptions options;
    std::unique_ptr<PodResourcesClient> podres;
    std::unique_ptr<ProcessAttributor> processes;
    std::unique_ptr<PodDirectory> pod_directory;
    std::vector<Read> gpu_reads, parent_reads, instance_reads;
    std::vector<const MetricDef*> gpm_rows;
    std::vector<nvml::GpmMetric> gpm_ids;
    bool want_nvlink = false;
    std::vector<std::unique_ptr<RE2>> label_allowlist;  // compiled pod_label_allowlist; empty: all
    bool want_shares = false;  // per-process utilisation (kgpu_pod_*, or per-pod GPU_UTIL)

    // Collector-thread state.
    inventory::Node node;
    std::vector<Gpu> gpus;
    bool discovered = false;
    std::map<std::string, std::uint64_t, std::less<>> nvml_errors;  // function -> count
    std::uint64_t passes = 0;
    std::string discovery_error;
    std::unordered_map<unsigned, std::string> process_names;

    // Shared with the event thread.
    std::atomic<bool> rediscover{true};
    std::atomic<unsigned> generation{0};
    std::mutex event_mu;
    std::vector<std::pair<std::string, nvml::Device>> event_devices;  // xid key, device; by key index
    std::map<std::string, Xid> xids;                                  // guarded by event_mu

    // Publishing.
    mutable std::mutex snap_mu;
    std::shared_ptr<const Snapshot> snap;
    std::function<HttpServerStats()> http_stats;  // set before the thread starts
    log::Once status_problems;                    // kube API status files' problems, logged once
    log::Once mps_problems;                       // MPS status files' problems, logged once
    std::string attribution_problem;  // guarded by snap_mu; "" while pod attribution works
    void set_attribution_problem(std::string p) {
        std::lock_guard lk(snap_mu);
        attribution_problem = std::move(p);
    }
    std::atomic<std::int64_t> last_end_ns{0};
    std::atomic<bool> running{false};

    // Threads.
    std::mutex stop_mu;
    std::condition_variable stop_cv;
    bool stopping = false;
    std::thread collector_thread, event_thread;

    // Counts a failed NVML call; false for a refusal that is none (a MIG handle from before a MIG
    // change: no NVML call failed, the next pass looks the devices up again).
    bool count_error(std::string_view function, const Error& e);

    LabelSet base_labels(const inventory::Gpu& g) const;
    // Hostname, then the label fields the counters ask for (counters.h), read once per discovery
    // from `dev` (the GPU; null when it has no handle). A value NVML does not give leaves its label out.
    LabelSet tail_labels(const nvml::Device* dev);
    std::optional<std::string> label_value(LabelField f, const nvml::Device* dev);

    void discover();

    // Reads `reads` from one device into `values`. Returns false when the GPU is lost.
    bool read_device(const nvml::Device& dev, const std::vector<Read>& reads, ReadSet& unsupported, Values& values,
                     bool& had_error);

    // One GPM sample of a device into `st`; the metrics since the previous one into `values`.
    // `take` fills a buffer (nvmlGpmSampleGet or nvmlGpmMigSampleGet). Returns false when the GPU
    // is lost.
    bool read_gpm(GpmState& st, std::string_view function, const std::function<Status(nvml::GpmSample&)>& take,
                  Values& values, bool& supported, bool& had_error);

    // DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL as DCGM computes it: (KiB now - KiB at the last pass) /
    // seconds / 1000, an integer; 0 on the first pass and when the counters read 0.
    bool read_nvlink(Gpu& g, Values& values, bool& had_error);

    void read_processes(const Gpu& g, const nvml::Device& dev, std::optional<unsigned> gi_id,
                        std::vector<Process>& out, bool& unsupported, bool& had_error);

    // Each process's mean share of the GPU over the samples NVML took since the last pass.
    void read_shares(Gpu& g, std::vector<ProcessShare>& out, bool& had_error);

    // pod, namespace, container (+ pod_uid, vgpu, the pod's labels) for one container's series.
    LabelSet pod_label_set(const PodSlot& slot, const std::map<std::pair<std::string, std::string>,
                           PodMetadata>& meta, std::string_view taken) const;

    // What one collection pass gathered, handed from each stage to the next.
    using PodKey = std::tuple<unsigned, std::optional<unsigned>, std::string, std::string>;  // dev, gi, ns, pod
    struct Pass {
        Clock::time_point t0, t1;  // start; end of the reads (the render is not collection time)
        // Pods by device: what labels the DCGM series, and every container using it.
        std::map<DeviceKey, std::vector<PodSlot>> pods, all_pods;
        std::optional<bool> podres_up;                    // set when pod attribution is on
        std::map<unsigned, std::size_t> pods_over_limit;  // GPU index -> containers left out
        // NVML, per GPU (and its MIG devices).
        std::vector<Values> gpu_values;
        std::vector<std::vector<Values>> mig_values;
        std::vector<std::string> state;  // ok, error or lost
        std::vector<Process> procs;
        std::vector<ProcessShare> shares;
        // Processes' names and pods, the labelling pods' metadata, per-pod shares.
        std::unordered_map<unsigned, std::string> names;
        std::unordered_map<unsigned, PodRef> proc_pods;
        std::map<std::pair<std::string, std::string>, PodMetadata> meta;
        std::map<PodKey, double> pod_sm, pod_fb;
        std::map<std::string, Xid> xids;
    };

    void collect();

    // Discovery when asked for, and again when a lost GPU answers: it was reset, and its MIG
    // layout or even its handle may have changed.
    void refresh_node();

    // Pods by device: every container using it (sorted), or only the first one unless
    // --kubernetes-virtual-gpus, as dcgm-exporter labels a shared GPU with one pod.
    void pods_by_device(Pass& p);

    // Every GPU's NVML reads: values, MIG devices, GPM, NVLink, processes, shares. A GPU that
    // stops answering is marked lost and its processes dropped.
    void read_gpus(Pass& p);

    // One answering GPU's reads; false when it stopped answering.
    bool read_gpu(Gpu& g, Values& values, std::vector<Values>& mig_values, Pass& p, bool& had_error);

    // Process names, the pods of processes, the labelling pods' UIDs and labels, and per-pod
    // shares (--kubernetes-virtual-gpus: GPU_UTIL from the processes' SM percent, FB_USED from
    // their memory in MiB, each process rounded down, as dcgm-exporter sums them).
    void attribute(Pass& p);

    // The exposition being written: one family per catalogue metric, series of the enabled ones.
    struct Out {
        const CounterSelection& sel;
        Exposition ex;
        std::array<std::size_t, kMetricCount> fam{};

        explicit Out(const CounterSelection& s) : sel(s) {
            for (const auto& m : catalogue())
                fam[static_cast<std::size_t>(m.id)] = ex.family(m.name, sel.help_of(m), sel.type_of(m));
        }
        void add(Metric m, const LabelSet& l, double v) {
            if (sel.enabled(m)) ex.add(fam[static_cast<std::size_t>(m)], l, v);
        }
    };

    const Gpu* gpu_at(unsigned index) const;

    std::string render(Pass& p);

    // The DCGM series of every GPU and MIG device: the device's own, or one per pod using it.
    void render_devices(Out& out, Pass& p);

    // kgpu_gpu_health and the XID counters of every GPU.
    void render_gpu_state(Out& out, const Pass& p);

    // kgpu_process_fb_used_bytes, and kgpu_pod_*: every container allocated a (non-MIG) GPU,
    // and every container whose processes ran on it, with the sum of its processes' shares.
    void render_processes(Out& out, Pass& p);

    // kgpu_mps_*: the MPS daemons' status files under --mps-root.
    void render_mps(Out& out);

    // kgpu_kube_api_*, kgpu_node_events_total: the status files under --kube-api-status-dir.
    void render_kube_api(Out& out);

    // The exporter's own series: pod attribution, HTTP connections, the collection itself.
    void render_self(Out& out, const Pass& p);

    void collector_loop();

    bool should_stop();

    // An event set with every GPU registered for XIDs and MIG changes, or nullopt when NVML
    // cannot make one (`failures` counts those; the first is logged). `keys` gets the xid key of
    // each registration, by the key index the events carry.
    std::optional<nvml::EventSet> build_event_set(std::vector<std::string>& keys, int& failures);

    // `set` and `keys`: what start() registered, for generation `built`.
    void event_loop(std::optional<nvml::EventSet> set, std::vector<std::string> keys, unsigned built, int failures);
};
}  // namespace kgpu::exporter
