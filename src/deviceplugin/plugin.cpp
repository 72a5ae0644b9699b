#include "deviceplugin/plugin.h"

#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "cdi/spec.h"
#include "common/files.h"
#include "common/log.h"
#include "deviceplugin/allocate.h"
#include "deviceplugin/allocator.h"
#include "deviceplugin/health.h"
#include "deviceplugin/resources.h"
#include "deviceplugin/server.h"
#include "inventory/discovery.h"
#include "nvml/library.h"

namespace kgpu::deviceplugin {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Everything that exists while NVML is up and resources are served. Rebuilt on SIGHUP.
struct Served {
    struct Entry {
        Resource resource;
        std::unique_ptr<Allocator> allocator;
        std::unique_ptr<ResourceServer> server;
        bool registered = false;
        std::string last_error;  // logged once per change
        Clock::time_point next_try{};
        std::chrono::milliseconds backoff{250};
    };
    inventory::Node node;
    std::vector<std::unique_ptr<Entry>> entries;
    std::unique_ptr<HealthMonitor> health;
};

class Plugin {
public:
    explicit Plugin(PluginOptions opts) : opts_(std::move(opts)) {}
    int run();

private:
    Status start_serving();
    void write_cdi_spec(const inventory::Node& node) const;
    void stop_serving(bool empty_lists);
    void try_register_all(bool force);
    void on_health(const std::vector<GpuHealth>& health);
    void publish_locked(Served::Entry& e);
    v1beta1::ListAndWatchResponse device_list(const Resource& r) const;
    Result<v1beta1::AllocateResponse> allocate(const Served::Entry& e, const v1beta1::AllocateRequest& req) const;
    Result<v1beta1::PreferredAllocationResponse> prefer(const Served::Entry& e,
                                                        const v1beta1::PreferredAllocationRequest& req) const;
    void reload();
    void handle_inotify(int fd);
    std::chrono::milliseconds next_timeout() const;

    PluginOptions opts_;
    std::optional<Served> served_;
    bool nvml_failed_logged_ = false;
    Clock::time_point next_init_{};

