#include "exporter/collector.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <bitset>
#include <cmath>
#include <map>
#include <unordered_map>

#include "common/log.h"
#include "exporter/catalogue.h"
#include "exporter/exposition.h"
#include "inventory/discovery.h"
#include "nvml/events.h"

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

// The Reads each kind of device is asked for, in catalogue order.
std::vector<Read> reads_for(bool gpu_scope, bool instance_scope) {
    std::vector<Read> out;
    for (const auto& m : catalogue()) {
        if (m.read == Read::none) continue;
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
        case Read::count_: break;
    }
    return fail(Code::internal, "no NVML read for this metric");
}

LabelSet pod_labels(const PodRef& p) {
    LabelSet l;
    l.add("pod", p.pod).add("namespace", p.namespace_name).add("container", p.container);
    return l;
}

std::string xid_key(const inventory::Gpu& g) { return g.uuid.empty() ? fmt::format("index:{}", g.index) : g.uuid; }

}  // namespace

struct Collector::Impl {
    struct Mig {
        inventory::MigDevice info;
        std::optional<nvml::Device> device;
        LabelSet labels;  // DCGM labels with GPU_I_PROFILE / GPU_I_ID
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
    };
    struct Xid {
        unsigned last = 0;
        std::uint64_t count = 0;
    };
    struct Process {
        unsigned gpu = 0;
        std::optional<unsigned> gi_id;
        unsigned pid = 0;
        std::uint64_t bytes = 0;
    };

    Impl(nvml::Session s, const CollectorOptions& o) : session(std::move(s)), options(o) {
        if (options.kubernetes) {
            PodResourcesOptions pr = options.pod_resources;
            podres = std::make_unique<PodResourcesClient>(std::move(pr));
            processes = std::make_unique<ProcessAttributor>(options.proc_root, options.cri_endpoint);
        }
        gpu_reads = reads_for(true, true);
        parent_reads = reads_for(true, false);
        instance_reads = reads_for(false, true);
    }

    nvml::Session session;
    CollectorOptions options;
    std::unique_ptr<PodResourcesClient> podres;
    std::unique_ptr<ProcessAttributor> processes;
    std::vector<Read> gpu_reads, parent_reads, instance_reads;

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

    void count_error(std::string_view function, const Error& e) {
        auto it = nvml_errors.find(function);
        if (it == nvml_errors.end()) {
            log::warn("exporter: {}", e.message);  // the first failure of each function
            it = nvml_errors.emplace(std::string(function), 0).first;
        }
        ++it->second;
    }

    LabelSet base_labels(const inventory::Gpu& g) const {
        LabelSet l;
        l.add("gpu", fmt::format("{}", g.index))
            .add("UUID", g.uuid)
            .add("pci_bus_id", g.pci_bus_id)
            .add("device", fmt::format("nvidia{}", g.index))
            .add("modelName", g.name);
        return l;
    }
    LabelSet tail_labels() const {
        LabelSet l;
        if (options.hostname) l.add(options.hostname_label, *options.hostname);
        l.add("DCGM_FI_DRIVER_VERSION", node.driver_version);
        return l;
    }

