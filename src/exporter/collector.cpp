#include "exporter/collector.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <bitset>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include <re2/re2.h>

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

// ---- Snapshot -----------------------------------------------------------------------------------

Snapshot::Snapshot(std::string text, std::chrono::steady_clock::time_point finished)
    : text_(std::make_shared<const std::string>(std::move(text))), finished_(finished) {}

std::shared_ptr<const std::string> Snapshot::gzip() const {
    std::call_once(gzip_once_, [&] { gzip_ = std::make_shared<const std::string>(gzip_compress(*text_)); });
    return gzip_;
}

std::string gzip_compress(std::string_view data) {
    z_stream zs{};
    // windowBits 15 + 16: a gzip header and trailer instead of zlib's. Level 1: the text is very
    // repetitive, so the fastest level already shrinks it ~15x.
    if (deflateInit2(&zs, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return {};
    std::string out(deflateBound(&zs, data.size()), '\0');
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
    zs.avail_in = static_cast<uInt>(data.size());
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = static_cast<uInt>(out.size());
    const int r = deflate(&zs, Z_FINISH);
    const auto written = zs.total_out;
    deflateEnd(&zs);
    if (r != Z_STREAM_END) return {};
    out.resize(written);
    return out;
}

// ---- Collector ----------------------------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;
using Values = std::array<std::optional<double>, kMetricCount>;
using ReadSet = std::bitset<kReadCount>;

// NVML wants GPM samples at least this far apart (nvmlGpmMetricsGet's note).
constexpr auto kGpmMinGap = std::chrono::milliseconds(100);

bool stateful(Read r) { return r == Read::nvlink_throughput || r == Read::gpm; }

// The plain Reads each kind of device is asked for, in catalogue order, for the served metrics.
std::vector<Read> reads_for(const CounterSelection& sel, bool gpu_scope, bool instance_scope) {
    std::vector<Read> out;
    for (const auto& m : catalogue()) {
        if (m.read == Read::none || stateful(m.read) || !sel.enabled(m.id)) continue;
        const bool want = (m.scope == Scope::gpu && gpu_scope) || (m.scope == Scope::instance && instance_scope);
        if (want && std::find(out.begin(), out.end(), m.read) == out.end()) out.push_back(m.read);
    }
    return out;
}

// One NVML call: up to three raw values (see Read's parts).
Result<std::array<double, 3>> read_source(Read read, const nvml::Device& d) {
    auto one = [](auto r) -> Result<std::array<double, 3>> {
        if (!r) return std::unexpected(r.error());
        return std::array<double, 3>{static_cast<double>(*r), 0, 0};
    };
    switch (read) {
        case Read::clock_sm: return one(d.sm_clock_mhz());
        case Read::clock_mem: return one(d.memory_clock_mhz());
        case Read::memory_temp: return one(d.memory_temperature_c());
        case Read::gpu_temp: return one(d.temperature_c());
        case Read::power: return one(d.power_usage_mw());
        case Read::energy: return one(d.total_energy_mj());
        case Read::pcie_replay: return one(d.pcie_replay_counter());
        case Read::enc_util: return one(d.encoder_utilization());
        case Read::dec_util: return one(d.decoder_utilization());
        case Read::ecc_sbe: return one(d.ecc_volatile_total(true));
        case Read::ecc_dbe: return one(d.ecc_volatile_total(false));
        case Read::utilization: {
            auto u = d.utilization();
            if (!u) return std::unexpected(u.error());
            return std::array<double, 3>{double(u->gpu), double(u->memory), 0};
        }
        case Read::memory_info: {
            auto m = d.memory();
            if (!m) return std::unexpected(m.error());
            return std::array<double, 3>{double(m->free), double(m->used), double(m->reserved)};
        }
        case Read::remapped_rows: {
            auto r = d.remapped_rows();
            if (!r) return std::unexpected(r.error());
            return std::array<double, 3>{double(r->correctable), double(r->uncorrectable), r->failure ? 1.0 : 0.0};
        }
        case Read::none:
        case Read::nvlink_throughput:
        case Read::gpm:
        case Read::count_: break;
    }
    return fail(Code::internal, "no NVML read for this metric");
}

// dcgm-exporter's getGPUModel with --replace-blanks-in-model-name: runs of blanks become one "-".
std::string model_name(std::string_view name, bool replace_blanks) {
    if (!replace_blanks) return std::string(name);
    std::string out;
    bool blank = false;
    for (char c : name) {
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
            blank = true;
            continue;
        }
        if (blank && !out.empty()) out += '-';
        blank = false;
        out += c;
    }
    return out;
}

// dcgm-exporter's SanitizeLabelName: every character outside [a-zA-Z0-9_] becomes "_".
std::string sanitize_label_name(std::string_view name) {
    std::string out(name);
    for (char& c : out)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) c = '_';
    return out;
}

