#include "deviceplugin/registrar.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <filesystem>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "common/log.h"
#include "common/unix_socket.h"

namespace kgpu::deviceplugin {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string foreign_socket_name(const std::string& resource) {
    const auto slash = resource.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == resource.size()) return {};
    const std::string domain = resource.substr(0, slash);
    return domain.substr(0, domain.find('.')) + "-" + resource.substr(slash + 1) + ".sock";
}

std::optional<SocketId> socket_id(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return std::nullopt;
    return SocketId{static_cast<unsigned long>(st.st_dev), static_cast<unsigned long>(st.st_ino),
                    static_cast<long>(st.st_ctim.tv_sec), static_cast<long>(st.st_ctim.tv_nsec)};
}

namespace {

// Whether a process listens on the unix socket at `path`: a socket file whose owner was killed
// refuses connections. (A full backlog, EAGAIN, still means someone listens; a probe that cannot
// be made, a path too long for a socket or no descriptor left, assumes someone does.)
bool listening(const std::string& path) {
    if (unix_connect(path, true)) return true;
    return errno != ECONNREFUSED && errno != ENOENT && errno != ENOTSOCK;
}

}  // namespace

Registrar::Registrar(Options options) : opts_(std::move(options)) {}

Registrar::~Registrar() { stop(); }

void Registrar::start() {
    std::lock_guard lk(mu_);
    if (thread_.joinable()) return;
    stop_ = false;
    thread_ = std::thread([this] { run(); });
}

void Registrar::stop() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
        cancel_.cancel();
        cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
}

void Registrar::due_now_locked(Entry& e) {
    e.want = true;
    e.next_try = Clock::now();
    e.backoff = opts_.min_backoff;
    cv_.notify_all();
}

void Registrar::add(std::shared_ptr<ResourceServer> server) {
    std::lock_guard lk(mu_);
    const std::string name = server->resource_name();
    Entry& e = entries_[name];
    e = Entry{};
    e.server = std::move(server);
    e.backoff = opts_.min_backoff;
    check_foreign_locked(name, e);
    due_now_locked(e);
}

void Registrar::remove(const std::string& resource) {
    std::lock_guard lk(mu_);
    entries_.erase(resource);
    if (in_flight_ == resource) cancel_.cancel();
}

void Registrar::served_again(const std::string& resource) {
    std::lock_guard lk(mu_);
    auto it = entries_.find(resource);
    if (it == entries_.end()) return;
    Entry& e = it->second;
    // A Register running now, or one made since the server came back (its stream is on the new
    // server), holds: it is the one Register of this kubelet restart. If the kubelet's stream was
    // on the old server after all, the stream check in run() registers again.
    if (in_flight_ == resource) {
        log::debug("{} served again while its Register runs", resource);
        e.poked = true;
        return;
    }
    if (e.registered && e.stream >= e.server->first_stream_of_start()) {
        log::debug("{} served again: its registration (stream {}) is on the new server", resource, e.stream);
        return;
    }
    e.registered = false;
    due_now_locked(e);
}

void Registrar::retry_after_backoff_locked(Entry& e, Clock::time_point now) {
    e.next_try = now + e.backoff;
    e.backoff = std::min(e.backoff * 2, opts_.max_backoff);
}

void Registrar::await_kubelet_locked(const std::string& name, Entry& e, const std::optional<SocketId>& id,
                                     const char* why) {
    e.registered = false;
    e.want = true;
    const auto now = Clock::now();
    if (id && announced_ == id) {
        // Created a moment ago: bound, not listening yet. Look again soon.
        log::debug("{}: {} {} (just created): looking again in {} ms", name, opts_.kubelet_socket, why,
                   e.backoff.count());
        retry_after_backoff_locked(e, now);
    } else {
        // The kubelet is gone, or not there yet: kubelet_changed() says when it (re)creates its
        // socket; the slow check covers a missed event.
        if (!e.waiting)
            log::info("no kubelet listens on {} ({}): registering {} when the kubelet creates it again",
                      opts_.kubelet_socket, why, name);
        e.waiting = true;
        e.next_try = now + opts_.max_backoff;
        e.backoff = opts_.min_backoff;
    }
    cv_.notify_all();
}

