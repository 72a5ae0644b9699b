// Registration with the kubelet: a state machine per resource, on its own thread, so that a
// kubelet that accepts the connection and never answers Register holds up neither SIGHUP, nor
// health updates, nor SIGTERM (issue #12).
//
// How the kubelet (v1.26 device manager) treats registrations decides the rules:
// - On every Register it opens a NEW ListAndWatch stream and keeps the old ones open, holding one
//   client per resource name; when ANY stream of a name ends it drops that name's CURRENT client
//   (allocatable 0 until a new Register).
// So, per resource:
// - Register once per kubelet instance. The instance is kubelet.sock's identity (device, inode,
//   change time); whatever announces a new one (kubelet.sock created, our socket deleted and
//   served again) leads to one Register, not one per event.
// - A changed device list is only a ListAndWatch update (the server publishes it): never a new
//   registration.
// - The stream of a registration is the first one opened after its Register began (kgpu doctor's
//   probe streams are not numbered among them: server.h). Another client of ListAndWatch that
//   opens and closes a stream in the few milliseconds between a Register and the kubelet's
//   stream costs one extra Register (our older stream is ended first, so no update is doubled);
//   the server cannot tell the kubelet's connection from another on a unix socket. When the
//   peer ends it while kubelet.sock is unchanged (the kubelet dropped us, e.g. because another
//   plugin's stream for the name ended), register again, with backoff (100 ms doubling to 5 s,
//   back to 100 ms once a registration held for 10 s). So also when no stream opens within
//   500 ms of a successful Register.
// - Before a Register, streams of earlier registrations still open are ended, and the kubelet is
//   given a moment to see it (their end must not cut off the new client).
// - Another plugin's socket for one of our resources (NVIDIA's naming: `nvidia-<name>.sock` for
//   `nvidia.com/<name>`) is warned about once when it appears; when it disappears, register again
//   (if the other plugin registered last, the kubelet has no client for the name left). One that
//   appears refusing connections (bound, not listening yet) is looked at every foreign_probe
//   and taken as gone only if it still refuses foreign_grace after its event.
// - No Register goes to a kubelet that is not there: a kubelet.sock that is missing, or that
//   refuses connections (the kubelet exited; the file stays until the next kubelet deletes it),
//   is waited for, with one log line, until kubelet.sock is created again (kubelet_changed, from
//   inotify), instead of being retried with backoff: after a kubelet restart the log shows one
//   registration, not a warning per attempt against the dead socket. A kubelet.sock that was just
//   created may refuse for a moment (bound, not yet listening): looked at again soon, quietly. While
//   waiting, a slow check (max_backoff) covers a missed event.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "deviceplugin/server.h"

namespace kgpu::deviceplugin {

// The socket file name another plugin (NVIDIA's naming) would use for `resource`:
// "nvidia.com/gpu" -> "nvidia-gpu.sock", "nvidia.com/mig-1g.10gb" -> "nvidia-mig-1g.10gb.sock";
// "" for a name without a domain.
std::string foreign_socket_name(const std::string& resource);

// kubelet.sock's identity: a new kubelet instance binds a new socket file.
struct SocketId {
    unsigned long dev = 0, ino = 0;
    long ctime_sec = 0, ctime_nsec = 0;
    friend bool operator==(const SocketId&, const SocketId&) = default;
};
// nullopt when `path` does not exist (or is not a socket).
std::optional<SocketId> socket_id(const std::string& path);

class Registrar {
public:
    struct Options {
        std::string kubelet_socket;
        std::string plugin_dir;  // where other plugins' sockets are looked for
        std::chrono::milliseconds register_timeout{5000};
        std::chrono::milliseconds min_backoff{100};
        std::chrono::milliseconds max_backoff{5000};
        // The first retry against a kubelet.sock that has just appeared (it may not listen yet).
        std::chrono::milliseconds new_kubelet_backoff{10};
        // How long a stream our Register caused may take to open, and a registration must hold
        // before the backoff starts over.
        std::chrono::milliseconds stream_grace{500};
        std::chrono::milliseconds stable_after{10000};
        // Time the kubelet gets to process the end of streams we ended before a Register.
        std::chrono::milliseconds settle{20};
        // While another plugin's socket for a resource is there: how often to check that someone
        // still listens on it (a plugin killed with SIGKILL leaves its socket file behind).
        std::chrono::milliseconds foreign_probe{1000};
        // How long another plugin's socket that refused connections at its directory event (bound,
        // not listening yet) is given to listen before it is taken as gone.
        std::chrono::milliseconds foreign_grace{1000};
    };

    explicit Registrar(Options options);
    ~Registrar();
    Registrar(const Registrar&) = delete;
    Registrar& operator=(const Registrar&) = delete;

    // The thread. stop() cancels a Register in flight and joins; idempotent.
    void start();
    void stop();

