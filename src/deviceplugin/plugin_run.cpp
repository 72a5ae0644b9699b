// The device plugin's life: waiting for the kubelet's directory, serving and registering, the
// control loop (signals, the plugin directory, restarts) and teardown. State, Allocate and applying
// a configuration are in plugin.cpp.
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
#include <mutex>
#include <optional>
#include <set>

#include "common/fd.h"
#include "common/files.h"
#include "common/log.h"
#include "common/log_once.h"
#include "common/memory.h"
#include "common/process.h"
#include "deviceplugin/cdi_refresh.h"
#include "deviceplugin/extras.h"
#include "deviceplugin/health.h"
#include "deviceplugin/mps.h"
#include "deviceplugin/node_events.h"
#include "deviceplugin/paused.h"
#include "deviceplugin/registrar.h"
#include "deviceplugin/resources.h"
#include "deviceplugin/server.h"
#include "kube/client.h"
#include "kube/events.h"
#include "kube/node_watch.h"

#include "deviceplugin/plugin_impl.h"

namespace kgpu::deviceplugin {
namespace detail {

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
        // Joined if it already ended (told at the top, its wait may have run out meanwhile);
        // otherwise the process ends without it rather than wait up to kEventWait. (A grace of
        // 20 ms here was waited out at nearly every exit: the wait runs out once in 500 ms.)
        if (exiting && !served_->health->stop_within(std::chrono::milliseconds(0))) return false;
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
    // Looked at every 500 ms (its parents may not exist either: nothing to watch), or at the
    // init retry period when that is shorter (tests).
    const int period = static_cast<int>(std::min<long long>(500, opts_.init_retry.count()));
    for (;;) {
        pollfd p{signal_fd_.get(), POLLIN, 0};
        if (::poll(&p, 1, period) > 0 && (p.revents & POLLIN)) {
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
        // The health thread has not ended: most often it is inside nvmlEventSetWait, which
        // nothing can interrupt. End the process now (its sockets are removed and its streams
        // ended) instead of waiting out the wait. No destructor may run while that thread is
        // inside NVML; what the watch and the node events still had in flight is dropped.
        log::debug("the health thread has not ended (NVML's event wait): exiting without it");
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