    void discover() {
        inventory::DiscoveryOptions dopts;
        dopts.topology = false;
        auto n = inventory::discover(session, dopts);
        if (!n) {
            if (discovery_error != n.error().message)
                log::warn("exporter: reading the node's GPUs: {}", n.error().message);
            discovery_error = n.error().message;
            count_error("nvmlDeviceGetCount", n.error());
            return;  // keep what we had; try again next pass
        }
        discovery_error.clear();
        node = std::move(*n);
        rediscover = false;
        std::vector<Gpu> fresh;
        const LabelSet tail = tail_labels();
        for (const auto& info : node.gpus) {
            Gpu g;
            g.info = info;
            g.lost = info.lost;
            if (auto d = session.device_by_index(info.index)) g.device = std::move(*d);
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
        log::info("exporter: {} GPU(s), driver {}", gpus.size(), node.driver_version);
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
                count_error(nvml_function(r), v.error());
                had_error = true;
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

    void read_processes(const Gpu& g, const nvml::Device& dev, std::optional<unsigned> gi_id, std::vector<Process>& out,
                        bool& unsupported, bool& had_error) {
        auto procs = dev.compute_processes();
        if (!procs) {
            if (procs.error().code == Code::not_supported) unsupported = true;
            else if (procs.error().code != Code::gpu_lost) {
                count_error("nvmlDeviceGetComputeRunningProcesses_v3", procs.error());
                had_error = true;
            }
            return;
        }
        for (const auto& p : *procs) out.push_back(Process{g.info.index, gi_id, p.pid, p.used_bytes});
    }

    void collect() {
        const auto t0 = Clock::now();
        if (rediscover || !discovered) discover();
        // A lost GPU that answers again was reset: read the node afresh (its MIG layout or even
        // its handle may have changed).
        for (const auto& g : gpus) {
            if (!g.lost) continue;
            auto d = session.device_by_index(g.info.index);
            if (d && d->uuid()) {
                log::info("exporter: GPU {} answers again", g.info.index);
                discover();
                break;
            }
        }

        // Pods by device.
        std::map<std::pair<unsigned, std::optional<unsigned>>, std::vector<PodRef>> pods;
        std::optional<bool> podres_up;
        std::map<unsigned, std::size_t> pods_over_limit;  // GPU index -> containers left out
        if (podres) {
            auto uses = podres->list(node);
            // The client logs a failure once (and the recovery); here it only turns the labels off.
            podres_up = uses.has_value();
            set_attribution_problem(uses ? std::string()
                                         : fmt::format("{}: {}", podres->failure(), uses.error().message));
            if (uses) {
                for (const auto& o : uses->overflow) pods_over_limit[o.gpu_index] = o.left_out;
                for (const auto& u : uses->uses) {
                    auto& v = pods[{u.target.gpu_index, u.target.gpu_instance_id}];
                    if (std::find(v.begin(), v.end(), u.pod) == v.end()) v.push_back(u.pod);
                }
                for (auto& [k, v] : pods) std::sort(v.begin(), v.end());
            }
        }

        // NVML.
        std::vector<Values> gpu_values(gpus.size());
        std::vector<std::vector<Values>> mig_values(gpus.size());
        std::vector<std::string> state(gpus.size(), "ok");
        std::vector<Process> procs;
        for (std::size_t i = 0; i < gpus.size(); ++i) {
            Gpu& g = gpus[i];
            bool had_error = false;
            if (!g.lost && !g.device) {
                auto d = session.device_by_index(g.info.index);
                if (d) g.device = std::move(*d);
                else if (d.error().code == Code::gpu_lost) g.lost = true;
                else {
                    count_error("nvmlDeviceGetHandleByIndex", d.error());
                    had_error = true;
                }
            }
            if (!g.lost && g.device) {
                const auto& reads = g.mig_enabled ? parent_reads : gpu_reads;
                bool ok = read_device(*g.device, reads, g.unsupported, gpu_values[i], had_error);
                if (ok && g.mig_enabled) {
                    mig_values[i].resize(g.migs.size());
                    for (std::size_t j = 0; j < g.migs.size() && ok; ++j)
                        if (g.migs[j].device)
                            ok = read_device(*g.migs[j].device, instance_reads, g.mig_unsupported, mig_values[i][j],
                                             had_error);
                }
                if (ok && !g.processes_unsupported) {
                    if (g.mig_enabled) {
                        for (const auto& m : g.migs)
                            if (m.device)
                                read_processes(g, *m.device, m.info.gpu_instance_id, procs, g.processes_unsupported,
                                               had_error);
                    } else {
                        read_processes(g, *g.device, std::nullopt, procs, g.processes_unsupported, had_error);
                    }
                }
                if (!ok) {
                    log::warn("exporter: GPU {} ({}) is lost: it no longer answers NVML", g.info.index, g.info.uuid);
                    g.lost = true;
                    std::erase_if(procs, [&](const Process& p) { return p.gpu == g.info.index; });
                }
            }
            state[i] = g.lost ? "lost" : had_error ? "error" : "ok";
        }

        // Process names and pods.
        std::unordered_map<unsigned, std::string> names;
        std::vector<unsigned> pids;
        for (const auto& p : procs) {
            if (names.contains(p.pid)) continue;
            pids.push_back(p.pid);
            if (auto it = process_names.find(p.pid); it != process_names.end()) {
                names[p.pid] = it->second;
            } else if (auto n = session.process_name(p.pid)) {
                names[p.pid] = *n;
            } else {
                names[p.pid] = "";
            }
        }
        process_names = names;  // forget PIDs that are gone
        std::unordered_map<unsigned, PodRef> proc_pods;
        if (processes && !pids.empty()) proc_pods = processes->attribute(pids);

        std::map<std::string, Xid> xid_copy;
        {
            std::lock_guard lk(event_mu);
            xid_copy = xids;
        }
        ++passes;
        const auto t1 = Clock::now();

        // Render.
        Exposition ex;
        std::array<std::size_t, kMetricCount> fam{};
        for (const auto& m : catalogue()) fam[static_cast<std::size_t>(m.id)] = ex.family(m);
        auto series = [&](const LabelSet& labels, unsigned gpu, std::optional<unsigned> gi) {
            std::vector<std::string> out;
            auto it = pods.find({gpu, gi});
            if (it == pods.end()) {
                out.push_back(labels.str());
            } else {
                for (const auto& p : it->second) {
                    LabelSet l = labels;
                    l.append(pod_labels(p));
                    out.push_back(l.str());
                }
            }
            return out;
        };
        for (std::size_t i = 0; i < gpus.size(); ++i) {
            const Gpu& g = gpus[i];
            if (g.lost) continue;
            Values& v = gpu_values[i];
            const auto it = xid_copy.find(xid_key(g.info));
            v[static_cast<std::size_t>(Metric::xid_errors)] = it == xid_copy.end() ? 0.0 : double(it->second.last);
            const auto labels = series(g.dcgm, g.info.index, std::nullopt);
            for (const auto& m : catalogue()) {
                if (m.scope != Scope::gpu && !(m.scope == Scope::instance && !g.mig_enabled)) continue;
                const auto& x = v[static_cast<std::size_t>(m.id)];
                if (!x) continue;
                for (const auto& l : labels) ex.add(fam[static_cast<std::size_t>(m.id)], l, *x);
            }
            if (!g.mig_enabled) continue;
            for (std::size_t j = 0; j < g.migs.size() && j < mig_values[i].size(); ++j) {
                const auto mlabels = series(g.migs[j].labels, g.info.index, g.migs[j].info.gpu_instance_id);
                for (const auto& m : catalogue()) {
                    if (m.scope != Scope::instance) continue;
                    const auto& x = mig_values[i][j][static_cast<std::size_t>(m.id)];
                    if (!x) continue;
                    for (const auto& l : mlabels) ex.add(fam[static_cast<std::size_t>(m.id)], l, *x);
                }
            }
        }
        for (std::size_t i = 0; i < gpus.size(); ++i) {
            const Gpu& g = gpus[i];
            for (std::string_view s : {"ok", "error", "lost"}) {
                LabelSet l = g.kgpu;
                l.add("state", s);
                ex.add(fam[static_cast<std::size_t>(Metric::gpu_health)], l, state[i] == s ? 1.0 : 0.0);
            }
            const auto it = xid_copy.find(xid_key(g.info));
            const Xid x = it == xid_copy.end() ? Xid{} : it->second;
            ex.add(fam[static_cast<std::size_t>(Metric::gpu_last_xid)], g.kgpu, x.last);
            ex.add(fam[static_cast<std::size_t>(Metric::gpu_xid_events_total)], g.kgpu, double(x.count));
        }
        for (const auto& p : procs) {
            const Gpu* g = nullptr;
            for (const auto& c : gpus)
                if (c.info.index == p.gpu) g = &c;
            if (!g) continue;
            LabelSet l = g->kgpu;
            if (p.gi_id) l.add("GPU_I_ID", fmt::format("{}", *p.gi_id));
            l.add("pid", fmt::format("{}", p.pid));
            if (const auto& n = names[p.pid]; !n.empty()) l.add("process", n);
            if (auto it = proc_pods.find(p.pid); it != proc_pods.end()) l.append(pod_labels(it->second));
            ex.add(fam[static_cast<std::size_t>(Metric::process_fb_used_bytes)], l, double(p.bytes));
        }
        for (const auto& [function, n] : nvml_errors) {
            LabelSet l;
            l.add("function", function);
            ex.add(fam[static_cast<std::size_t>(Metric::nvml_errors_total)], l, double(n));
        }
        if (podres_up) {
            ex.add(fam[static_cast<std::size_t>(Metric::pod_attribution_up)], "", *podres_up ? 1.0 : 0.0);
            for (const auto& g : gpus) {
                if (!*podres_up) break;  // unknown while the kubelet does not answer
                auto it = pods_over_limit.find(g.info.index);
                ex.add(fam[static_cast<std::size_t>(Metric::pods_over_limit)], g.kgpu,
                       it == pods_over_limit.end() ? 0.0 : double(it->second));
            }
        }
        if (http_stats) {
            const HttpServerStats h = http_stats();
            ex.add(fam[static_cast<std::size_t>(Metric::http_connections)], "", double(h.open));
            for (auto [reason, n] : {std::pair<std::string_view, std::uint64_t>{"evicted", h.evicted},
                                     {"peer_limit", h.peer_limit},
                                     {"timeout", h.timeout},
                                     {"oversize", h.oversize},
                                     {"malformed", h.malformed},
                                     {"tls", h.tls}}) {
                LabelSet l;
                l.add("reason", reason);
                ex.add(fam[static_cast<std::size_t>(Metric::http_connections_closed_total)], l, double(n));
            }
        }
        ex.add(fam[static_cast<std::size_t>(Metric::collection_duration_seconds)], "",
               std::chrono::duration<double>(t1 - t0).count());
        ex.add(fam[static_cast<std::size_t>(Metric::collections_total)], "", double(passes));
        ex.add(fam[static_cast<std::size_t>(Metric::last_collection_timestamp_seconds)], "",
               std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());

        const auto end = Clock::now();
        auto s = std::make_shared<const Snapshot>(ex.render(), end);
        {
            std::lock_guard lk(snap_mu);
            snap = std::move(s);
        }
        last_end_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end.time_since_epoch()).count();
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

    void event_loop() {
        std::optional<nvml::EventSet> set;
        std::vector<std::string> keys;
        unsigned built = ~0u;
        int failures = 0;
        while (!should_stop()) {
            if (!set || built != generation.load()) {
                set.reset();
                built = generation.load();
                auto s = nvml::EventSet::create(session);
                if (!s) {
                    if (failures++ == 0) log::warn("exporter: no XID events: {}", s.error().message);
                    std::unique_lock lk(stop_mu);
                    stop_cv.wait_for(lk, std::chrono::milliseconds(std::min(250 << std::min(failures, 4), 4000)),
                                     [&] { return stopping; });
                    continue;
                }
                keys.clear();
                std::lock_guard lk(event_mu);
                for (std::size_t i = 0; i < event_devices.size(); ++i) {
                    auto r = s->add(event_devices[i].second, nvml::kEventXid | nvml::kEventMigConfigChange,
                                    static_cast<int>(i));
                    if (!r) log::debug("exporter: XID events for {}: {}", event_devices[i].first, r.error().message);
                    keys.push_back(event_devices[i].first);
                }
                set.emplace(std::move(*s));
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
    impl_->event_thread = std::thread([this] { impl_->event_loop(); });
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