    // Guards served_->entries' servers and the health map against the health thread.
    mutable std::mutex mu_;
    std::set<std::string> unhealthy_ids_;    // guarded by mu_
    std::map<std::string, std::string> unhealthy_reason_;
};

v1beta1::ListAndWatchResponse Plugin::device_list(const Resource& r) const {
    v1beta1::ListAndWatchResponse out;
    for (const auto& d : r.devices) {
        auto* dev = out.add_devices();
        dev->set_id(d.id);
        dev->set_health(unhealthy_ids_.contains(d.id) ? "Unhealthy" : "Healthy");
        if (d.numa) dev->mutable_topology()->add_nodes()->set_id(*d.numa);
    }
    return out;
}

void Plugin::publish_locked(Served::Entry& e) {
    if (e.server) e.server->publish(device_list(e.resource));
}

void Plugin::on_health(const std::vector<GpuHealth>& health) {
    std::lock_guard lk(mu_);
    if (!served_) return;
    unhealthy_ids_.clear();
    for (auto& e : served_->entries) {
        for (const auto& d : e->resource.devices) {
            if (d.gpu_index < health.size() && !health[d.gpu_index].healthy) unhealthy_ids_.insert(d.id);
        }
        publish_locked(*e);
    }
}

Result<v1beta1::AllocateResponse> Plugin::allocate(const Served::Entry& e, const v1beta1::AllocateRequest& req) const {
    std::set<std::string> unhealthy;
    {
        std::lock_guard lk(mu_);
        unhealthy = unhealthy_ids_;
    }
    const DevRootView dev_root(opts_.config.dev_root());
    v1beta1::AllocateResponse resp;
    for (const auto& c : req.container_requests()) {
        std::vector<std::string> ids(c.devices_ids().begin(), c.devices_ids().end());
        auto answer = deviceplugin::allocate(e.resource, ids, opts_.config, unhealthy, dev_root);
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

Result<v1beta1::PreferredAllocationResponse> Plugin::prefer(const Served::Entry& e,
                                                            const v1beta1::PreferredAllocationRequest& req) const {
    v1beta1::PreferredAllocationResponse resp;
    for (const auto& c : req.container_requests()) {
        std::vector<std::string> available(c.available_deviceids().begin(), c.available_deviceids().end());
        std::vector<std::string> must(c.must_include_deviceids().begin(), c.must_include_deviceids().end());
        auto ids = e.allocator->prefer(available, must, c.allocation_size());
        if (!ids) return std::unexpected(ids.error());
        auto* out = resp.add_container_responses();
        for (const auto& id : *ids) out->add_deviceids(id);
    }
    return resp;
}

// The CDI strategies name devices `nvidia.com/gpu=<index|UUID>`; the runtime resolves those names
// from a spec file, which we (re)write at every start so it matches what we advertise.
void Plugin::write_cdi_spec(const inventory::Node& node) const {
    const Config& cfg = opts_.config;
    if (node.gpus.empty()) return;
    cdi::SpecOptions so;
    so.driver_root = cfg.nvidia_driver_root;
    so.dev_root = cfg.dev_root();
    auto spec = cdi::generate(node, so);
    const fs::path path = fs::path(cfg.cdi_spec_dir) / "kgpu-nvidia-gpu.yaml";
    if (!spec) {
        log::error("cannot generate the CDI spec for {}: {}; CDI device names will not resolve", path.string(),
                   spec.error().message);
        return;
    }
    std::error_code ec;
    fs::create_directories(cfg.cdi_spec_dir, ec);
    if (auto st = files::write_atomic(path, cdi::to_yaml(*spec)); !st) {
        log::error("{}; CDI device names will not resolve", st.error().message);
        return;
    }
    log::info("wrote the CDI spec {}", path.string());
}

Status Plugin::start_serving() {
    const Config& cfg = opts_.config;
    auto session = nvml::open_session({cfg.nvml_library, cfg.nvidia_driver_root});
    if (!session) return std::unexpected(session.error());
    auto node = inventory::discover(*session);
    if (!node) return std::unexpected(node.error());

    Served s;
    s.node = std::move(*node);
    if (cfg.uses(DeviceListStrategy::cdi_annotations) || cfg.uses(DeviceListStrategy::cdi_cri)) write_cdi_spec(s.node);
    std::vector<std::string> warnings;
    auto resources = build_resources(s.node, cfg, &warnings);
    for (const auto& w : warnings) log::warn("{}", w);
    if (resources.empty() || std::all_of(resources.begin(), resources.end(), [](const Resource& r) { return r.devices.empty(); }))
        log::warn("no GPUs found on this node: serving no resource (run `kgpu doctor` if this is unexpected)");

    {
        std::lock_guard lk(mu_);
        unhealthy_ids_.clear();
    }
    for (auto& r : resources) {
        if (r.devices.empty()) continue;  // a resource with zero devices is not served
        auto e = std::make_unique<Served::Entry>();
        e->resource = std::move(r);
        e->allocator = std::make_unique<Allocator>(e->resource, s.node.topology);
        const std::string path = (fs::path(cfg.device_plugin_path) / socket_name(e->resource.name)).string();
        Served::Entry* raw = e.get();
        Handlers h;
        h.allocate = [this, raw](const v1beta1::AllocateRequest& req) { return allocate(*raw, req); };
        h.prefer = [this, raw](const v1beta1::PreferredAllocationRequest& req) { return prefer(*raw, req); };
        e->server = std::make_unique<ResourceServer>(e->resource.name, path, std::move(h));
        for (const auto& d : e->resource.devices) {
            if (d.lost) {
                std::lock_guard lk(mu_);
                unhealthy_ids_.insert(d.id);
            }
        }
        s.entries.push_back(std::move(e));
    }
    {
        std::lock_guard lk(mu_);
        served_ = std::move(s);
        for (auto& e : served_->entries) {
            publish_locked(*e);
            if (auto st = e->server->start(); !st) {
                log::error("{}", st.error().message);
                continue;
            }
            log::info("serving {} ({} devices) on {}", e->resource.name, e->resource.devices.size(),
                      e->server->socket_path());
        }
    }
    served_->health = std::make_unique<HealthMonitor>(
        std::move(*session), served_->node, cfg.health, [this](const std::vector<GpuHealth>& h) { on_health(h); },
        opts_.probe_interval);
    served_->health->start();
    try_register_all(true);
    return {};
}

void Plugin::stop_serving(bool empty_lists) {
    if (!served_) return;
    if (served_->health) served_->health->stop();
    std::lock_guard lk(mu_);
    for (auto& e : served_->entries)
        if (e->server) e->server->stop(empty_lists);
    served_.reset();
}

void Plugin::try_register_all(bool force) {
    if (!served_) return;
    const auto now = Clock::now();
    const std::string kubelet = opts_.config.kubelet_socket_path();
    for (auto& e : served_->entries) {
        if (!e->server->running()) {
            if (auto st = e->server->start(); !st) {
                log::error("{}", st.error().message);
                continue;
            }
        }
        if (e->registered && !force) continue;
        if (!force && now < e->next_try) continue;
        const std::string endpoint = fs::path(e->server->socket_path()).filename().string();
        auto st = register_with_kubelet(kubelet, endpoint, e->resource.name);
        if (st) {
            e->registered = true;
            e->backoff = std::chrono::milliseconds(250);
            e->last_error.clear();
            log::info("registered {} with the kubelet at {} (endpoint {})", e->resource.name, kubelet, endpoint);
        } else {
            e->registered = false;
            if (st.error().message != e->last_error) {
                log::warn("{}; retrying with backoff until the kubelet answers", st.error().message);
                e->last_error = st.error().message;
            }
            e->next_try = now + e->backoff;
            e->backoff = std::min(e->backoff * 2, std::chrono::milliseconds(5000));
        }
    }
}

void Plugin::reload() {
    Config base;
    if (!opts_.config_file.empty()) {
        auto file = load_config_file(opts_.config_file);
        if (!file) {
            log::error("SIGHUP: keeping the running configuration: {}", file.error().message);
            return;
        }
        base = std::move(*file);
    }
    auto cfg = resolve(std::move(base), opts_.env, opts_.flags);
    if (!cfg) {
        log::error("SIGHUP: keeping the running configuration: {}", cfg.error().message);
        return;
    }
    log::info("SIGHUP: reloading with\n{}", describe(*cfg));
    stop_serving(false);
    opts_.config = std::move(*cfg);
    if (auto st = start_serving(); !st) {
        log::error("after SIGHUP: {}", st.error().message);
        next_init_ = Clock::now() + opts_.init_retry;
    }
}

void Plugin::handle_inotify(int fd) {
    alignas(struct inotify_event) char buf[8192];
    const std::string kubelet_name = fs::path(opts_.config.kubelet_socket_path()).filename().string();
    bool kubelet_back = false, ours_gone = false;
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) break;
        for (char* p = buf; p < buf + n;) {
            auto* ev = reinterpret_cast<struct inotify_event*>(p);
            p += sizeof(struct inotify_event) + ev->len;
            if (ev->len == 0) continue;
            const std::string name = ev->name;
            if (name == kubelet_name && (ev->mask & (IN_CREATE | IN_MOVED_TO))) kubelet_back = true;
            if ((ev->mask & (IN_DELETE | IN_MOVED_FROM)) && served_) {
                for (auto& e : served_->entries)
                    if (fs::path(e->server->socket_path()).filename() == name) ours_gone = true;
            }
        }
    }
    if (!served_) return;
    if (kubelet_back) log::info("{} was created again (kubelet restart): re-registering", kubelet_name);
    if (ours_gone) log::warn("a plugin socket was deleted: serving it again and re-registering");
    if (!kubelet_back && !ours_gone) return;
    {
        std::lock_guard lk(mu_);
        for (auto& e : served_->entries) {
            std::error_code ec;
            // The kubelet deletes every socket when it restarts: serve ours again before registering.
            if (!fs::exists(e->server->socket_path(), ec)) {
                e->server->stop();
                if (auto st = e->server->start(); !st) log::error("{}", st.error().message);
                publish_locked(*e);
            }
            e->registered = false;
        }
    }
    // Registration is a blocking RPC: never under mu_, which Allocate and the health thread take.
    try_register_all(true);
}

std::chrono::milliseconds Plugin::next_timeout() const {
    using namespace std::chrono;
    auto now = Clock::now();
    auto soonest = now + seconds(60);
    if (!served_) soonest = std::min(soonest, next_init_);
    if (served_)
        for (const auto& e : served_->entries)
            if (!e->registered) soonest = std::min(soonest, e->next_try);
    return std::max(milliseconds(0), duration_cast<milliseconds>(soonest - now));
}

int Plugin::run() {
    const Config& cfg = opts_.config;
    log::info("kgpu device-plugin starting with\n{}", describe(cfg));
    for (const auto& w : cfg.warnings) log::warn("{}", w);

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    // Blocked before any thread starts, so every thread inherits the mask and only the signalfd
    // sees these signals.
    pthread_sigmask(SIG_BLOCK, &mask, nullptr);
    int sfd = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

    std::error_code ec;
    fs::create_directories(cfg.device_plugin_path, ec);
    int ifd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    std::set<std::string> watched;
    for (const auto& dir : {fs::path(cfg.device_plugin_path), fs::path(cfg.kubelet_socket_path()).parent_path()}) {
        if (watched.contains(dir.string())) continue;
        if (ifd < 0 || ::inotify_add_watch(ifd, dir.c_str(), IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM) < 0) {
            log::error("cannot watch {}: {}", dir.string(), std::strerror(errno));
            return 1;
        }
        watched.insert(dir.string());
    }

    if (auto st = start_serving(); !st) {
        if (cfg.fail_on_init_error) {
            log::error("{}. Run `kgpu doctor` to diagnose, or set --fail-on-init-error=false to keep running "
                       "without GPUs",
                       st.error().message);
            return 1;
        }
        log::warn("{}; serving no resource and retrying every {}s (run `kgpu doctor` to diagnose)", st.error().message,
                  std::chrono::duration_cast<std::chrono::seconds>(opts_.init_retry).count());
        nvml_failed_logged_ = true;
        next_init_ = Clock::now() + opts_.init_retry;
    }

    for (;;) {
        pollfd fds[2] = {{sfd, POLLIN, 0}, {ifd, POLLIN, 0}};
        int n = ::poll(fds, 2, static_cast<int>(next_timeout().count()));
        if (n < 0 && errno != EINTR) break;
        if (fds[0].revents & POLLIN) {
            signalfd_siginfo si{};
            while (::read(sfd, &si, sizeof si) == sizeof si) {
                if (si.ssi_signo == SIGHUP) {
                    reload();
                } else {
                    log::info("signal {}: stopping", si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
                    stop_serving(false);
                    ::close(ifd);
                    ::close(sfd);
                    return 0;
                }
            }
        }
        if (fds[1].revents & POLLIN) handle_inotify(ifd);
        if (!served_ && Clock::now() >= next_init_) {
            if (auto st = start_serving(); !st) {
                next_init_ = Clock::now() + opts_.init_retry;
                log::debug("NVML still unavailable: {}", st.error().message);
            } else if (nvml_failed_logged_) {
                log::info("NVML is available now: serving");
                nvml_failed_logged_ = false;
            }
        }
        if (served_) try_register_all(false);
    }
    stop_serving(false);
    return 1;
}

}  // namespace

int run_device_plugin(PluginOptions options) { return Plugin(std::move(options)).run(); }

}  // namespace kgpu::deviceplugin
