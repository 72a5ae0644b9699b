#include "exporter/collector.h"
#include "exporter/collector_impl.h"

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

bool stateful(Read r) { return r == Read::nvlink_throughput || r == Read::gpm; }

std::vector<Read> reads_for(const CounterSelection& sel, bool gpu_scope, bool instance_scope) {
    std::vector<Read> out;
    for (const auto& m : catalogue()) {
        if (m.read == Read::none || stateful(m.read) || !sel.enabled(m.id)) continue;
        const bool want = (m.scope == Scope::gpu && gpu_scope) || (m.scope == Scope::instance && instance_scope);
        if (want && std::find(out.begin(), out.end(), m.read) == out.end()) out.push_back(m.read);
    }
    return out;
}

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

std::string sanitize_label_name(std::string_view name) {
    std::string out(name);
    for (char& c : out)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) c = '_';
    return out;
}

std::string xid_key(const inventory::Gpu& g) { return g.uuid.empty() ? fmt::format("index:{}", g.index) : g.uuid; }

Collector::Impl::Impl(nvml::Session s, const CollectorOptions& o) : session(std::move(s)), options(o) {
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

bool Collector::Impl::count_error(std::string_view function, const Error& e) {
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

LabelSet Collector::Impl::base_labels(const inventory::Gpu& g) const {
    LabelSet l;
    l.add("gpu", fmt::format("{}", g.index))
        .add(options.uuid_label, g.uuid)
        .add("pci_bus_id", g.pci_bus_id)
        .add("device", fmt::format("nvidia{}", g.index))
        .add("modelName", model_name(g.name, options.replace_blanks_in_model_name));
    return l;
}

LabelSet Collector::Impl::tail_labels(const nvml::Device* dev) {
    LabelSet l;
    if (options.hostname) l.add(options.hostname_label, *options.hostname);
    for (const auto& f : label_fields()) {
        if (!options.counters.label(f.id)) continue;
        if (auto v = label_value(f.id, dev)) l.add(f.name, *v);
    }
    return l;
}

std::optional<std::string> Collector::Impl::label_value(LabelField f, const nvml::Device* dev) {
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

void Collector::Impl::discover() {
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
            if (g.device) {
                auto d = g.device->mig_device(m.index);
                if (d && d->has_value()) mig.device = std::move(**d);
                else if (!d && d.error().code == Code::stale) rediscover = true;  // changed meanwhile: again next pass
            }
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

LabelSet Collector::Impl::pod_label_set(const PodSlot& slot, const std::map<std::pair<std::string, std::string>,
                                        PodMetadata>& meta, std::string_view taken) const {
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

void Collector::Impl::collect() {
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

void Collector::Impl::refresh_node() {
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

void Collector::Impl::pods_by_device(Pass& p) {
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

void Collector::Impl::attribute(Pass& p) {
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

void Collector::Impl::collector_loop() {
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

bool Collector::Impl::should_stop() {
    std::lock_guard lk(stop_mu);
    return stopping;
}

std::optional<nvml::EventSet> Collector::Impl::build_event_set(std::vector<std::string>& keys, int& failures) {
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

void Collector::Impl::event_loop(std::optional<nvml::EventSet> set, std::vector<std::string> keys, unsigned built,
                                 int failures) {
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