void Registrar::kubelet_changed() {
    std::lock_guard lk(mu_);
    const auto id = socket_id(opts_.kubelet_socket);
    if (id) announced_ = id;
    for (auto& [name, e] : entries_) {
        if (name == in_flight_) {
            // Its outcome is checked against kubelet.sock when it returns; a Register stuck on a
            // kubelet that has gone away is cancelled. One sent while kubelet.sock was absent
            // either failed at once or reached the kubelet that has just bound it, this one: not
            // cancelled, since the kubelet may already have taken it (it would keep that client
            // and its stream, and our retry would add a second: every update twice).
            if (!in_flight_kubelet_ && id) {
                in_flight_kubelet_ = id;
                e.poked = true;  // a failure (it went out before the bind) retries at once
            } else if (in_flight_kubelet_ != id) {
                e.poked = true;
                cancel_.cancel();
            }
            continue;
        }
        if (e.registered && e.kubelet == id) continue;  // the other event of the same restart
        if (e.registered) log::info("{} changed (kubelet restart): registering {} again", opts_.kubelet_socket, name);
        e.registered = false;
        due_now_locked(e);
        // A socket file appears at bind(), a moment before listen(): retry a refused connection soon.
        if (id) e.backoff = opts_.new_kubelet_backoff;
    }
}

std::string Registrar::foreign_path(const std::string& name) const {
    const std::string other = foreign_socket_name(name);
    return other.empty() ? std::string() : (fs::path(opts_.plugin_dir) / other).string();
}

bool Registrar::foreign_listening(const std::string& name) const {
    const std::string path = foreign_path(name);
    return !path.empty() && socket_id(path).has_value() && listening(path);
}

bool Registrar::foreign_seen_locked(const std::string& name, Entry& e, bool present) {
    if (present && (!e.foreign || e.foreign_unconfirmed)) {
        log::warn("another device plugin serves {} on {} (NVIDIA's device plugin?): the kubelet keeps only the "
                  "latest registration of a resource and drops it when either plugin's stream ends. kgpu registers "
                  "again when that happens; remove the other plugin (docs/migration.md)",
                  name, foreign_path(name));
        cv_.notify_all();  // the loop starts probing it
    }
    e.foreign = present;
    e.foreign_unconfirmed.reset();
    return present;
}

void Registrar::directory_changed(const std::string& file) {
    std::lock_guard lk(mu_);
    for (auto& [name, e] : entries_) {
        if (foreign_socket_name(name) != file) continue;
        const bool was = e.foreign && !e.foreign_unconfirmed;  // one we saw listen
        if (check_foreign_locked(name, e)) continue;
        if (socket_id((fs::path(opts_.plugin_dir) / file).string())) {
            // The file is there but refuses connections. The event comes at bind(), so this may
            // be a plugin a moment before its listen(): looked at every foreign_probe, and taken
            // as gone only when it still refuses foreign_grace later. Taking it as gone now would
            // register at once, and a Register landing before that plugin's own would leave kgpu
            // not watching the plugin the kubelet uses, so its death would go unnoticed (issue
            // #24: seen under load). A plugin we watched is gone all the same (its file was
            // replaced, or it died).
            if (was) foreign_gone_locked(name, e, true);
            log::info("the other device plugin's socket for {} ({}) refuses connections: taken as gone if it still "
                      "does in {} ms",
                      name, file, opts_.foreign_grace.count());
            e.foreign = true;
            e.foreign_unconfirmed = Clock::now() + opts_.foreign_grace;
            cv_.notify_all();
            continue;
        }
        foreign_gone_locked(name, e, was);
    }
}