std::string xid_key(const inventory::Gpu& g) { return g.uuid.empty() ? fmt::format("index:{}", g.index) : g.uuid; }

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

}  // namespace

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

    Impl(nvml::Session s, const CollectorOptions& o) : session(std::move(s)), options(o) {
        const CounterSelection& sel = options.counters;
        if (options.kubernetes) {
            PodResourcesOptions pr = options.pod_resources;
            podres = std::make_unique<PodResourcesClient>(std::move(pr));
            processes = std::make_unique<ProcessAttributor>(options.proc_root, options.cri_endpoint);
            if (options.kubernetes_pod_uid || options.kubernetes_pod_labels)
                pod_directory = std::make_unique<PodDirectory>(options.cri_endpoint);
            want_shares = sel.enabled(Metric::pod_sm_util_ratio) || sel.enabled(Metric::pod_mem_util_ratio) ||
                          (options.kubernetes_virtual_gpus && sel.enabled(Metric::gpu_util));
        }
        gpu_reads = reads_for(sel, true, true);
        parent_reads = reads_for(sel, true, false);
        instance_reads = reads_for(sel, false, true);
        for (const auto& m : catalogue())
            if (m.read == Read::gpm && sel.enabled(m.id)) gpm_rows.push_back(&m);
        for (const auto* m : gpm_rows) gpm_ids.push_back(static_cast<nvml::GpmMetric>(m->part));
        want_nvlink = sel.enabled(Metric::nvlink_bandwidth_total);
        for (const auto& p : options.pod_label_allowlist) {
            auto re = std::make_unique<RE2>(p, RE2::Quiet);
            if (!re->ok()) {
                log::warn("exporter: --kubernetes-pod-label-allowlist-regex: skipping '{}': {}", p, re->error());
                continue;
            }
            label_allowlist.push_back(std::move(re));
        }
        if (!options.pod_label_allowlist.empty() && label_allowlist.empty())
            log::warn("exporter: --kubernetes-pod-label-allowlist-regex: no pattern compiles; every pod label is kept");
    }

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
    bool count_error(std::string_view function, const Error& e) {
        if (e.code == Code::stale) {
            rediscover = true;
            return false;
        }
        auto it = nvml_errors.find(function);
        if (it == nvml_errors.end()) {
            log::warn("exporter: {}", e.message);  // the first failure of each function
            it = nvml_errors.emplace(std::string(function), 0).first;
        }
        ++it->second;
        return true;
    }

    LabelSet base_labels(const inventory::Gpu& g) const {
        LabelSet l;
        l.add("gpu", fmt::format("{}", g.index))
            .add(options.uuid_label, g.uuid)
            .add("pci_bus_id", g.pci_bus_id)
            .add("device", fmt::format("nvidia{}", g.index))
            .add("modelName", model_name(g.name, options.replace_blanks_in_model_name));
        return l;
    }
    // Hostname, then the label fields the counters ask for (counters.h), read once per discovery
    // from `dev` (the GPU; null when it has no handle). A value NVML does not give leaves its label out.
    LabelSet tail_labels(const nvml::Device* dev) {
        LabelSet l;
        if (options.hostname) l.add(options.hostname_label, *options.hostname);
        for (const auto& f : label_fields()) {
            if (!options.counters.label(f.id)) continue;
            if (auto v = label_value(f.id, dev)) l.add(f.name, *v);
        }
        return l;
    }
    std::optional<std::string> label_value(LabelField f, const nvml::Device* dev) {
        using nvml::Device;
        auto take = [&](Result<std::string> r, std::string_view function) -> std::optional<std::string> {
            if (r) return std::move(*r);
            if (r.error().code != Code::not_supported && r.error().code != Code::gpu_lost) count_error(function, r.error());
            return std::nullopt;
        };
        switch (f) {
        case LabelField::driver_version: return node.driver_version;
        case LabelField::nvml_version: return take(session.nvml_version(), "nvmlSystemGetNVMLVersion");
        case LabelField::count_: break;
        default: break;
        }
        if (!dev) return std::nullopt;
        switch (f) {
        case LabelField::brand: {
            auto b = dev->brand();
            if (!b) return take(std::unexpected(b.error()), "nvmlDeviceGetBrand");
            return std::string(nvml::brand_name(*b).dcgm);
        }
        case LabelField::serial: return take(dev->serial(), "nvmlDeviceGetSerial");
        case LabelField::vbios: return take(dev->vbios_version(), "nvmlDeviceGetVbiosVersion");
        case LabelField::inforom_image: return take(dev->inforom_image_version(), "nvmlDeviceGetInforomImageVersion");
        case LabelField::oem_inforom:
            return take(dev->inforom_version(Device::Inforom::oem), "nvmlDeviceGetInforomVersion");
        case LabelField::ecc_inforom:
            return take(dev->inforom_version(Device::Inforom::ecc), "nvmlDeviceGetInforomVersion");
        case LabelField::power_inforom:
            return take(dev->inforom_version(Device::Inforom::power), "nvmlDeviceGetInforomVersion");
        default: return std::nullopt;
        }
    }

    void discover() {
        inventory::DiscoveryOptions dopts;
        dopts.topology = false;
        // Cleared before reading: a MIG change seen while discovery runs asks for another pass
        // (the handles taken meanwhile may already be refused: nvml::Device::live).
        rediscover = false;
        auto n = inventory::discover(session, dopts);
        if (!n) {
            rediscover = true;
            if (discovery_error != n.error().message)
                log::warn("exporter: reading the node's GPUs: {}", n.error().message);
            discovery_error = n.error().message;
            count_error("nvmlDeviceGetCount", n.error());
            return;  // keep what we had; try again next pass
        }
        discovery_error.clear();
        node = std::move(*n);
        if (options.gpu_indices) {
            for (unsigned want : *options.gpu_indices)
                if (std::ranges::find(node.gpus, want, &inventory::Gpu::index) == node.gpus.end())
                    log::warn("exporter: --devices: this node has no GPU {} ({} GPU(s))", want, node.gpus.size());
        }
        std::vector<Gpu> fresh;
        for (const auto& info : node.gpus) {
            if (options.gpu_indices && std::ranges::find(*options.gpu_indices, info.index) == options.gpu_indices->end())
                continue;
            Gpu g;
            g.info = info;
            g.lost = info.lost;
            if (auto d = session.device_by_index(info.index)) g.device = std::move(*d);
            const LabelSet tail = tail_labels(g.device && !g.lost ? &*g.device : nullptr);
            g.mig_enabled = info.mig_mode == inventory::MigMode::enabled;
            LabelSet base = base_labels(info);
            g.dcgm = base;
            g.dcgm.append(tail);
            g.kgpu.add("gpu", fmt::format("{}", info.index)).add("UUID", info.uuid);
            for (const auto& m : info.mig_devices) {
                Mig mig;
                mig.info = m;
                if (g.device)
                    if (auto d = g.device->mig_device(m.index); d && d->has_value()) mig.device = std::move(**d);
                mig.labels = base;
                mig.labels.add("GPU_I_PROFILE", m.profile).add("GPU_I_ID", fmt::format("{}", m.gpu_instance_id));
                mig.labels.append(tail);
                g.migs.push_back(std::move(mig));
            }
            // GPM: asked once per discovery. A GPU without it (or a driver without the entry
            // points) simply has no profiling series.
            if (!gpm_ids.empty() && g.device && !g.lost) {
                auto s = g.device->gpm_supported();
                if (s) g.gpm_supported = *s;
                else if (s.error().code != Code::not_supported && s.error().code != Code::gpu_lost)
                    count_error("nvmlGpmQueryDeviceSupport", s.error());
            }
            fresh.push_back(std::move(g));
        }
        gpus = std::move(fresh);
        discovered = true;
        {
            std::lock_guard lk(event_mu);
            event_devices.clear();
            for (const auto& g : gpus)
                if (g.device) event_devices.emplace_back(xid_key(g.info), *g.device);
        }
        ++generation;
        const auto with_gpm = std::ranges::count_if(gpus, [](const Gpu& g) { return g.gpm_supported; });
        log::info("exporter: {} GPU(s), driver {}{}", gpus.size(), node.driver_version,
                  gpm_ids.empty() ? std::string()
                                  : fmt::format(", {} with profiling metrics (GPM)", with_gpm));
    }

    // Reads `reads` from one device into `values`. Returns false when the GPU is lost.
    bool read_device(const nvml::Device& dev, const std::vector<Read>& reads, ReadSet& unsupported, Values& values,
                     bool& had_error) {
        for (Read r : reads) {
            if (unsupported.test(static_cast<std::size_t>(r))) continue;
            auto v = read_source(r, dev);
            if (!v) {
                if (v.error().code == Code::not_supported) {
                    unsupported.set(static_cast<std::size_t>(r));
                    continue;
                }
                if (v.error().code == Code::gpu_lost) return false;
                if (count_error(nvml_function(r), v.error())) had_error = true;
                continue;
            }
            for (const auto& m : catalogue()) {
                if (m.read != r) continue;
                double x = (*v)[m.part] * m.scale;
                if (m.whole) x = std::floor(x);
                values[static_cast<std::size_t>(m.id)] = x;
            }
        }
        return true;
    }

    // One GPM sample of a device into `st`; the metrics since the previous one into `values`.
    // `take` fills a buffer (nvmlGpmSampleGet or nvmlGpmMigSampleGet). Returns false when the GPU
    // is lost.
    bool read_gpm(GpmState& st, std::string_view function, const std::function<Status(nvml::GpmSample&)>& take,
                  Values& values, bool& supported, bool& had_error) {
        const auto now = Clock::now();
        if (st.prev && now - st.prev_at < kGpmMinGap) {
            // Too soon for a new rate (passes under 100 ms apart): keep the baseline and serve the
            // last rate again, so the series do not flap.
            for (std::size_t i = 0; i < st.last.size() && i < gpm_rows.size(); ++i)
                if (st.last[i]) values[static_cast<std::size_t>(gpm_rows[i]->id)] = *st.last[i];
            return true;
        }
        if (!st.spare) {
            auto s = nvml::GpmSample::alloc(session);
            if (!s) {
                if (s.error().code == Code::not_supported) supported = false;  // a driver without GPM buffers
                else {
                    if (count_error("nvmlGpmSampleAlloc", s.error())) had_error = true;
                }
                return true;
            }
            st.spare.emplace(std::move(*s));
        }
        if (auto r = take(*st.spare); !r) {
            if (r.error().code == Code::gpu_lost) return false;
            if (r.error().code == Code::not_supported) supported = false;
            else {
                if (count_error(function, r.error())) had_error = true;
            }
            return true;
        }
        if (st.prev) {
            auto m = nvml::GpmSample::metrics(*st.prev, *st.spare, gpm_ids);
            if (!m) {
                if (count_error(nvml::kGpmMetricsGet, m.error())) had_error = true;
            } else {
                st.last.assign(gpm_rows.size(), std::nullopt);
                for (std::size_t i = 0; i < gpm_rows.size(); ++i)
                    if ((*m)[i] && std::isfinite(*(*m)[i])) {
                        st.last[i] = *(*m)[i] * gpm_rows[i]->scale;
                        values[static_cast<std::size_t>(gpm_rows[i]->id)] = *st.last[i];
                    }
            }
        }
        std::swap(st.prev, st.spare);  // this sample is the next baseline; the old one is reused
        st.prev_at = now;
        return true;
    }

    // DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL as DCGM computes it: (KiB now - KiB at the last pass) /
    // seconds / 1000, an integer; 0 on the first pass and when the counters read 0.
    bool read_nvlink(Gpu& g, Values& values, bool& had_error) {
        if (g.unsupported.test(static_cast<std::size_t>(Read::nvlink_throughput))) return true;
        auto t = g.device->nvlink_throughput();
        const auto now = Clock::now();
        if (!t) {
            if (t.error().code == Code::gpu_lost) return false;
            if (t.error().code == Code::not_supported) g.unsupported.set(static_cast<std::size_t>(Read::nvlink_throughput));
            else {
                if (count_error(nvml_function(Read::nvlink_throughput), t.error())) had_error = true;
            }
            return true;
        }
        double value = 0;
        const std::uint64_t sum = t->tx_kib + t->rx_kib;
        if (g.nvlink_prev && sum != 0) {
            const std::uint64_t prev = g.nvlink_prev->tx_kib + g.nvlink_prev->rx_kib;
            const double secs = t->timestamp_us > 0 && g.nvlink_prev->timestamp_us > 0
                                    ? static_cast<double>(t->timestamp_us - g.nvlink_prev->timestamp_us) / 1e6
                                    : std::chrono::duration<double>(now - g.nvlink_prev_at).count();
            if (secs > 0 && sum >= prev) value = std::trunc(static_cast<double>(sum - prev) / secs / 1000.0);
        }
        values[static_cast<std::size_t>(Metric::nvlink_bandwidth_total)] = value;
        g.nvlink_prev = *t;
        g.nvlink_prev_at = now;
        return true;
    }

    void read_processes(const Gpu& g, const nvml::Device& dev, std::optional<unsigned> gi_id, std::vector<Process>& out,
                        bool& unsupported, bool& had_error) {
        auto procs = dev.compute_processes();
        if (!procs) {
            if (procs.error().code == Code::not_supported) unsupported = true;
            else if (procs.error().code != Code::gpu_lost) {
                if (count_error("nvmlDeviceGetComputeRunningProcesses_v3", procs.error())) had_error = true;
            }
            return;
        }
        for (const auto& p : *procs) out.push_back(Process{g.info.index, gi_id, p.pid, p.used_bytes});
    }

    // Each process's mean share of the GPU over the samples NVML took since the last pass.
    void read_shares(Gpu& g, std::vector<ProcessShare>& out, bool& had_error) {
        if (g.utilization_unsupported || g.mig_enabled) return;
        auto samples = g.device->process_utilization(g.utilization_seen_us);
        if (!samples) {
            if (samples.error().code == Code::not_supported) g.utilization_unsupported = true;
            else if (samples.error().code != Code::gpu_lost) {
                if (count_error("nvmlDeviceGetProcessUtilization", samples.error())) had_error = true;
            }
            return;
        }
        std::map<unsigned, std::tuple<double, double, int>> by_pid;  // sm sum, memory sum, count
        for (const auto& s : *samples) {
            auto& [sm, mem, n] = by_pid[s.pid];
            sm += s.sm;
            mem += s.memory;
            ++n;
            g.utilization_seen_us = std::max(g.utilization_seen_us, s.timestamp_us);
        }
        for (const auto& [pid, v] : by_pid) {
            const auto& [sm, mem, n] = v;
            out.push_back(ProcessShare{g.info.index, pid, sm / n, mem / n});
        }
    }

    // pod, namespace, container (+ pod_uid, vgpu, the pod's labels) for one container's series.
    LabelSet pod_label_set(const PodSlot& slot, const std::map<std::pair<std::string, std::string>, PodMetadata>& meta,
                           std::string_view taken) const {
        LabelSet l;
        l.add("pod", slot.pod.pod).add("namespace", slot.pod.namespace_name).add("container", slot.pod.container);
        const auto md = meta.find({slot.pod.namespace_name, slot.pod.pod});
        if (options.kubernetes_pod_uid && md != meta.end()) l.add("pod_uid", md->second.uid);
        if (options.kubernetes_virtual_gpus && !slot.vgpu.empty()) l.add("vgpu", slot.vgpu);
        if (options.kubernetes_pod_labels && md != meta.end()) {
            // A pod label whose name is taken by a label of the series (or is not a valid label
            // name after sanitising) is left out: a duplicate name would break the scrape.
            std::set<std::string> seen;
            for (const auto& [k, v] : md->second.labels) {
                if (!label_allowlist.empty() &&
                    std::ranges::none_of(label_allowlist, [&](const auto& re) { return RE2::PartialMatch(k, *re); }))
                    continue;
                std::string name = sanitize_label_name(k);
                const std::string needle = "," + name + "=\"";
                if (!valid_label_name(name) || !seen.insert(name).second ||
                    ("," + std::string(taken)).find(needle) != std::string::npos ||
                    ("," + l.str()).find(needle) != std::string::npos)
                    continue;
                l.add(name, v);
            }
        }
        return l;
    }

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

    void collect() {
        Pass p;
        p.t0 = Clock::now();
        refresh_node();
        pods_by_device(p);
        read_gpus(p);
        attribute(p);
        {
            std::lock_guard lk(event_mu);
            p.xids = xids;
        }
        ++passes;
        p.t1 = Clock::now();
        std::string text = render(p);
        const auto end = Clock::now();
        auto s = std::make_shared<const Snapshot>(std::move(text), end);
        {
            std::lock_guard lk(snap_mu);
            snap = std::move(s);
        }
        last_end_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end.time_since_epoch()).count();
    }

    // Discovery when asked for, and again when a lost GPU answers: it was reset, and its MIG
    // layout or even its handle may have changed.
    void refresh_node() {
        if (rediscover || !discovered) discover();
        for (const auto& g : gpus) {
            if (!g.lost) continue;
            auto d = session.device_by_index(g.info.index);
            if (d && d->uuid()) {
                log::info("exporter: GPU {} answers again", g.info.index);
                discover();
                break;
            }
        }
    }

    // Pods by device: every container using it (sorted), or only the first one unless
    // --kubernetes-virtual-gpus, as dcgm-exporter labels a shared GPU with one pod.
    void pods_by_device(Pass& p) {
        if (!podres) return;
        auto uses = podres->list(node);
        // The client logs a failure once (and the recovery); here it only turns the labels off.
        p.podres_up = uses.has_value();
        set_attribution_problem(uses ? std::string() : fmt::format("{}: {}", podres->failure(), uses.error().message));
        if (!uses) return;
        for (const auto& o : uses->overflow) p.pods_over_limit[o.gpu_index] = o.left_out;
        for (const auto& u : uses->uses) {
            auto& v = p.all_pods[{u.target.gpu_index, u.target.gpu_instance_id}];
            if (std::ranges::find(v, u.pod, &PodSlot::pod) == v.end()) v.push_back(PodSlot{u.pod, u.replica});
        }
        for (auto& [k, v] : p.all_pods) {
            std::ranges::sort(v, {}, &PodSlot::pod);
            p.pods[k] = options.kubernetes_virtual_gpus ? v : std::vector<PodSlot>{v.front()};
        }
    }

    // Every GPU's NVML reads: values, MIG devices, GPM, NVLink, processes, shares. A GPU that
    // stops answering is marked lost and its processes dropped.
    void read_gpus(Pass& p) {
        p.gpu_values.resize(gpus.size());
        p.mig_values.resize(gpus.size());
        p.state.assign(gpus.size(), "ok");
        for (std::size_t i = 0; i < gpus.size(); ++i) {
            Gpu& g = gpus[i];
            bool had_error = false;
            if (!g.lost && !g.device) {
                auto d = session.device_by_index(g.info.index);
                if (d) g.device = std::move(*d);
                else if (d.error().code == Code::gpu_lost) g.lost = true;
                else {
                    if (count_error("nvmlDeviceGetHandleByIndex", d.error())) had_error = true;
                }
            }
            if (!g.lost && g.device && !read_gpu(g, p.gpu_values[i], p.mig_values[i], p, had_error)) {
                log::warn("exporter: GPU {} ({}) is lost: it no longer answers NVML", g.info.index, g.info.uuid);
                g.lost = true;
                std::erase_if(p.procs, [&](const Process& x) { return x.gpu == g.info.index; });
                std::erase_if(p.shares, [&](const ProcessShare& x) { return x.gpu == g.info.index; });
            }
            p.state[i] = g.lost ? "lost" : had_error ? "error" : "ok";
        }
    }

    // One answering GPU's reads; false when it stopped answering.
    bool read_gpu(Gpu& g, Values& values, std::vector<Values>& mig_values, Pass& p, bool& had_error) {
        const auto& reads = g.mig_enabled ? parent_reads : gpu_reads;
        bool ok = read_device(*g.device, reads, g.unsupported, values, had_error);
        if (ok && want_nvlink) ok = read_nvlink(g, values, had_error);
        if (ok && g.mig_enabled) {
            mig_values.resize(g.migs.size());
            for (std::size_t j = 0; j < g.migs.size() && ok; ++j) {
                Mig& m = g.migs[j];
                if (m.device) ok = read_device(*m.device, instance_reads, g.mig_unsupported, mig_values[j], had_error);
                if (ok && g.gpm_supported) {
                    const nvml::Device& parent = *g.device;
                    const unsigned gi = m.info.gpu_instance_id;
                    ok = read_gpm(
                        m.gpm, nvml::kGpmMigSampleGet, [&](nvml::GpmSample& s) { return parent.gpm_mig_sample(gi, s); },
                        mig_values[j], g.gpm_supported, had_error);
                }
            }
        } else if (ok && g.gpm_supported) {
            const nvml::Device& dev = *g.device;
            ok = read_gpm(
                g.gpm, nvml::kGpmSampleGet, [&](nvml::GpmSample& s) { return dev.gpm_sample(s); }, values,
                g.gpm_supported, had_error);
        }
        if (ok && !g.processes_unsupported) {
            if (g.mig_enabled) {
                for (const auto& m : g.migs)
                    if (m.device)
                        read_processes(g, *m.device, m.info.gpu_instance_id, p.procs, g.processes_unsupported, had_error);
            } else {
                read_processes(g, *g.device, std::nullopt, p.procs, g.processes_unsupported, had_error);
            }
        }
        if (ok && want_shares) read_shares(g, p.shares, had_error);
        return ok;
    }

    // Process names, the pods of processes, the labelling pods' UIDs and labels, and per-pod
    // shares (--kubernetes-virtual-gpus: GPU_UTIL from the processes' SM percent, FB_USED from
    // their memory in MiB, each process rounded down, as dcgm-exporter sums them).
    void attribute(Pass& p) {
        std::vector<unsigned> pids;
        for (const auto& proc : p.procs) {
            if (p.names.contains(proc.pid)) continue;
            pids.push_back(proc.pid);
            if (auto it = process_names.find(proc.pid); it != process_names.end()) {
                p.names[proc.pid] = it->second;
            } else if (auto n = session.process_name(proc.pid)) {
                p.names[proc.pid] = *n;
            } else {
                p.names[proc.pid] = "";
            }
        }
        process_names = p.names;  // forget PIDs that are gone
        for (const auto& s : p.shares)
            if (std::ranges::find(pids, s.pid) == pids.end()) pids.push_back(s.pid);
        if (processes && !pids.empty()) p.proc_pods = processes->attribute(pids);

        if (pod_directory) {
            std::vector<PodRef> asked;
            for (const auto& [k, v] : p.pods)
                for (const auto& s : v) asked.push_back(s.pod);
            if (!asked.empty()) p.meta = pod_directory->lookup(asked);
        }

        for (const auto& s : p.shares)
            if (auto it = p.proc_pods.find(s.pid); it != p.proc_pods.end())
                p.pod_sm[{s.gpu, std::nullopt, it->second.namespace_name, it->second.pod}] += s.sm;
        for (const auto& proc : p.procs)
            if (auto it = p.proc_pods.find(proc.pid); it != p.proc_pods.end())
                p.pod_fb[{proc.gpu, proc.gi_id, it->second.namespace_name, it->second.pod}] +=
                    std::floor(static_cast<double>(proc.bytes) / (1024.0 * 1024.0));
    }

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

    const Gpu* gpu_at(unsigned index) const {
        for (const auto& g : gpus)
            if (g.info.index == index) return &g;
        return nullptr;
    }

    std::string render(Pass& p) {
        Out out(options.counters);
        render_devices(out, p);
        render_gpu_state(out, p);
        render_processes(out, p);
        render_mps(out);
        for (const auto& [function, n] : nvml_errors) {
            LabelSet l;
            l.add("function", function);
            out.add(Metric::nvml_errors_total, l, double(n));
        }
        render_kube_api(out);
        render_self(out, p);
        return out.ex.render();
    }

    // The DCGM series of every GPU and MIG device: the device's own, or one per pod using it.
    void render_devices(Out& out, Pass& p) {
        auto emit = [&](const MetricDef& m, LabelSet labels, DeviceKey key, double x) {
            if (m.id == Metric::xid_errors) {
                const unsigned code = static_cast<unsigned>(x);
                labels.add("err_code", fmt::format("{}", code)).add("err_msg", xid_error_message(code));
            }
            const auto it = p.pods.find(key);
            if (it == p.pods.end() || it->second.empty()) {
                out.add(m.id, labels, x);
                return;
            }
            const bool per_pod_value = options.kubernetes_virtual_gpus &&
                                       ((m.id == Metric::gpu_util && !key.second) || m.id == Metric::fb_used);
            if (per_pod_value) out.add(m.id, labels, x);  // the device's own series stays next to the pods'
            for (const auto& slot : it->second) {
                LabelSet l = labels;
                l.append(pod_label_set(slot, p.meta, labels.str()));
                double v = x;
                if (per_pod_value) {
                    const auto& table = m.id == Metric::gpu_util ? p.pod_sm : p.pod_fb;
                    auto q = table.find({key.first, key.second, slot.pod.namespace_name, slot.pod.pod});
                    v = q == table.end() ? 0.0 : q->second;
                }
                out.add(m.id, l, v);
            }
        };
        for (std::size_t i = 0; i < gpus.size(); ++i) {
            const Gpu& g = gpus[i];
            if (g.lost) continue;
            Values& v = p.gpu_values[i];
            const auto it = p.xids.find(xid_key(g.info));
            v[static_cast<std::size_t>(Metric::xid_errors)] = it == p.xids.end() ? 0.0 : double(it->second.last);
            for (const auto& m : catalogue()) {
                if (m.scope != Scope::gpu && !(m.scope == Scope::instance && !g.mig_enabled)) continue;
                const auto& x = v[static_cast<std::size_t>(m.id)];
                if (x) emit(m, g.dcgm, {g.info.index, std::nullopt}, *x);
            }
            if (!g.mig_enabled) continue;
            for (std::size_t j = 0; j < g.migs.size() && j < p.mig_values[i].size(); ++j) {
                for (const auto& m : catalogue()) {
                    if (m.scope != Scope::instance) continue;
                    const auto& x = p.mig_values[i][j][static_cast<std::size_t>(m.id)];
                    if (x) emit(m, g.migs[j].labels, {g.info.index, g.migs[j].info.gpu_instance_id}, *x);
                }
            }
        }
    }

    // kgpu_gpu_health and the XID counters of every GPU.
    void render_gpu_state(Out& out, const Pass& p) {
        for (std::size_t i = 0; i < gpus.size(); ++i) {
            const Gpu& g = gpus[i];
            for (std::string_view s : {"ok", "error", "lost"}) {
                LabelSet l = g.kgpu;
                l.add("state", s);
                out.add(Metric::gpu_health, l, p.state[i] == s ? 1.0 : 0.0);
            }
            const auto it = p.xids.find(xid_key(g.info));
            const Xid x = it == p.xids.end() ? Xid{} : it->second;
            out.add(Metric::gpu_last_xid, g.kgpu, x.last);
            out.add(Metric::gpu_xid_events_total, g.kgpu, double(x.count));
            for (std::size_t c = 0; c < x.by_class.size(); ++c) {
                LabelSet l = g.kgpu;
                l.add("xid_class", kXidClasses[c]);
                out.add(Metric::gpu_xid_class_events_total, l, double(x.by_class[c]));
            }
        }
    }

    // kgpu_process_fb_used_bytes, and kgpu_pod_*: every container allocated a (non-MIG) GPU,
    // and every container whose processes ran on it, with the sum of its processes' shares.
    void render_processes(Out& out, Pass& p) {
        for (const auto& proc : p.procs) {
            const Gpu* g = gpu_at(proc.gpu);
            if (!g) continue;
            LabelSet l = g->kgpu;
            if (proc.gi_id) l.add("GPU_I_ID", fmt::format("{}", *proc.gi_id));
            l.add("pid", fmt::format("{}", proc.pid));
            if (const auto& n = p.names[proc.pid]; !n.empty()) l.add("process", n);
            if (auto it = p.proc_pods.find(proc.pid); it != p.proc_pods.end())
                l.add("pod", it->second.pod).add("namespace", it->second.namespace_name).add("container", it->second.container);
            out.add(Metric::process_fb_used_bytes, l, double(proc.bytes));
        }
        if (!processes) return;
        std::map<std::pair<unsigned, PodRef>, std::pair<double, double>> per_pod;
        for (const auto& g : gpus) {
            if (g.lost || g.mig_enabled || g.utilization_unsupported) continue;
            if (auto it = p.all_pods.find({g.info.index, std::nullopt}); it != p.all_pods.end())
                for (const auto& s : it->second) per_pod[{g.info.index, s.pod}];
        }
        for (const auto& s : p.shares) {
            auto it = p.proc_pods.find(s.pid);
            if (it == p.proc_pods.end()) continue;
            auto& [sm, mem] = per_pod[{s.gpu, it->second}];
            sm += s.sm;
            mem += s.memory;
        }
        for (const auto& [k, v] : per_pod) {
            const Gpu* g = gpu_at(k.first);
            if (!g) continue;
            LabelSet l = g->kgpu;
            l.add("pod", k.second.pod).add("namespace", k.second.namespace_name).add("container", k.second.container);
            out.add(Metric::pod_sm_util_ratio, l, v.first * def(Metric::pod_sm_util_ratio).scale);
            out.add(Metric::pod_mem_util_ratio, l, v.second * def(Metric::pod_mem_util_ratio).scale);
        }
    }

    // kgpu_mps_*: the MPS daemons' status files under --mps-root.
    void render_mps(Out& out) {
        if (options.mps_root.empty()) return;
        std::vector<std::string> problems;
        const auto statuses = mps::read_statuses(mps::Root{options.mps_root}, &problems);
        for (const auto& p : problems)
            if (mps_problems.first(p)) log::warn("exporter: MPS: {} (logged once; the file is left out)", p);
        for (const auto& st : statuses) {
            LabelSet l;
            l.add("resource", st.resource);
            out.add(Metric::mps_daemon_up, l, st.state == mps::DaemonState::running ? 1.0 : 0.0);
            out.add(Metric::mps_daemon_restarts_total, l, double(st.restarts));
            out.add(Metric::mps_active_thread_percentage, l, double(st.active_thread_percentage));
            for (const auto& lim : st.pinned_limits) {
                LabelSet g = l;
                g.add("gpu", fmt::format("{}", lim.index)).add("UUID", lim.uuid);
                out.add(Metric::mps_pinned_memory_limit_bytes, g, double(lim.mib << 20));
            }
        }
    }

    // kgpu_kube_api_*, kgpu_node_events_total: the status files under --kube-api-status-dir.
    void render_kube_api(Out& out) {
        if (options.kube_api_status_dir.empty()) return;
        std::vector<std::string> problems;
        for (const auto& st : read_kube_api_statuses(options.kube_api_status_dir, &problems)) {
            LabelSet c;
            c.add("component", st.component);
            for (const auto& q : st.requests) {
                LabelSet l = c;
                l.add("method", q.method).add("code", q.code);
                out.add(Metric::kube_api_requests_total, l, q.count);
            }
            for (const auto& [kind, n] : st.errors) {
                LabelSet l = c;
                l.add("kind", kind);
                out.add(Metric::kube_api_errors_total, l, n);
            }
            if (st.last_success) out.add(Metric::kube_api_last_success_timestamp_seconds, c, *st.last_success);
            for (const auto& [result, n] : st.events) {
                LabelSet l = c;
                l.add("result", result);
                out.add(Metric::node_events_total, l, n);
            }
        }
        for (const auto& p : problems)
            if (status_problems.first(p)) log::warn("exporter: kube API status: {} (logged once; the file is left out)", p);
    }

    // The exporter's own series: pod attribution, HTTP connections, the collection itself.
    void render_self(Out& out, const Pass& p) {
        if (p.podres_up) {
            out.add(Metric::pod_attribution_up, LabelSet{}, *p.podres_up ? 1.0 : 0.0);
            for (const auto& g : gpus) {
                if (!*p.podres_up) break;  // unknown while the kubelet does not answer
                auto it = p.pods_over_limit.find(g.info.index);
                out.add(Metric::pods_over_limit, g.kgpu, it == p.pods_over_limit.end() ? 0.0 : double(it->second));
            }
        }
        if (http_stats) {
            const HttpServerStats h = http_stats();
            out.add(Metric::http_connections, LabelSet{}, double(h.open));
            for (auto [reason, n] : {std::pair<std::string_view, std::uint64_t>{"evicted", h.evicted},
                                     {"peer_limit", h.peer_limit},
                                     {"timeout", h.timeout},
                                     {"oversize", h.oversize},
                                     {"malformed", h.malformed},
                                     {"tls", h.tls}}) {
                LabelSet l;
                l.add("reason", reason);
                out.add(Metric::http_connections_closed_total, l, double(n));
            }
        }
        out.add(Metric::collection_duration_seconds, LabelSet{}, std::chrono::duration<double>(p.t1 - p.t0).count());
        out.add(Metric::collections_total, LabelSet{}, double(passes));
        out.add(Metric::last_collection_timestamp_seconds, LabelSet{},
                std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
    }

    void collector_loop() {
        auto next = Clock::now() + options.interval;
        std::unique_lock lk(stop_mu);
        while (!stopping) {
            if (stop_cv.wait_until(lk, next, [&] { return stopping; })) break;
            lk.unlock();
            collect();
            lk.lock();
            const auto now = Clock::now();
            next += options.interval;
            if (next < now) next = now + options.interval;  // a pass overran: no burst of catch-up passes
        }
        running = false;
    }

    bool should_stop() {
        std::lock_guard lk(stop_mu);
        return stopping;
    }

    // An event set with every GPU registered for XIDs and MIG changes, or nullopt when NVML
    // cannot make one (`failures` counts those; the first is logged). `keys` gets the xid key of
    // each registration, by the key index the events carry.
    std::optional<nvml::EventSet> build_event_set(std::vector<std::string>& keys, int& failures) {
        auto s = nvml::EventSet::create(session);
        if (!s) {
            if (failures++ == 0) log::warn("exporter: no XID events: {}", s.error().message);
            return std::nullopt;
        }
        keys.clear();
        std::lock_guard lk(event_mu);
        for (std::size_t i = 0; i < event_devices.size(); ++i) {
            auto r = s->add(event_devices[i].second, nvml::kEventXid | nvml::kEventMigConfigChange, static_cast<int>(i));
            if (!r) log::debug("exporter: XID events for {}: {}", event_devices[i].first, r.error().message);
            keys.push_back(event_devices[i].first);
        }
        return std::move(*s);
    }

    // `set` and `keys`: what start() registered, for generation `built`.
    void event_loop(std::optional<nvml::EventSet> set, std::vector<std::string> keys, unsigned built, int failures) {
        if (!set) {  // start() could not make one: the first retry after a pause too
            std::unique_lock lk(stop_mu);
            stop_cv.wait_for(lk, std::chrono::milliseconds(250), [&] { return stopping; });
        }
        while (!should_stop()) {
            if (!set || built != generation.load()) {
                set.reset();
                built = generation.load();
                set = build_event_set(keys, failures);
                if (!set) {
                    std::unique_lock lk(stop_mu);
                    stop_cv.wait_for(lk, std::chrono::milliseconds(std::min(250 << std::min(failures, 4), 4000)),
                                     [&] { return stopping; });
                    continue;
                }
            }
            auto ev = set->wait(250);
            if (!ev) {
                // The driver broke the wait (e.g. a GPU fell off): re-create the set after a pause.
                if (failures++ == 0) log::warn("exporter: waiting for NVML events: {}", ev.error().message);
                set.reset();
                std::unique_lock lk(stop_mu);
                stop_cv.wait_for(lk, std::chrono::milliseconds(std::min(250 << std::min(failures, 4), 4000)),
                                 [&] { return stopping; });
                continue;
            }
            failures = 0;
            if (!*ev) continue;
            const nvml::Event& e = **ev;
            if (e.type & nvml::kEventMigConfigChange) rediscover = true;
            if ((e.type & nvml::kEventXid) && e.key >= 0 && static_cast<std::size_t>(e.key) < keys.size()) {
                std::lock_guard lk(event_mu);
                Xid& x = xids[keys[static_cast<std::size_t>(e.key)]];
                x.last = static_cast<unsigned>(e.data);
                ++x.count;
                ++x.by_class[xid_class(x.last)];
                log::info("exporter: XID {} on {}", e.data, keys[static_cast<std::size_t>(e.key)]);
            }
        }
    }
};

