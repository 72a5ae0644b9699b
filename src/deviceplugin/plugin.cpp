// The device plugin's state: devices and health as the kubelet sees them, Allocate and
// GetPreferredAllocation, applying a configuration. Its life (serving, signals, teardown) is in
// plugin_run.cpp.
#include "deviceplugin/plugin.h"

#include <signal.h>
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
        ro.foreign_probe = opts_.foreign_probe;
        ro.foreign_grace = opts_.foreign_grace;
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
        HealthConfig policy = cfg.health;
        if (opts_.recovery_period.count() > 0) policy.recovery_period = opts_.recovery_period;
        served_->health = std::make_unique<HealthMonitor>(
            session, served_->node, policy, [this](const std::vector<GpuHealth>& h) { on_health(h); },
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

}  // namespace detail

}  // namespace kgpu::deviceplugin