void Registrar::foreign_gone_locked(const std::string& name, Entry& e, bool was) {
    // Gone, or came and went between two looks: if that plugin registered last, the kubelet
    // dropped the resource when its stream ended, and nothing tells us (our older stream stays
    // open). A Register running now goes after it left; if the kubelet drops that one all the
    // same, its stream ends and we register again.
    log::info("the other device plugin's socket for {} {}: registering {} again", name,
              was ? "is gone or no longer answers" : "came and went", name);
    if (in_flight_ != name) {
        e.registered = false;
        due_now_locked(e);
    } else {
        e.poked = true;
    }
}

void Registrar::stream_ended(const std::string& resource, std::uint64_t stream, bool by_peer) {
    std::lock_guard lk(mu_);
    auto it = entries_.find(resource);
    if (it == entries_.end()) return;
    Entry& e = it->second;
    log::debug("{}: stream {} ended{}", resource, stream, by_peer ? " by the peer" : "");
    if (!by_peer || !e.registered || stream != e.stream) return;
    // The kubelet exited (a restart, a crash): no Register until a kubelet is there again.
    if (const auto id = socket_id(opts_.kubelet_socket); !id || !listening(opts_.kubelet_socket)) {
        await_kubelet_locked(resource, e, id,
                             id ? "the kubelet ended our stream and its socket refuses connections"
                                : "the kubelet ended our stream and its socket is gone");
        return;
    }
    const auto now = Clock::now();
    if (now - e.registered_at >= opts_.stable_after) e.backoff = opts_.min_backoff;
    log::info("the kubelet ended the ListAndWatch stream of {}: registering again in {} ms", resource,
              e.backoff.count());
    e.registered = false;
    e.want = true;
    retry_after_backoff_locked(e, now);
    cv_.notify_all();
}

bool Registrar::registered(const std::string& resource) const {
    std::lock_guard lk(mu_);
    auto it = entries_.find(resource);
    return it != entries_.end() && it->second.registered;
}

bool Registrar::waiting_for_kubelet(const std::string& resource) const {
    std::lock_guard lk(mu_);
    auto it = entries_.find(resource);
    return it != entries_.end() && it->second.waiting && !it->second.registered;
}

bool Registrar::watching_foreign(const std::string& resource) const {
    std::lock_guard lk(mu_);
    auto it = entries_.find(resource);
    return it != entries_.end() && it->second.foreign && !it->second.foreign_unconfirmed;
}

std::uint64_t Registrar::register_attempts() const {
    std::lock_guard lk(mu_);
    return attempts_;
}

bool Registrar::settling() const {
    std::lock_guard lk(mu_);
    return settling_;
}

void Registrar::run() {
    std::unique_lock lk(mu_);
    auto next_probe = Clock::now() + opts_.foreign_probe;
    while (!stop_) {
        const auto now = Clock::now();
        auto wake = now + 60s;
        // Another plugin killed without cleaning up leaves its socket: no directory event says
        // that it went, so while one is there, look whether anyone still listens on it.
        bool any_foreign = false;
        const bool probe = now >= next_probe;
        for (auto& [name, e] : entries_) {
            if (!e.foreign) continue;
            any_foreign = true;
            if (e.foreign_unconfirmed) {
                // Not listening yet at its event: listening at a probe confirms it; still refusing
                // once its grace is over, it is gone.
                if (now >= *e.foreign_unconfirmed) {
                    if (!check_foreign_locked(name, e)) foreign_gone_locked(name, e, true);
                } else if (probe && foreign_listening(name)) {
                    foreign_seen_locked(name, e, true);
                } else {
                    wake = std::min(wake, *e.foreign_unconfirmed);
                }
                continue;
            }
            if (probe && !check_foreign_locked(name, e)) foreign_gone_locked(name, e, true);
        }
        if (now >= next_probe) next_probe = now + opts_.foreign_probe;
        if (any_foreign) wake = std::min(wake, next_probe);
        std::string due;
        Clock::time_point due_at = Clock::time_point::max();
        for (auto& [name, e] : entries_) {
            if (e.registered && !e.server->stream_open(e.stream)) {
                // The kubelet opens the stream right after Register; none open (never opened, or
                // ended before we knew its number) means the registration did not take.
                if (now - e.registered_at >= opts_.stream_grace) {
                    log::info("no ListAndWatch stream from the kubelet for {}: registering again", name);
                    e.registered = false;
                    e.want = true;
                    retry_after_backoff_locked(e, now);
                } else {
                    wake = std::min(wake, e.registered_at + opts_.stream_grace);
                }
            }
            if (!e.want) continue;
            if (e.next_try <= now && e.next_try < due_at) {
                due = name;
                due_at = e.next_try;
            }
            wake = std::min(wake, e.next_try);
        }
        if (!due.empty()) {
            lk.unlock();
            register_one(due);
            lk.lock();
            continue;
        }
        cv_.wait_until(lk, wake);
    }
}

