// HttpServer::Impl (http.h's server): the state of the one server thread and its steps, shared by
// http.cpp (bookkeeping, web config, the loop), http_read.cpp (accepting, reading) and
// http_answer.cpp (answering). Private to src/exporter.
#pragma once

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "exporter/auth_worker.h"
#include "exporter/basic_auth.h"
#include "exporter/conn_table.h"
#include "exporter/http.h"
#include "exporter/http_parse.h"
#include "exporter/tls.h"
#include "exporter/web_config.h"
#include "exporter/web_reload.h"

namespace kgpu::exporter {

struct HttpServer::Impl {
    using Clock = std::chrono::steady_clock;

    static constexpr auto kLinger = std::chrono::seconds(2);  // reading what a closing client still sends
    static constexpr std::size_t kMaxLingerBytes = 1 << 20;
    static constexpr std::size_t kAuthQueue = 64;      // bcrypt checks waiting for the worker
    static constexpr std::size_t kAuthCache = 100;     // remembered right (user, password) pairs
    static constexpr unsigned kAuthPerPeer = 2;        // checks one client address may have waiting
    // What one connection gets per turn of the loop (one epoll_wait): then the others have theirs.
    static constexpr unsigned kTurnRequests = 16;
    static constexpr std::size_t kTurnBytes = 64 * 1024;
    static constexpr std::uint64_t kListenId = 1, kWakeId = 2, kFirstConnId = 16;
    static constexpr auto kLogAgainAfter = std::chrono::seconds(60);

    // Logs a condition once when it starts, and again only after it has been quiet for a minute.
    class Episode {
    public:
        bool start(Clock::time_point now) {
            const bool fresh = last_ == Clock::time_point{} || now - last_ > kLogAgainAfter;
            last_ = now;
            return fresh;
        }

    private:
        Clock::time_point last_{};
    };

    HttpOptions options;
    HttpHandler handler;
    int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
    std::atomic<bool> stopping{false};
    std::thread thread;
    bool tls_enabled = false;  // fixed at start

    // Web config (server thread only, after start).
    std::optional<WebConfig> web;
    std::shared_ptr<TlsContext> tls;
    WebReload web_reload;
    std::unique_ptr<AuthWorker> auth;
    PasswordChecks checks{kAuthCache, kAuthPerPeer};
    TokenBucket bucket;

    ConnTable table{kFirstConnId};
    std::uint64_t pass = 0;             // loop passes (epoll_wait calls)
    std::vector<std::uint64_t> ready;   // connections with work left by their turn's budget
    bool listen_paused = false;
    Clock::time_point listen_resume{};
    Episode evict_log, peer_log, fd_log;

    // Statistics (read by other threads).
    std::atomic<std::uint64_t> n_open{0}, n_evicted{0}, n_peer{0}, n_timeout{0}, n_oversize{0}, n_malformed{0},
        n_tls{0};

    ~Impl();

    // ---- bookkeeping --------------------------------------------------------------------------

    void set_events(Conn& c, std::uint32_t ev);
    Clock::time_point now() const { return options.clock ? options.clock() : Clock::now(); }
    Clock::duration grace() const {
        return std::min<Clock::duration>(options.new_connection_grace, options.idle_timeout);
    }

    void set_phase(Conn& c, Phase p, Clock::time_point now, Clock::duration timeout);

    // Level-triggered. EPOLLRDHUP is never asked for: a client that half-closes after its request
    // would make it fire at every wait while its answer is written; EOF is seen by recv instead.
    void update_events(Conn& c);

    // Closes at once. `counter` says why, when it is a reason worth counting.
    void close_conn(Conn& c, std::atomic<std::uint64_t>* counter);

    // A connection waiting for a password check goes: when nobody else waits for that check and it
    // has not started, it is dropped, so a flood of clients that hang up leaves no queue of
    // bcrypt work (which would refuse the next right password with 503).
    void forget_auth_wait(Conn& c);

    // Closes the most expendable connection (of all, or of one client address's).
    bool evict(std::optional<std::uint64_t> id, std::atomic<std::uint64_t>& counter);

    // ---- web config ----------------------------------------------------------------------------

    Status load_web(const std::string& path);

    // When: web_reload.h. A broken new version keeps the old one.
    void maybe_reload(Clock::time_point now);

    // ---- accepting -----------------------------------------------------------------------------

    void on_accept(Clock::time_point now);
    void pause_listen(Clock::time_point now);
    void admit(int fd, const sockaddr_storage& ss, Clock::time_point now);

    // ---- reading -------------------------------------------------------------------------------

    // The budget of one turn: a connection takes at most kTurnRequests requests and reads at most
    // kTurnBytes per loop pass, then waits on the ready list while the others have their turn,
    // so one client pipelining without pause cannot keep the loop from epoll_wait.
    bool turn_spent(Conn& c);
    void defer(Conn& c);

    // Reads what is there, within the turn's budget. Returns false when the connection was closed.
    bool on_readable(Conn& c, Clock::time_point now);
    bool handshake(Conn& c, Clock::time_point now);

    // Takes complete heads out of c.in and answers them, one at a time, within the turn's budget.
    // Returns false when the connection was closed.
    bool process(Conn& c, Clock::time_point now);

    // ---- answering -----------------------------------------------------------------------------

    bool rate_limited(Clock::time_point now) { return web && !bucket.take(web->rate_interval, web->rate_burst, now); }

    void dispatch(Conn& c, RequestHead p, Clock::time_point now);
    void unauthorized(Conn& c, const RequestHead& p, Clock::time_point now);
    void serve(Conn& c, const RequestHead& p, Clock::time_point now);
    void on_auth_done(Clock::time_point now);

    // A refusal that ends the connection.
    void error_answer(Conn& c, unsigned status, std::string text, Clock::time_point now);
    void answer(Conn& c, HttpResponse r, const RequestHead& p, Clock::time_point now);

    // Writes what the socket takes. Returns false when the connection was closed.
    bool on_writable(Conn& c, Clock::time_point now);

    // After an answer finished outside the reading loop (the socket became writable, a password
    // check came back, a timer): take what is already received. TLS may also hold decrypted bytes
    // epoll cannot see, so it is read too.
    void resume(Conn& c, Clock::time_point now);

    // Ends the connection politely: close_notify and FIN, then reads (and drops) what the client
    // still sends for a moment, so our answer is not destroyed by a reset.
    void begin_close(Conn& c, Clock::time_point now);

    // ---- the loop ------------------------------------------------------------------------------

    void on_timer(Conn& c, Clock::time_point now);
    // Every connection's timer due by `now`, then the closed ones buried.
    void fire_due_timers(Clock::time_point now);
    // What epoll reported for connection `c` (`ev`).
    void on_conn_event(Conn& c, std::uint32_t ev, Clock::time_point now);
    void run();
};

}  // namespace kgpu::exporter
