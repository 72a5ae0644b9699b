// The device plugin's configuration sources and watches (plugin_impl.h): the config file and
// SIGHUP, the node label naming a config, inotify on the plugin and paused-GPUs directories,
// the Node reporting set-up and the control loop's next timeout.
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

namespace kgpu::deviceplugin::detail {

Result<Config> Plugin::read_config() const {
    Config base;
    if (!opts_.config_file.empty()) {
        auto file = load_config_file(opts_.config_file);
        if (!file) return std::unexpected(file.error());
        base = std::move(*file);
    }
    return resolve(std::move(base), opts_.env, opts_.flags);
}

bool Plugin::reload() {
    auto cfg = read_config();
    if (!cfg) {
        log::error("SIGHUP: keeping the running configuration: {}", cfg.error().message);
        return false;
    }
    for (const auto& w : cfg->warnings) log::warn("{}", w);
    warn_unknown_keys(*cfg);
    log::info("SIGHUP: reloading with\n{}", describe(*cfg));
    if (!served_) {
        // NVML was not up: the retry loop uses the new config.
        opts_.config = std::move(*cfg);
        next_init_ = Clock::now();
        return true;
    }
    if (auto st = apply(*cfg, Trigger::sighup); !st) {
        log::error("SIGHUP: keeping the running configuration: {}", st.error().message);
        if (!served_) next_init_ = Clock::now() + opts_.init_retry;
        return false;
    }
    return true;
}

void Plugin::on_config_label(const std::string& value) {
    const ConfigSource& src = opts_.config_source;
    auto names = config_names(src.srcdir);
    if (!names) {
        log::error("{}; keeping the running configuration", names.error().message);
        return;
    }
    auto choice = choose_config(src, *names, value);
    if (!choice) {
        log::error("{}; keeping the running configuration", choice.error().message);
        return;
    }
    for (const auto& w : choice->warnings)
        if (config_warned_.first(w)) log::warn("{}", w);
    if (choice->path != opts_.config_file) {
        log::info("config '{}' ({}): applying {}", choice->name, choice->why,
                  choice->path.empty() ? std::string("the built-in defaults") : choice->path);
        const std::string before = opts_.config_file;
        opts_.config_file = choice->path;
        if (!reload()) {
            opts_.config_file = before;
            return;
        }
    }
    if (events_ && choice->name != label_applied_) {
        if (valid_label_value(choice->name)) {
            events_->label(kConfigStateLabel, choice->name);
            label_applied_ = choice->name;
        } else if (config_warned_.first("state:" + choice->name)) {
            log::warn("config '{}' applied, but its name is not a label value: {} is not set", choice->name, kConfigStateLabel);
        }
    }
}

void Plugin::maybe_start_watch() {
    if (!watch_ || watch_started_) return;
    auto names = config_names(opts_.config_source.srcdir);
    if (!names || names->size() < 2) return;
    log::info("{} configs in {}: following node {}'s label {}", names->size(), opts_.config_source.srcdir,
              opts_.node_name, opts_.config_source.node_label);
    watch_->start();
    watch_started_ = true;
}

int Plugin::choose_initial_config() {
    const ConfigSource& src = opts_.config_source;
    std::string label;
    // One config (the manifests' config.yaml alone): no label can pick another, and reading it
    // would load OpenSSL for nothing (its pages stay in the plugin's RSS).
    auto names = config_names(src.srcdir);
    if (!names) {
        log::error("{}", names.error().message);
        return 2;
    }
    if (api_ && names->size() > 1) {
        if (auto value = kube::read_node_label(*api_, opts_.node_name, src.node_label))
            label = *value;
        else
            log::warn("per-node config: cannot read node {}'s label {} ({}); choosing without it until the watch "
                      "sees it",
                      opts_.node_name, src.node_label, value.error().message);
    }
    auto choice = choose_config(src, *names, label);
    if (!choice) {
        log::error("{}", choice.error().message);
        return 2;
    }
    for (const auto& w : choice->warnings)
        if (config_warned_.first(w)) log::warn("{}", w);
    log::info("config '{}' ({}): {}", choice->name, choice->why,
              choice->path.empty() ? std::string("the built-in defaults") : choice->path);
    opts_.config_file = choice->path;
    auto cfg = read_config();
    if (!cfg) {
        log::error("{}", cfg.error().message);
        return 2;
    }
    opts_.config = std::move(*cfg);  // its warnings are logged with the start-up dump
    // The state label only where a label can pick something (with one config it would load
    // OpenSSL at start for a label that never changes).
    if (events_ && names->size() > 1 && valid_label_value(choice->name)) {
        events_->label(kConfigStateLabel, choice->name);
        label_applied_ = choice->name;
    }
    return -1;
}

void Plugin::warn_unknown_keys(const Config& cfg) {
    for (const auto& k : cfg.unknown_keys)
        if (unknown_warned_.first(k.source + "\n" + k.key)) log::warn("{}", unknown_key_warning(k));
}

// Events in the device-plugin directory (and kubelet.sock's): our socket deleted (the kubelet
// restarting, or someone else) is served again at once; kubelet.sock and other plugins' sockets
// go to the registrar, which turns them into at most one Register per resource and kubelet.
void Plugin::handle_inotify(int fd) {
    alignas(struct inotify_event) char buf[8192];
    const std::string kubelet_name = fs::path(opts_.config.kubelet_socket_path()).filename().string();
    bool kubelet_event = false, ours_gone = false, paused_event = false;
    const std::string paused_name = fs::path(opts_.paused_gpus_file).filename().string();
    std::set<std::string> others;
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) break;
        for (char* p = buf; p < buf + n;) {
            auto* ev = reinterpret_cast<struct inotify_event*>(p);
            p += sizeof(struct inotify_event) + ev->len;
            // The paused file's directory gone (its watch with it), or events lost: watch it
            // again (next wake-up) and read the file again.
            if (ev->mask & IN_Q_OVERFLOW) paused_event = true;
            if (ev->wd == paused_wd_ && (ev->mask & IN_IGNORED) && !main_wds_.contains(ev->wd)) {
                paused_wd_ = -1;
                paused_event = true;
            }
            if (ev->len == 0) continue;
            const std::string name = ev->name;
            if (ev->wd == paused_wd_ && name == paused_name) {
                paused_event = true;
                continue;
            }
            if (!main_wds_.contains(ev->wd)) continue;  // the paused file's directory, another file
            if (name == kubelet_name) {
                kubelet_event = true;
                continue;
            }
            bool ours = false;
            if (served_)
                for (auto& e : served_->entries)
                    if (fs::path(e->server->socket_path()).filename() == name) ours = true;
            if (ours) {
                ours_gone |= (ev->mask & (IN_DELETE | IN_MOVED_FROM)) != 0;
            } else {
                others.insert(name);
            }
        }
    }
    if (paused_event) read_paused();
    if (!served_) return;
    if (ours_gone) {
        for (auto& e : served_->entries) {
            std::error_code ec;
            // Our own stop() removes the socket too: only a socket missing now was taken from us.
            // Not under mu_: stopping waits for calls in flight, which take mu_.
            if (!e->server->running() || fs::exists(e->server->socket_path(), ec)) continue;
            log::info("{} was deleted (kubelet restart?): serving it again", e->server->socket_path());
            e->server->stop();
            if (auto st = e->server->start(); !st) log::error("{}", st.error().message);
            {
                std::lock_guard lk(mu_);
                publish_locked(*e);
            }
            served_->registrar->served_again(e->name);
        }
    }
    for (const auto& name : others) served_->registrar->directory_changed(name);
    if (kubelet_event) served_->registrar->kubelet_changed();
}