void Registrar::await_served_again(const std::string& name, const std::string& socket_path) {
    std::lock_guard lk(mu_);
    in_flight_.clear();
    auto it = entries_.find(name);
    if (it == entries_.end()) return;
    Entry& e = it->second;
    e.want = true;
    if (std::exchange(e.poked, false)) {
        e.next_try = Clock::now();  // served again meanwhile
    } else {
        retry_after_backoff_locked(e, Clock::now());
    }
    log::debug("{}: {} is not served right now: registering once it is", name, socket_path);
}

void Registrar::register_one(const std::string& name) {
    std::shared_ptr<ResourceServer> server;
    bool same_kubelet = false;  // the previous registration went to the kubelet there is now
    {
        std::lock_guard lk(mu_);
        auto it = entries_.find(name);
        if (it == entries_.end() || stop_) return;
        server = it->second.server;
        it->second.want = false;
        in_flight_ = name;
        cancel_.reset();  // with stop_ checked above, under the same lock: see cancel_
        in_flight_kubelet_ = socket_id(opts_.kubelet_socket);
        same_kubelet = it->second.kubelet && it->second.kubelet == in_flight_kubelet_;
    }
    // Our socket deleted (a kubelet restarting removes every socket in the directory, in no
    // particular order): the control loop serves it again and tells us (served_again); a Register
    // now would let the kubelet dial the old server, which is about to go.
    if (!socket_id(server->socket_path())) return await_served_again(name, server->socket_path());
    // No kubelet to take it: kubelet.sock missing, or refusing connections (the kubelet exited and
    // left its socket file). Wait for the next kubelet instead of trying the dead socket.
    if (const auto kid = socket_id(opts_.kubelet_socket); !kid || !listening(opts_.kubelet_socket)) {
        std::lock_guard lk(mu_);
        in_flight_.clear();
        auto it = entries_.find(name);
        if (it == entries_.end()) return;
        it->second.poked = false;
        // Looked at again under mu_, where kubelet_changed() looks: a kubelet that bound its
        // socket since the look above, and whose event came meanwhile (left to us: the entry was
        // in flight), is the announced one, looked at again soon, not in max_backoff.
        const auto current = socket_id(opts_.kubelet_socket);
        await_kubelet_locked(name, it->second, current, current ? "it refuses connections" : "it does not exist");
        return;
    }
    // Streams of earlier registrations still open: end them first and, when they belong to the
    // kubelet we are about to register with, give it a moment to see that, so that their end does
    // not drop the client this Register creates. (After a kubelet restart they belong to the old
    // process: no wait.)
    if (server->end_streams_before(server->next_stream_id(), 200ms) > 0 && same_kubelet) {
        std::unique_lock lk(mu_);
        settling_ = true;
        cv_.wait_for(lk, opts_.settle, [&] { return stop_; });
        settling_ = false;
    }
    const std::uint64_t stream = server->next_stream_id();
    const std::string endpoint = fs::path(server->socket_path()).filename().string();
    std::optional<SocketId> before;
    {
        std::lock_guard lk(mu_);
        before = in_flight_kubelet_ = socket_id(opts_.kubelet_socket);
        // A kubelet listens: a wait for one is over (the next is said again, answered or not).
        if (auto it = entries_.find(name); it != entries_.end()) it->second.waiting = false;
    }
    log::debug("{}: Register (stream {} and later belong to it)", name, stream);
    {
        std::lock_guard lk(mu_);
        ++attempts_;
    }
    // A stop() during the settle above (or at any point since the pick) has cancelled cancel_:
    // the call returns at once instead of waiting out its deadline on a kubelet that never answers.
    auto st = register_with_kubelet(opts_.kubelet_socket, endpoint, name,
                                    static_cast<int>(opts_.register_timeout.count()), &cancel_);

    std::lock_guard lk(mu_);
    // Under mu_, where kubelet_changed() looks: a new kubelet's event taken before this point
    // (left to us, the entry in flight) has its socket seen here; one after it finds the entry
    // no longer in flight and registers it itself.
    const auto id = socket_id(opts_.kubelet_socket);
    in_flight_.clear();
    auto it = entries_.find(name);
    if (it == entries_.end() || stop_ || it->second.server != server) return;
    if (st) registered_locked(name, it->second, *server, stream, id, endpoint);
    else failed_locked(name, it->second, st.error(), before, id);
}