Collector::Collector(nvml::Session session, CollectorOptions options) : options_(std::move(options)) {
    impl_ = std::make_unique<Impl>(std::move(session), options_);
}

Collector::~Collector() { stop(); }

void Collector::collect() { impl_->collect(); }

void Collector::start() {
    if (impl_->collector_thread.joinable()) return;
    {
        std::lock_guard lk(impl_->stop_mu);
        impl_->stopping = false;
    }
    if (!impl_->discovered) impl_->discover();
    impl_->running = true;
    // The XID events are registered before start() returns: an XID raised after it (or after the
    // exporter logs "listening on") is counted. NVML delivers an event only to the sets registered
    // when it happens, so a set built later on the event thread missed what came before it
    // (issue #23: the demo's XID showed as 0 "No Error" in 2 of 20 runs).
    std::vector<std::string> keys;
    int failures = 0;
    const unsigned built = impl_->generation.load();
    auto set = impl_->build_event_set(keys, failures);
    impl_->event_thread = std::thread([this, set = std::move(set), keys = std::move(keys), built, failures]() mutable {
        impl_->event_loop(std::move(set), std::move(keys), built, failures);
    });
    impl_->collector_thread = std::thread([this] { impl_->collector_loop(); });
}

void Collector::stop() {
    {
        std::lock_guard lk(impl_->stop_mu);
        impl_->stopping = true;
    }
    impl_->stop_cv.notify_all();
    if (impl_->collector_thread.joinable()) impl_->collector_thread.join();
    if (impl_->event_thread.joinable()) impl_->event_thread.join();
    impl_->running = false;
}

std::shared_ptr<const Snapshot> Collector::snapshot() const {
    std::lock_guard lk(impl_->snap_mu);
    return impl_->snap;
}

void Collector::set_http_stats(std::function<HttpServerStats()> stats) { impl_->http_stats = std::move(stats); }

std::string Collector::attribution_problem() const {
    std::lock_guard lk(impl_->snap_mu);
    return impl_->attribution_problem;
}

Status Collector::health(std::chrono::steady_clock::time_point now) const {
    if (!impl_->running) return fail(Code::unavailable, "the collector thread is not running");
    const std::int64_t last = impl_->last_end_ns.load();
    if (last == 0) return fail(Code::unavailable, "no collection pass has finished yet");
    const auto age = now.time_since_epoch() - std::chrono::nanoseconds(last);
    if (age > 3 * options_.interval)
        return fail(Code::timeout, "the last collection pass ended {:.1f} s ago, more than 3 intervals of {} ms",
                    std::chrono::duration<double>(age).count(), options_.interval.count());
    return {};
}

}  // namespace kgpu::exporter