void Plugin::start_node_reporting() {
    const bool by_label = !opts_.config_source.srcdir.empty();
    if (!opts_.node_events && !opts_.node_annotation && !by_label) return;
    const char* what = by_label ? "GPU health is not posted on the Node and its config label is not watched"
                                : "GPU health is not posted on the Node";
    if (opts_.node_name.empty()) {
        log::info("{}: no node name (set NODE_NAME from the downward API's spec.nodeName, or --node-name)", what);
        return;
    }
    if (auto st = kube::check_node_name(opts_.node_name); !st) {
        log::warn("{}: {}", what, st.error().message);
        return;
    }
    auto config = kube::resolve_config(opts_.kubeconfig);
    if (!config) {
        log::warn("{}: no API server configuration: {}", what, config.error().message);
        return;
    }
    log::info("node {} through {} ({}):{}{}{}", opts_.node_name, config->server, config->source,
              opts_.node_events ? " GPU health Events" : "", opts_.node_annotation ? ", the kgpu/gpu-health annotation" : "",
              by_label ? fmt::format(", the config named by its label {}", opts_.config_source.node_label) : "");
    // 5 s per request: the recorder's and the watch's threads are the ones that wait for it.
    api_ = std::make_shared<kube::Client>(std::move(*config), std::chrono::seconds(5));
    kube::EventRecorderOptions o;
    o.node = opts_.node_name;
    events_ = std::make_unique<kube::EventRecorder>(
        [api = api_](std::string_view method, std::string_view path, std::string_view body, std::string_view type) {
            return api->request(method, path, body, type);
        },
        std::move(o));
    events_->start();
    if (!by_label) return;
    label_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!label_fd_) {
        log::error("the config label {} is not watched: eventfd: {}", opts_.config_source.node_label, std::strerror(errno));
        return;
    }
    watch_ = kube::watch_node(
        api_, opts_.node_name,
        [this, key = opts_.config_source.node_label](const nlohmann::json& node) {
            // No Node (deleted, or not found by a list): keep the config the last one named.
            const auto label = kube::label_of(node, key);
            if (!label) return;
            const std::string& value = *label;
            {
                std::lock_guard lk(label_mu_);
                if (label_seen_ == value) return;
                label_seen_ = value;
            }
            const std::uint64_t one = 1;
            (void)!::write(label_fd_.get(), &one, sizeof one);
        });
}