void Registrar::registered_locked(const std::string& name, Entry& e, const ResourceServer& server, std::uint64_t stream,
                                  const std::optional<SocketId>& id, const std::string& endpoint) {
    const auto now = Clock::now();
    e.poked = false;
    // Registered with the kubelet.sock there is now: a restart during the call shows as a
    // different identity at the next kubelet_changed.
    e.registered = true;
    e.kubelet = id;
    e.stream = stream;
    e.registered_at = now;
    e.last_error.clear();
    e.want = false;
    e.waiting = false;
    log::info("registered {} with the kubelet at {} (endpoint {})", name, opts_.kubelet_socket, endpoint);
    if (server.next_stream_id() > stream && !server.stream_open(stream)) {
        // Its stream opened and already ended (the kubelet dropped the new client at once, e.g.
        // another plugin's stream ended meanwhile): register again after the backoff.
        log::info("the kubelet already ended the ListAndWatch stream of {}: registering again in {} ms", name,
                  e.backoff.count());
        e.registered = false;
        e.want = true;
        retry_after_backoff_locked(e, now);
    }
}

void Registrar::failed_locked(const std::string& name, Entry& e, const Error& error, const std::optional<SocketId>& before,
                              const std::optional<SocketId>& id) {
    const auto now = Clock::now();
    const bool poked = std::exchange(e.poked, false);
    e.registered = false;
    e.want = true;
    // The kubelet went away during the call (or was on its way out): wait for the next one, quietly.
    // kubelet.sock gone decides even when an event came meanwhile: that event was its going (a
    // kubelet that took the Register and exited before answering cancels the call that way).
    if (!id || (id == before && !poked && !listening(opts_.kubelet_socket))) {
        log::debug("{}: {}", name, error.message);
        await_kubelet_locked(name, e, id, id ? "it refuses connections" : "it does not exist");
        return;
    }
    if ((id != before && id) || poked) {
        e.next_try = now;  // a new kubelet came up, or our socket was served again, during the call
        e.backoff = opts_.new_kubelet_backoff;
    } else {
        retry_after_backoff_locked(e, now);
    }
    if (error.message != e.last_error) {
        log::warn("{}; retrying with backoff until the kubelet answers", error.message);
        e.last_error = error.message;
    }
}

}  // namespace kgpu::deviceplugin
