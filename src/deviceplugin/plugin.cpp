#include "deviceplugin/plugin.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "common/fd.h"
#include "common/files.h"
#include "common/log.h"
#include "common/log_once.h"
#include "common/memory.h"
#include "common/process.h"
#include "deviceplugin/allocate.h"
#include "deviceplugin/allocator.h"
#include "deviceplugin/cdi_refresh.h"
#include "deviceplugin/extras.h"
#include "deviceplugin/health.h"
#include "deviceplugin/mig_caps.h"
#include "deviceplugin/mps.h"
#include "deviceplugin/node_events.h"
#include "deviceplugin/paused.h"
#include "deviceplugin/registrar.h"
#include "deviceplugin/resources.h"
#include "deviceplugin/server.h"
#include "inventory/discovery.h"
#include "kube/client.h"
#include "kube/events.h"
#include "kube/node_watch.h"
#include "nvml/library.h"

#include "deviceplugin/plugin_impl.h"

namespace kgpu::deviceplugin {
namespace detail {

bool Plugin::unhealthy_locked(const Resource& r, const Device& d) const {
    // An MPS replica is only usable while its resource's control daemon answers.
    if (r.mps) {
        auto it = mps_up_.find(r.name);
        if (it == mps_up_.end() || !it->second) return true;
    }
    if (d.gpu_index >= health_.size()) return d.lost;
    const GpuHealth& h = health_[d.gpu_index];
    return !h.healthy || (d.mig && h.unhealthy_migs.contains(d.uuid)) || paused_.contains(h.uuid);
}

v1beta1::ListAndWatchResponse Plugin::device_list_locked(const Resource& r) const {
    v1beta1::ListAndWatchResponse out;
    for (const auto& d : r.devices) {
        auto* dev = out.add_devices();
        dev->set_id(d.id);
        dev->set_health(unhealthy_locked(r, d) ? "Unhealthy" : "Healthy");
        if (d.numa) dev->mutable_topology()->add_nodes()->set_id(*d.numa);
    }
    return out;
}

void Plugin::publish_locked(Entry& e) {
    if (e.server && e.state) e.server->publish(device_list_locked(e.state->resource));
}

void Plugin::report_health_locked(const std::vector<GpuHealth>& next) {
    if (!events_) return;
    auto devices_of = [this](unsigned gpu) {
        std::vector<std::string> parts;
        if (served_)
            for (const auto& e : served_->entries) {
                if (!e->state) continue;
                std::size_t n = 0;
                for (const auto& d : e->state->resource.devices) n += d.gpu_index == gpu;
                if (n) parts.push_back(fmt::format("{} {} device{}", n, e->name, n == 1 ? "" : "s"));
            }
        return fmt::format("{}", fmt::join(parts, ", "));
    };
    if (opts_.node_events)
        for (auto& n : health_notices(health_, next, devices_of))
            events_->record(std::move(n.type), std::move(n.reason), std::move(n.message));
    if (opts_.node_annotation) events_->annotate(kHealthAnnotation, health_annotation(next));
}

void Plugin::on_health(const std::vector<GpuHealth>& health) {
    std::lock_guard lk(mu_);
    report_health_locked(health);
    health_ = health;
    if (!served_) return;
    for (auto& e : served_->entries) publish_locked(*e);
}

void Plugin::on_mps(const std::map<std::string, MpsWatcher::State>& states) {
    std::lock_guard lk(mu_);
    for (const auto& [name, st] : states) {
        auto was = mps_up_.find(name);
        if (events_ && opts_.node_events && was != mps_up_.end() && was->second != st.up) {
            std::size_t replicas = 0;
            if (served_)
                for (const auto& e : served_->entries)
                    if (e->name == name && e->state) replicas = e->state->resource.devices.size();
            auto n = mps_notice(name, st.up, st.reason, replicas);
            events_->record(std::move(n.type), std::move(n.reason), std::move(n.message));
        }
        mps_up_[name] = st.up;
    }
    if (!served_) return;
    for (auto& e : served_->entries)
        if (e->state && e->state->resource.mps) publish_locked(*e);
}

// (Re)starts the MPS watcher when the MPS resources, the root or the control binary changed. Its
// first check runs here, so the first device list already says whether each daemon answers.
void Plugin::watch_mps(const Config& cfg, const std::vector<std::string>& names) {
    std::string binary;
    if (!names.empty()) {
        auto found = mps::find_control_binary(opts_.mps_control_binary, cfg.nvidia_driver_root);
        if (found) {
            binary = *found;
        } else if (reported_.first("mps-binary:" + found.error().message)) {
            log::error("MPS: {}; the MPS resources stay Unhealthy", found.error().message);
        }
    }
    const std::string key = fmt::format("{}|{}|{}", cfg.mps_root, binary, fmt::join(names, ","));
    if (served_->mps_key == key && (served_->mps || names.empty())) return;
    if (served_->mps) served_->mps->stop();  // not under mu_: its callback takes mu_
    served_->mps.reset();
    served_->mps_key = key;
    {
        std::lock_guard lk(mu_);
        mps_up_.clear();
    }
    if (names.empty()) return;
    MpsWatcher::Options o;
    o.root.dir = cfg.mps_root;
    o.control_binary = binary;
    log::info("MPS: watching the control daemons of {} under {}", fmt::join(names, ", "), cfg.mps_root);
    served_->mps = std::make_unique<MpsWatcher>(names, o, [this](const auto& states) { on_mps(states); });
    served_->mps->start();
    auto snapshot = served_->mps->snapshot();
    std::lock_guard lk(mu_);
    for (const auto& [name, st] : snapshot) mps_up_[name] = st.up;
}

std::shared_ptr<const EntryState> Plugin::state_of(const Entry& e) const {
    std::lock_guard lk(mu_);
    return e.state;
}

Result<v1beta1::AllocateResponse> Plugin::allocate(const Entry& e, const v1beta1::AllocateRequest& req) const {
    const auto state = state_of(e);
    const Config& cfg = *state->config;
    const DevRootView dev_root(cfg.dev_root());
    v1beta1::AllocateResponse resp;
    for (const auto& c : req.container_requests()) {
        std::vector<std::string> ids(c.devices_ids().begin(), c.devices_ids().end());
        std::set<std::string> unhealthy;
        {
            std::lock_guard lk(mu_);
            for (const auto& id : ids)
                if (const Device* d = state->resource.find(id); d && unhealthy_locked(state->resource, *d))
                    unhealthy.insert(id);
        }
        auto answer = deviceplugin::allocate(state->resource, ids, cfg, unhealthy, dev_root);
        if (!answer) return std::unexpected(answer.error());
        auto* out = resp.add_container_responses();
        for (const auto& [k, v] : answer->envs) (*out->mutable_envs())[k] = v;
        for (const auto& [k, v] : answer->annotations) (*out->mutable_annotations())[k] = v;
        for (const auto& m : answer->mounts) {
            auto* pm = out->add_mounts();
            pm->set_container_path(m.container_path);
            pm->set_host_path(m.host_path);
            pm->set_read_only(m.read_only);
        }
        for (const auto& d : answer->devices) {
            auto* pd = out->add_devices();
            pd->set_container_path(d.container_path);
            pd->set_host_path(d.host_path);
            pd->set_permissions(d.permissions);
        }
        for (const auto& name : answer->cdi_devices) out->add_cdi_devices()->set_name(name);
    }
    return resp;
}

Result<v1beta1::PreferredAllocationResponse> Plugin::prefer(const Entry& e,
                                                            const v1beta1::PreferredAllocationRequest& req) const {
    const auto state = state_of(e);
    v1beta1::PreferredAllocationResponse resp;
    for (const auto& c : req.container_requests()) {
        std::vector<std::string> available(c.available_deviceids().begin(), c.available_deviceids().end());
        std::vector<std::string> must(c.must_include_deviceids().begin(), c.must_include_deviceids().end());
        auto ids = state->allocator->prefer(available, must, c.allocation_size());
        if (!ids) return std::unexpected(ids.error());
        auto* out = resp.add_container_responses();
        for (const auto& id : *ids) out->add_deviceids(id);
    }
    return resp;
}

// Discovers the node, builds the resources for `cfg` and brings the servers in line with them:
// a resource that disappeared sends an empty device list and stops, one whose devices changed
// publishes the new list over its stream (never a new registration: issue #12), a new one is
// served and registered; unchanged ones are left alone. Health is probed before any list goes
// out. Error policy by trigger:
//  - start: errors are returned (config errors as Code::parse: exit 2; NVML: exit 1 or retry);
//    a node the MIG strategy cannot serve (not_supported) is returned when fail_on_init_error,
//    else logged and nothing is served;
//  - sighup: any error is returned before anything changed (the running config stays);
//  - node_change: NVML errors are returned (nothing changed); a node the config cannot serve
//    any more is logged and nothing is served until the node or the config changes.
Result<std::vector<Resource>> Plugin::resources_for(const Config& cfg, const inventory::Node& node, Trigger trigger) {
    std::vector<std::string> warnings;
    auto resources = build_resources(node, cfg, &warnings);
    if (!resources) {
        const Error& err = resources.error();
        const bool fatal = trigger == Trigger::sighup || err.code == Code::parse ||
                           (trigger == Trigger::start && cfg.fail_on_init_error);
        if (trigger != Trigger::node_change && fatal) return std::unexpected(err);
        log::error("{}; serving no resource until the node or the configuration changes", err.message);
        resources = std::vector<Resource>{};
    }
    auto cap_problems = fill_mig_caps(*resources, cfg.proc_root);
    if (cfg.passes_device_specs()) warnings.insert(warnings.end(), cap_problems.begin(), cap_problems.end());
    if (auto missing = missing_device_nodes(*resources, cfg, DevRootView(cfg.dev_root())); !missing.empty())
        warnings.push_back(std::move(missing));
    auto extras = prepare_container_extras(cfg, extra_specs_);  // IMEX channels, GDS/MOFED/GDRCopy CDI specs
    if (!extras) return std::unexpected(extras.error());
    warnings.insert(warnings.end(), extras->begin(), extras->end());
    for (const auto& w : warnings)
        if (reported_.first(w)) log::warn("{}", w);
    log::info("{}", describe_resources(*resources, cfg));
    if (resources->empty() && reported_.first("no-resources"))
        log::warn("no GPUs to serve on this node: serving no resource (run `kgpu doctor` if this is unexpected)");
    return resources;
}

void Plugin::drop_unwanted(const std::map<std::string, Resource*>& wanted) {
    // Empty list first (so the kubelet drops the devices), then stop.
    std::vector<std::unique_ptr<Entry>> gone;
    {
        std::lock_guard lk(mu_);
        auto& es = served_->entries;
        for (auto it = es.begin(); it != es.end();) {
            if (wanted.contains((*it)->name)) {
                ++it;
            } else {
                gone.push_back(std::move(*it));
                it = es.erase(it);
            }
        }
    }
    for (auto& e : gone) {
        log::info("{} is no longer served: sending an empty device list, then stopping its server", e->name);
        if (served_->registrar) served_->registrar->remove(e->name);
        e->server->stop(true);
    }
}

std::vector<Entry*> Plugin::update_entries(const std::map<std::string, Resource*>& wanted, const Config& cfg,
                                           const inventory::Node& node) {
    if (!served_->registrar) {
        Registrar::Options ro;
        ro.kubelet_socket = cfg.kubelet_socket_path();
        ro.plugin_dir = cfg.device_plugin_path;
        served_->registrar = std::make_shared<Registrar>(ro);
        served_->registrar->start();
    }
    const auto config = std::make_shared<const Config>(cfg);
    std::vector<Entry*> fresh;
    for (auto& [name, r] : wanted) {
        auto state = std::make_shared<EntryState>();
        state->resource = std::move(*r);
        state->allocator = std::make_unique<Allocator>(state->resource, node.topology, cfg.shared_allocation_policy);
        state->config = config;
        std::lock_guard lk(mu_);
        auto it = std::find_if(served_->entries.begin(), served_->entries.end(),
                               [&](const auto& e) { return e->name == name; });
        if (it != served_->entries.end()) {
            Entry& e = **it;
            const bool changed = !(e.state->resource == state->resource);
            e.state = std::move(state);
            if (changed)
                log::info("{}: the devices changed (now {}): publishing the new list", name,
                          e.state->resource.devices.size());
            continue;
        }
        auto e = std::make_unique<Entry>();
        e->name = name;
        e->state = std::move(state);
        const std::string path = (fs::path(cfg.device_plugin_path) / socket_name(name)).string();
        Entry* raw = e.get();
        Handlers h;
        h.allocate = [this, raw](const v1beta1::AllocateRequest& req) { return allocate(*raw, req); };
        h.prefer = [this, raw](const v1beta1::PreferredAllocationRequest& req) { return prefer(*raw, req); };
        h.stream_ended = [weak = std::weak_ptr<Registrar>(served_->registrar), name](std::uint64_t id, bool by_peer) {
            if (auto r = weak.lock()) r->stream_ended(name, id, by_peer);
        };
        e->server = std::make_shared<ResourceServer>(name, path, std::move(h));
        fresh.push_back(raw);
        served_->entries.push_back(std::move(e));
    }
    return fresh;
}

void Plugin::watch_health(const Config& cfg, const nvml::Session& session, const std::vector<std::string>& mps_names) {
    // MPS daemons first (their first check is synchronous, like the GPUs' probes); then a new
    // monitor (started first: it probes every GPU before the snapshot, so the first list already
    // says what the probes see, issue #12), or the running one told about the rediscovered node.
    watch_mps(cfg, mps_names);
    if (!served_->health) {
        served_->health = std::make_unique<HealthMonitor>(
            session, served_->node, cfg.health, [this](const std::vector<GpuHealth>& h) { on_health(h); },
            opts_.probe_interval,
            [this](unsigned) {
                const std::uint64_t one = 1;
                if (mig_fd_) (void)!::write(mig_fd_.get(), &one, sizeof one);
            },
            opts_.idle_probe_interval);
        served_->health->start();
    } else {
        served_->health->update_node(served_->node);
    }
    // The snapshot under mu_: the health thread's on_health takes mu_ after its own snapshot, so
    // one taken outside could overwrite a newer state with an older one (and republish a GPU that
    // just turned Unhealthy as Healthy). The monitor never calls out under its lock.
    std::lock_guard lk(mu_);
    auto snapshot = served_->health->snapshot();
    report_health_locked(snapshot);  // a GPU Unhealthy at start is worth an Event too
    health_ = std::move(snapshot);
}

Status Plugin::apply(const Config& cfg, Trigger trigger) {
    const Config& old = opts_.config;
    const bool same_driver = served_ && served_->session && cfg.nvml_library == old.nvml_library &&
                             cfg.nvidia_driver_root == old.nvidia_driver_root;
    std::optional<nvml::Session> session;
    if (same_driver) {
        session = *served_->session;
    } else {
        auto s = nvml::open_session({cfg.nvml_library, cfg.nvidia_driver_root});
        if (!s) return std::unexpected(s.error());
        session = std::move(*s);
    }
    auto node = inventory::discover(*session);
    if (!node) return std::unexpected(node.error());
    auto resources = resources_for(cfg, *node, trigger);
    if (!resources) return std::unexpected(resources.error());

    // What the servers, the registration and the health monitor are built on: a change restarts
    // everything (as before a reload).
    if (served_ && (!same_driver || cfg.device_plugin_path != old.device_plugin_path ||
                    cfg.kubelet_socket_path() != old.kubelet_socket_path() || !same_health(cfg.health, old.health))) {
        log::info("the driver, the socket paths or the health policy changed: restarting every server");
        stop_serving(false);
    }
    // The CDI strategies name devices `nvidia.com/gpu=<index|UUID>`; the runtime resolves those
    // names from this spec, (re)written whenever the node is (re)discovered (cdi_refresh.h).
    if (CdiSpecRefresher::wanted(cfg)) write_cdi_spec(*node, cfg, loaded_driver_version(cfg.proc_root));

    if (!served_) served_.emplace();
    served_->session = *session;
    served_->node = *node;
    std::map<std::string, Resource*> wanted;
    std::vector<std::string> mps_names;
    for (auto& r : *resources) {
        wanted[r.name] = &r;
        if (r.mps) mps_names.push_back(r.name);
    }
    // 1. Resources that disappeared; 2. changed and new ones; 3. health; then every list is
    //    published and the new servers start.
    drop_unwanted(wanted);
    opts_.config = cfg;
    const std::vector<Entry*> fresh = update_entries(wanted, cfg, *node);
    watch_health(cfg, *session, mps_names);
    {
        std::lock_guard lk(mu_);
        for (auto& e : served_->entries) publish_locked(*e);
    }
    for (Entry* e : fresh) {
        if (auto st = e->server->start(); !st) {
            log::error("{}", st.error().message);
        } else {
            log::info("serving {} ({} devices) on {}", e->name, e->state->resource.devices.size(),
                      e->server->socket_path());
        }
        // A server that could not start is retried by the control loop; its Register fails until then.
        served_->registrar->add(e->server);
    }
    return {};
}

// SIGTERM and restarts: registration stops first (a Register in flight is cancelled), then every
// server (streams ended, sockets removed), then health, whose thread may be waiting on NVML.
bool Plugin::stop_serving(bool empty_lists, bool exiting) {
    if (!served_) return true;
    // The health thread ends at its next NVML wake-up: let that wait run out while the rest stops.
    if (served_->health) served_->health->request_stop();
    if (served_->registrar) served_->registrar->stop();
    std::vector<std::unique_ptr<Entry>> entries;
    {
        std::lock_guard lk(mu_);
        entries.swap(served_->entries);
    }
    // Outside mu_: stopping waits for calls in flight, which take mu_.
    for (auto& e : entries)
        if (e->server) e->server->stop(empty_lists);
    if (served_->mps) served_->mps->stop();
    if (served_->health) {
        // At exit there is nothing left for the health thread to do: sockets and streams are gone.
        // 20 ms covers the common case (its wait returns at once once an event or its timeout
        // comes); otherwise the process ends without it rather than wait up to kEventWait.
        if (exiting && !served_->health->stop_within(std::chrono::milliseconds(20))) return false;
        served_->health->stop();
    }
    served_.reset();
    return true;
}

// Servers that could not start (e.g. the directory was missing) are tried again.
void Plugin::start_servers() {
    if (!served_) return;
    for (auto& e : served_->entries) {
        if (e->server->running()) continue;
        if (auto st = e->server->start(); !st) {
            log::debug("{}", st.error().message);
            continue;
        }
        log::info("serving {} on {}", e->name, e->server->socket_path());
        {
            std::lock_guard lk(mu_);
            publish_locked(*e);
        }
        served_->registrar->served_again(e->name);
    }
}

bool Plugin::open_control_fds(const sigset_t& mask) {
    // Without the signalfd SIGTERM would stay blocked for good; without the eventfd a MIG
    // change would go unseen. Neither failure is left to show later.
    signal_fd_.reset(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!signal_fd_) {
        log::error("signalfd for SIGTERM, SIGINT and SIGHUP: {}", std::strerror(errno));
        return false;
    }
    mig_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!mig_fd_) {
        log::error("eventfd for MIG configuration changes: {}", std::strerror(errno));
        return false;
    }
    return true;
}

bool Plugin::wait_for_plugin_dir() {
    // The kubelet makes its device-plugin directory when it starts; the plugin never does (run by
    // hand on a host without a kubelet it would leave a kubelet directory behind, issue #23). It
    // says the directory is missing and waits for it; SIGTERM and SIGINT still stop it.
    // Missing, that is: a directory this process may not look into is left to the bind to report.
    const Config& cfg = opts_.config;
    auto missing = [&] {
        std::error_code ec;
        return !fs::exists(cfg.device_plugin_path, ec) && !ec;
    };
    if (!missing()) return true;
    log::warn("{} does not exist: no kubelet has started on this host (the kubelet creates it), or "
              "--device-plugin-path names another directory; waiting for it",
              cfg.device_plugin_path);
    for (;;) {
        pollfd p{signal_fd_.get(), POLLIN, 0};
        if (::poll(&p, 1, 500) > 0 && (p.revents & POLLIN)) {
            signalfd_siginfo si{};
            bool stop = false;
            while (::read(signal_fd_.get(), &si, sizeof si) == sizeof si)
                if (si.ssi_signo != SIGHUP) stop = true;  // SIGHUP: the config is read when serving starts
            if (stop) {
                log::info("signal {}: stopping", si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
                return false;
            }
        }
        if (!missing()) break;
    }
    log::info("{} exists now: starting", cfg.device_plugin_path);
    return true;
}

bool Plugin::watch_plugin_dirs() {
    const Config& cfg = opts_.config;
    inotify_fd_.reset(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    if (!inotify_fd_) {
        log::error("inotify for {}: {}", cfg.device_plugin_path, std::strerror(errno));
        return false;
    }
    std::set<std::string> watched;
    for (const auto& dir : {fs::path(cfg.device_plugin_path), fs::path(cfg.kubelet_socket_path()).parent_path()}) {
        if (watched.contains(dir.string())) continue;
        const int wd =
            ::inotify_add_watch(inotify_fd_.get(), dir.c_str(), IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM);
        if (wd < 0) {
            log::error("cannot watch {}: {}", dir.string(), std::strerror(errno));
            return false;
        }
        main_wds_.insert(wd);
        watched.insert(dir.string());
    }
    return true;
}

int Plugin::try_serving(bool first) {
    auto st = apply(opts_.config, Trigger::start);
    if (st) {
        if (nvml_failed_logged_) log::info("NVML is available now: serving");
        nvml_failed_logged_ = false;
        return -1;
    }
    if (st.error().code == Code::parse) {
        log::error("{}", st.error().message);
        return 2;
    }
    if (st.error().code == Code::not_supported) {
        log::error("{} (or set --fail-on-init-error=false to keep running without this resource)", st.error().message);
        return 1;
    }
    next_init_ = Clock::now() + opts_.init_retry;
    if (first && opts_.config.fail_on_init_error) {
        log::error("{}. Run `kgpu doctor` to diagnose, or set --fail-on-init-error=false to keep running "
                   "without GPUs",
                   st.error().message);
        return 1;
    }
    if (first) {
        log::warn("{}; serving no resource and retrying every {}s (run `kgpu doctor` to diagnose)", st.error().message,
                  std::chrono::duration_cast<std::chrono::seconds>(opts_.init_retry).count());
        nvml_failed_logged_ = true;
    } else {
        log::debug("NVML still unavailable: {}", st.error().message);
    }
    return -1;
}

int Plugin::finish(int code) {
    // The API threads are told first and joined last: a request in flight (5 s per step at
    // most) must not hold up the sockets' removal and the streams' end.
    if (watch_) watch_->request_stop();
    if (events_) {
        events_->request_stop();  // what is still queued is dropped (counted as not written)
        const auto st = events_->stats();
        log::info("node events: {} created, {} updated, {} rate-limited, {} not written", st.created, st.updated,
                  st.rate_limited, st.failed + st.queue_full);
    }
    const bool joined = stop_serving(false, /*exiting=*/true);
    if (joined) {
        if (watch_) watch_->stop();
        if (events_) events_->stop();
        label_fd_.reset();  // after the watch: its callback writes it
    }
    if (!joined) {
        // The health thread is inside nvmlEventSetWait, which nothing can interrupt: end the
        // process now (its sockets are removed and its streams ended) instead of waiting out
        // the wait. No destructor may run while that thread is inside NVML.
        log::debug("the health thread is inside NVML's event wait: exiting without it");
        std::_Exit(code);
    }
    return code;
}

int Plugin::control_loop() {
    const int sfd = signal_fd_.get(), ifd = inotify_fd_.get();
    for (;;) {
        pollfd fds[4] = {{sfd, POLLIN, 0}, {ifd, POLLIN, 0}, {mig_fd_.get(), POLLIN, 0}, {label_fd_.get(), POLLIN, 0}};
        int n = ::poll(fds, label_fd_ ? 4 : 3, static_cast<int>(next_timeout().count()));
        // What makes the loop work (not the kubelet's checkpoint writes in the inotify'd directory).
        if (n > 0 && ((fds[0].revents | fds[2].revents) & POLLIN || (label_fd_ && (fds[3].revents & POLLIN))))
            release_later();
        maybe_start_watch();  // a second config in the directory (a ConfigMap edit) starts the watch
        watch_paused(ifd);    // the paused-GPUs file's directory, once it exists
        if (label_fd_ && (fds[3].revents & POLLIN)) {
            std::uint64_t count = 0;
            (void)!::read(label_fd_.get(), &count, sizeof count);
            std::optional<std::string> seen;
            {
                std::lock_guard lk(label_mu_);
                seen = label_seen_;
            }
            if (seen) on_config_label(*seen);
        }
        if (n < 0 && errno != EINTR) return 1;
        if (fds[0].revents & POLLIN) {
            signalfd_siginfo si{};
            while (::read(sfd, &si, sizeof si) == sizeof si) {
                if (si.ssi_signo == SIGHUP) {
                    reload();
                } else {
                    log::info("signal {}: stopping", si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
                    return 0;
                }
            }
        }
        if (fds[1].revents & POLLIN) handle_inotify(ifd);
        if (fds[2].revents & POLLIN) {
            std::uint64_t count = 0;
            (void)!::read(mig_fd_.get(), &count, sizeof count);
            if (served_) {
                log::info("MIG configuration changed: rediscovering the node");
                if (auto st = apply(opts_.config, Trigger::node_change); !st)
                    log::error("after the MIG configuration change: {}", st.error().message);
            }
        }
        if (!served_ && Clock::now() >= next_init_) {
            if (int code = try_serving(false); code >= 0) return code;
            if (served_) release_later();
        }
        if (served_) start_servers();
        if (served_) cdi_refresh_.poll(served_->node, opts_.config);
        if (served_) maybe_release_pages();
    }
}

int Plugin::run() {
    // Blocked before any thread starts (the Event recorder's below): only the signalfd sees them.
    const sigset_t mask = process::block_signals({SIGTERM, SIGINT, SIGHUP});

    // The API server first: with a config directory the config is the one the node label names,
    // and everything below (the device-plugin directory, the sockets) follows that config.
    start_node_reporting();
    if (!opts_.config_source.srcdir.empty())
        if (int code = choose_initial_config(); code >= 0) return code;  // the recorder stops with the plugin
    log::info("kgpu device-plugin starting with\n{}", describe(opts_.config));
    for (const auto& w : opts_.config.warnings) log::warn("{}", w);
    warn_unknown_keys(opts_.config);

    // Start-up, each step's failure an exit code; from the first served list on, every way out
    // goes through finish().
    if (!open_control_fds(mask)) return 1;
    if (!wait_for_plugin_dir()) return 0;
    if (!watch_plugin_dirs()) return 1;
    maybe_start_watch();
    watch_paused(inotify_fd_.get());  // before the first list: a GPU paused now is never offered
    if (int code = try_serving(true); code >= 0) return finish(code);
    release_later();
    return finish(control_loop());
}
}  // namespace detail

int run_device_plugin(PluginOptions options) { return detail::Plugin(std::move(options)).run(); }

}  // namespace kgpu::deviceplugin