void Plugin::watch_paused(int ifd) {
    if (paused_wd_ >= 0 || opts_.paused_gpus_file.empty()) return;
    const fs::path dir = fs::path(opts_.paused_gpus_file).parent_path();
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return;
    paused_wd_ = ::inotify_add_watch(ifd, dir.c_str(), IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_CLOSE_WRITE);
    if (paused_wd_ < 0) {
        if (reported_.first("paused-watch"))
            log::warn("cannot watch {} for GPUs paused for a MIG change: {}", dir.string(), std::strerror(errno));
        return;
    }
    log::info("following {}: the GPUs it names are paused for a MIG change", opts_.paused_gpus_file);
    read_paused();
}

void Plugin::read_paused() {
    std::set<std::string> next;
    auto text = files::read(opts_.paused_gpus_file);
    if (text) {
        auto parsed = parse_paused_gpus(*text, opts_.paused_gpus_file);
        if (!parsed) {
            // A file being written by hand: keep what is paused now, say why once per error.
            if (paused_error_ != parsed.error().message) log::error("{} (the paused GPUs stay as they were)", parsed.error().message);
            paused_error_ = parsed.error().message;
            return;
        }
        next = std::move(*parsed);
    } else if (text.error().code != Code::not_found) {
        log::warn("{}: {} (the paused GPUs stay as they were)", opts_.paused_gpus_file, text.error().message);
        return;
    }
    paused_error_.clear();
    std::lock_guard lk(mu_);
    if (next == paused_) return;
    std::vector<std::string> paused, resumed;
    std::ranges::set_difference(next, paused_, std::back_inserter(paused));
    std::ranges::set_difference(paused_, next, std::back_inserter(resumed));
    auto named = [this](const std::string& uuid) {
        for (std::size_t i = 0; i < health_.size(); ++i)
            if (health_[i].uuid == uuid) return fmt::format("GPU {} ({})", i, uuid);
        return health_.empty() ? uuid : fmt::format("{} (not a GPU of this node)", uuid);
    };
    for (const auto& u : paused) log::info("{} paused for a MIG change: its devices are not offered", named(u));
    for (const auto& u : resumed) log::info("{} no longer paused: its devices are offered again", named(u));
    paused_ = std::move(next);
    if (served_)
        for (auto& e : served_->entries) publish_locked(*e);
}

std::chrono::milliseconds Plugin::next_timeout() const {
    using namespace std::chrono;
    auto now = Clock::now();
    auto soonest = now + seconds(60);
    if (!served_) soonest = std::min(soonest, next_init_);
    if (served_ && CdiSpecRefresher::wanted(opts_.config)) soonest = std::min(soonest, now + DriverVersionWatch::kInterval);
    if (served_)
        for (const auto& e : served_->entries)
            if (!e->server->running()) soonest = std::min(soonest, now + opts_.init_retry);
    if (served_) soonest = std::min(soonest, settler_.due());
    return std::max(milliseconds(0), duration_cast<milliseconds>(soonest - now));
}

void Plugin::maybe_release_pages() { settler_.poll_logged("settled"); }

}  // namespace kgpu::deviceplugin::detail