    // A resource to register (its server already serving); registered as soon as possible.
    void add(std::shared_ptr<ResourceServer> server);
    // Forgets a resource (before its server stops); a Register in flight for it is cancelled.
    void remove(const std::string& resource);
    // Our server for `resource` was served again (its socket had been deleted): register again,
    // unless the registration already went to the server as it is now.
    void served_again(const std::string& resource);
    // Something happened to kubelet.sock (created, deleted, replaced): compare identities.
    void kubelet_changed();
    // A file named `name` appeared or disappeared in the plugin directory (other plugins).
    void directory_changed(const std::string& name);
    // From the server (Handlers::stream_ended).
    void stream_ended(const std::string& resource, std::uint64_t stream, bool by_peer);

    // True while `resource` is registered with the current kubelet (tests, logs).
    bool registered(const std::string& resource) const;
    // True while `resource` waits for a kubelet to appear (kubelet.sock missing or not listening).
    bool waiting_for_kubelet(const std::string& resource) const;
    // True while another plugin's socket for `resource` is watched, someone having been seen
    // listening on it (tests, logs).
    bool watching_foreign(const std::string& resource) const;
    // Register calls sent so far, answered or not (tests, logs).
    std::uint64_t register_attempts() const;
    // True while a Register waits for the kubelet to see the end of streams we ended
    // (Options::settle) (tests).
    bool settling() const;

private:
    using Clock = std::chrono::steady_clock;
    struct Entry {
        std::shared_ptr<ResourceServer> server;
        bool registered = false;
        std::optional<SocketId> kubelet;  // the instance registered with
        std::uint64_t stream = 0;         // the registration's stream number
        Clock::time_point registered_at{};
        bool want = true;                 // a Register is due at next_try
        Clock::time_point next_try{};
        std::chrono::milliseconds backoff{};
        std::string last_error;           // logged once per distinct failure
        bool foreign = false;             // another plugin listens on its socket for it
        // Its socket file refused connections at its directory event (a plugin between bind() and
        // listen(), or one already killed): until then (the event + foreign_grace), listening at a
        // probe confirms it and refusing is not yet taken as gone.
        std::optional<Clock::time_point> foreign_unconfirmed;
        bool poked = false;               // an event came while its Register ran: a failure retries at once
        bool waiting = false;             // no kubelet listens: waits for kubelet.sock (said once)
    };

    void run();
    // One Register for `name` (mu_ not held), and its outcome recorded.
    void register_one(const std::string& name);
    // register_one() found our socket deleted: registers once it is served again.
    void await_served_again(const std::string& name, const std::string& socket_path);
    // Where another plugin's socket for `name` would be (empty: no other plugin serves it).
    std::string foreign_path(const std::string& name) const;
    // Whether someone listens on the other plugin's socket for `name`.
    bool foreign_listening(const std::string& name) const;
    // Looks for the other plugin's socket for `name`; warns when it appears. Returns whether it is there.
    bool check_foreign_locked(const std::string& name, Entry& e) {
        return foreign_seen_locked(name, e, foreign_listening(name));
    }
    // Records whether the other plugin's socket for `name` is there (`present`); warns when it appears.
    bool foreign_seen_locked(const std::string& name, Entry& e, bool present);
    // The other plugin is no longer there (socket gone, or nobody listens): register again.
    void foreign_gone_locked(const std::string& name, Entry& e, bool was);
    void due_now_locked(Entry& e);
    // No kubelet listens on kubelet.sock (`id`: its identity, nullopt when missing): the next
    // attempt waits for kubelet_changed, or soon when the socket was just created.
    void await_kubelet_locked(const std::string& name, Entry& e, const std::optional<SocketId>& id, const char* why);
    // register_one's outcome, under mu_: registered (`stream` and later are the Register's,
    // `id` the kubelet.sock it went to), or failed (`before`: the kubelet.sock before the call).
    void registered_locked(const std::string& name, Entry& e, const ResourceServer& server, std::uint64_t stream,
                           const std::optional<SocketId>& id, const std::string& endpoint);
    void failed_locked(const std::string& name, Entry& e, const Error& error, const std::optional<SocketId>& before,
                       const std::optional<SocketId>& id);
    // The next attempt after the entry's backoff, which doubles (up to max_backoff).
    void retry_after_backoff_locked(Entry& e, Clock::time_point now);

    Options opts_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::map<std::string, Entry> entries_;
    bool stop_ = false;
    std::thread thread_;
    std::string in_flight_;                 // the resource whose Register runs
    std::optional<SocketId> in_flight_kubelet_;  // the kubelet.sock it went to
    // The kubelet.sock kubelet_changed() last saw created: refusing connections right after it
    // appeared means "not listening yet", not "gone".
    std::optional<SocketId> announced_;
    std::uint64_t attempts_ = 0;  // Register calls sent
    bool settling_ = false;       // in the settle wait before a Register
    // Cancels that Register (stop, remove, a kubelet gone). Reset under mu_ when a Register is
    // picked (with stop_ checked in the same critical section) and cancelled under mu_, so a
    // stop() anywhere between the pick and the call is not lost.
    RegisterCancel cancel_;
};

}  // namespace kgpu::deviceplugin
