// HttpServer (http.h): one thread, one epoll set, non-blocking sockets.
//
// Every connection is in one phase; the phase decides what the server waits for, the deadline,
// and how expendable the connection is when room is needed. The connections and their indexes
// are a ConnTable (conn_table.h): closed ones are parked until the end of the event batch, so an
// event later in the same batch for a connection closed earlier finds nothing instead of a reused fd.
// Each loop pass (one epoll_wait) gives a connection a turn with a budget (kTurnRequests,
// kTurnBytes); one with work left goes on the ready list, served after the next pass's events, and
// the loop does not sleep while that list is not empty.
#include "exporter/http.h"

#include <csignal>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <optional>
#include <thread>

#include "common/fd.h"
#include "common/log.h"
#include "common/process.h"
#include "common/strings.h"
#include "exporter/auth_worker.h"
#include "exporter/basic_auth.h"
#include "exporter/conn_table.h"
#include "exporter/http_parse.h"
#include "exporter/listen.h"
#include "exporter/tls.h"
#include "exporter/web_config.h"
#include "exporter/web_reload.h"

namespace kgpu::exporter {

HttpResponse HttpResponse::text(unsigned status, std::string body) {
    HttpResponse r;
    r.status = status;
    r.body = std::make_shared<const std::string>(std::move(body));
    return r;
}

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kLinger = std::chrono::seconds(2);  // reading what a closing client still sends
constexpr std::size_t kMaxLingerBytes = 1 << 20;
constexpr std::size_t kAuthQueue = 64;      // bcrypt checks waiting for the worker
constexpr std::size_t kAuthCache = 100;     // remembered right (user, password) pairs
constexpr unsigned kAuthPerPeer = 2;        // checks one client address may have waiting
// What one connection gets per turn of the loop (one epoll_wait): then the others have theirs.
constexpr unsigned kTurnRequests = 16;
constexpr std::size_t kTurnBytes = 64 * 1024;
constexpr std::uint64_t kListenId = 1, kWakeId = 2, kFirstConnId = 16;
constexpr auto kLogAgainAfter = std::chrono::seconds(60);

std::string_view reason_phrase(unsigned status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
    }
}

std::string http_date() {
    thread_local std::time_t cached_at = 0;
    thread_local std::string cached;
    const std::time_t now = std::time(nullptr);
    if (now != cached_at) {
        std::tm tm{};
        ::gmtime_r(&now, &tm);
        char buf[64];
        std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        cached = buf;
        cached_at = now;
    }
    return cached;
}

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

}  // namespace

struct HttpServer::Impl {
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

    ~Impl() {
        table.for_each([](Conn& c) { ::close(c.fd); });
        if (listen_fd >= 0) ::close(listen_fd);
        if (epoll_fd >= 0) ::close(epoll_fd);
        if (wake_fd >= 0) ::close(wake_fd);
    }

    // ---- bookkeeping --------------------------------------------------------------------------

    void set_events(Conn& c, std::uint32_t ev) {
        if (ev == c.events) return;
        epoll_event e{};
        e.events = ev;
        e.data.u64 = c.id;
        ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &e);
        c.events = ev;
    }

    Clock::duration grace() const {
        return std::min<Clock::duration>(options.new_connection_grace, options.idle_timeout);
    }

    void set_phase(Conn& c, Phase p, Clock::time_point now, Clock::duration timeout) {
        if (c.fd < 0) return;  // closed earlier in this batch
        table.set_phase(c, p, now, timeout);
        // An answer is written at once (answer() calls on_writable next): EPOLLOUT is asked for only
        // when the socket does not take it all, which saves two epoll_ctl calls per scrape.
        if (p != Phase::writing) update_events(c);
    }

    // Level-triggered. EPOLLRDHUP is never asked for: a client that half-closes after its request
    // would make it fire at every wait while its answer is written; EOF is seen by recv instead.
    void update_events(Conn& c) {
        if (c.fd < 0) return;
        std::uint32_t ev = 0;
        switch (c.phase) {
        case Phase::closing:
        case Phase::idle:
        case Phase::fresh:
        case Phase::head: ev |= EPOLLIN; break;
        case Phase::handshake: ev |= c.tls_wants_write ? EPOLLOUT : EPOLLIN; break;
        case Phase::auth: break;
        case Phase::writing: ev |= EPOLLOUT; break;
        }
        if (c.phase != Phase::handshake) {
            if (c.tls_wants_write) ev |= EPOLLOUT;
            if (c.tls_wants_read) ev |= EPOLLIN;
        }
        set_events(c, ev);
    }

    // Closes at once. `counter` says why, when it is a reason worth counting.
    void close_conn(Conn& c, std::atomic<std::uint64_t>* counter) {
        if (counter) ++*counter;
        if (!c.auth_key.empty()) forget_auth_wait(c);
        ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
        c.tls.reset();
        ::close(c.fd);
        c.fd = -1;
        table.take_out(c);
        n_open = table.size();
    }

    // A connection waiting for a password check goes: when nobody else waits for that check and it
    // has not started, it is dropped, so a flood of clients that hang up leaves no queue of
    // bcrypt work (which would refuse the next right password with 503).
    void forget_auth_wait(Conn& c) {
        const std::string key = std::exchange(c.auth_key, {});
        if (checks.leave(key, c.id) && auth && auth->cancel(key)) checks.dropped(key);
    }

    // Closes the most expendable connection (of all, or of one client address's).
    bool evict(std::optional<std::uint64_t> id, std::atomic<std::uint64_t>& counter) {
        Conn* c = id ? table.find(*id) : nullptr;
        if (c == nullptr) return false;
        close_conn(*c, &counter);
        return true;
    }

    // ---- web config ----------------------------------------------------------------------------

    Status load_web(const std::string& path) {
        auto cfg = load_web_config(path);
        if (!cfg) return std::unexpected(cfg.error());
        std::shared_ptr<TlsContext> ctx;
        if (cfg->tls) {
            auto c = TlsContext::create(*cfg->tls);
            if (!c) return std::unexpected(c.error().context(path));
            ctx = std::move(*c);
        }
        if (!cfg->users.empty()) {
            if (auto s = load_bcrypt(); !s) return std::unexpected(s.error().context(path));
        }
        if (web && static_cast<bool>(web->tls) != static_cast<bool>(cfg->tls))
            return fail(Code::invalid_argument, "{}: switching TLS on or off needs a restart of the exporter", path);
        if (!cfg->users.empty() && !auth) auth = std::make_unique<AuthWorker>(wake_fd, kAuthQueue);
        if (!web || web->rate_interval != cfg->rate_interval || web->rate_burst != cfg->rate_burst)
            bucket.reset(cfg->rate_burst, Clock::now());
        web_reload.loaded(cfg->files);
        web = std::move(*cfg);
        tls = std::move(ctx);
        checks.forget_right();
        return {};
    }

    // When: web_reload.h. A broken new version keeps the old one.
    void maybe_reload(Clock::time_point now) {
        if (!web || !web_reload.due(web->files, now)) return;
        const std::string path = web->path;
        if (auto s = load_web(path); !s) {
            if (web_reload.failed(web->files, s.error().message))
                log::error("exporter: web config not reloaded, keeping the previous one: {}", s.error().message);
            return;
        }
        web_reload.succeeded();
        log::info("exporter: web config {} reloaded", path);
    }

    // ---- accepting -----------------------------------------------------------------------------

    void on_accept(Clock::time_point now) {
        maybe_reload(now);
        for (int i = 0; i < 256; ++i) {  // then let the connections' events in
            sockaddr_storage ss{};
            socklen_t len = sizeof ss;
            int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED) continue;
                if (errno == EMFILE || errno == ENFILE) {
                    // Out of file descriptors: make room from our own connections, or pause.
                    if (fd_log.start(now))
                        log::warn("exporter: http: out of file descriptors with {} connections open ({}); closing the "
                                  "oldest idle ones",
                                  table.size(), std::strerror(errno));
                    if (evict(table.most_expendable(), n_evicted)) continue;
                    pause_listen(now);
                }
                return;  // EAGAIN: all taken
            }
            admit(fd, ss, now);
        }
    }

    void pause_listen(Clock::time_point now) {
        epoll_event e{};
        e.data.u64 = kListenId;
        ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, listen_fd, &e);
        listen_paused = true;
        listen_resume = now + std::chrono::milliseconds(100);
    }

    void admit(int fd, const sockaddr_storage& ss, Clock::time_point now) {
        auto [peer, peer_text] = peer_of(ss);
        // Room first: the new connection never waits, the most expendable old one goes.
        if (const auto held = table.of_peer(peer); held > 0 && held >= options.peer_connection_limit) {
            if (peer_log.start(now))
                log::warn("exporter: http: {} holds {} connections, the per-client limit: closing its oldest idle or "
                          "slowest ones (kgpu_exporter_http_connections_closed_total{{reason=\"peer_limit\"}})",
                          peer_text, held);
            evict(table.most_expendable_of(peer), n_peer);
        }
        while (table.size() >= options.connection_limit) {
            if (evict_log.start(now))
                log::warn("exporter: http: {} connections open, the limit: closing the oldest idle or slowest ones to "
                          "make room (kgpu_exporter_http_connections_closed_total{{reason=\"evicted\"}})",
                          table.size());
            if (!evict(table.most_expendable(), n_evicted)) break;
        }
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        Conn& ref = table.add(fd, std::move(peer), now);
        epoll_event e{};
        e.events = EPOLLIN;
        e.data.u64 = ref.id;
        if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &e) != 0) {
            ::close(fd);
            ref.fd = -1;
            table.take_out(ref);
            return;
        }
        ref.events = e.events;
        n_open = table.size();
        if (tls) {
            // The handshake is part of the first request: it gets request_timeout.
            set_phase(ref, Phase::handshake, now, options.request_timeout);
        } else {
            set_phase(ref, Phase::fresh, now, grace());
        }
    }

    // ---- reading -------------------------------------------------------------------------------

    // The budget of one turn: a connection takes at most kTurnRequests requests and reads at most
    // kTurnBytes per loop pass, then waits on the ready list while the others have their turn,
    // so one client pipelining without pause cannot keep the loop from epoll_wait.
    bool turn_spent(Conn& c) {
        if (c.turn != pass) {
            c.turn = pass;
            c.turn_requests = 0;
            c.turn_bytes = 0;
        }
        return c.turn_requests >= kTurnRequests || c.turn_bytes >= kTurnBytes;
    }
    void defer(Conn& c) {
        if (c.ready) return;
        c.ready = true;
        ready.push_back(c.id);
    }

    // Reads what is there, within the turn's budget. Returns false when the connection was closed.
    bool on_readable(Conn& c, Clock::time_point now) {
        char buf[16384];
        if (c.phase == Phase::closing) {
            for (;;) {
                const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
                if (n > 0 && (c.lingered += static_cast<std::size_t>(n)) <= kMaxLingerBytes) continue;
                if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
                close_conn(c, nullptr);
                return false;
            }
        }
        if (c.phase == Phase::handshake) return handshake(c, now);
        if (!reading(c.phase)) return true;
        // Requests already received (a turn cut short) go before new bytes.
        if (!c.in.empty()) {
            if (!process(c, now) || c.fd < 0) return false;
            if (!reading(c.phase)) return true;
        }
        while (!c.ready) {
            if (turn_spent(c)) {
                defer(c);  // level-triggered epoll reports the socket again; TLS may hold decrypted bytes
                break;
            }
            std::size_t n = 0;
            if (c.tls) {
                c.tls_wants_write = false;
                auto r = c.tls->read(buf, sizeof buf, n);
                if (r == TlsStream::Io::want_read) break;
                if (r == TlsStream::Io::want_write) {
                    c.tls_wants_write = true;
                    break;
                }
                if (r != TlsStream::Io::ok) {
                    close_conn(c, nullptr);
                    return false;
                }
            } else {
                const ssize_t got = ::recv(c.fd, buf, sizeof buf, 0);
                if (got < 0 && (errno == EAGAIN || errno == EINTR)) break;
                if (got <= 0) {
                    close_conn(c, nullptr);  // the client went away (a half-sent head is dropped)
                    return false;
                }
                n = static_cast<std::size_t>(got);
            }
            c.turn_bytes += n;
            if (c.phase != Phase::head) set_phase(c, Phase::head, now, options.request_timeout);
            c.in.append(buf, n);
            if (!process(c, now) || c.fd < 0) return false;
            if (!reading(c.phase)) return true;
        }
        update_events(c);
        return true;
    }

    bool handshake(Conn& c, Clock::time_point now) {
        if (!c.tls) {
            // The first bytes decide: a TLS handshake starts with record type 22. A plain HTTP
            // request gets Go's answer (dcgm-exporter's test expects the 400).
            unsigned char first = 0;
            const ssize_t n = ::recv(c.fd, &first, 1, MSG_PEEK);
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
            if (n <= 0) {
                close_conn(c, nullptr);
                return false;
            }
            if (first != 0x16) {
                static constexpr std::string_view kPlain =
                    "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";
                [[maybe_unused]] auto w = ::send(c.fd, kPlain.data(), kPlain.size(), MSG_NOSIGNAL);
                ++n_tls;
                begin_close(c, now);
                return true;
            }
            c.tls = tls->accept(c.fd);
            if (!c.tls) {
                close_conn(c, &n_tls);
                return false;
            }
        }
        c.tls_wants_write = false;
        switch (c.tls->handshake()) {
        case TlsStream::Io::ok:
            // As a plain connection just accepted: fresh until the request's first byte, which
            // may already be in.
            set_phase(c, Phase::fresh, now, grace());
            return on_readable(c, now);
        case TlsStream::Io::want_read: update_events(c); return true;
        case TlsStream::Io::want_write:
            c.tls_wants_write = true;
            update_events(c);
            return true;
        case TlsStream::Io::closed:
        case TlsStream::Io::error:
            log::debug("exporter: http: {}", c.tls->error().empty() ? "TLS handshake: the client closed" : c.tls->error());
            close_conn(c, &n_tls);
            return false;
        }
        return true;
    }

    // Takes complete heads out of c.in and answers them, one at a time, within the turn's budget.
    // Returns false when the connection was closed.
    bool process(Conn& c, Clock::time_point now) {
        while (c.fd >= 0 && reading(c.phase)) {
            if (c.in.empty()) return true;
            if (turn_spent(c)) {
                defer(c);
                return true;
            }
            HeadScan scan = take_request_head(c.in, c.scanned);
            if (scan.skip > 0) c.in.erase(0, scan.skip);
            switch (scan.state) {
            case HeadScan::State::incomplete: c.scanned = scan.scanned; return true;
            case HeadScan::State::too_large:
                ++n_oversize;
                error_answer(c, 431, "request head larger than 8 KiB\n", now);
                return true;
            case HeadScan::State::complete: break;
            }
            if (c.phase != Phase::head) set_phase(c, Phase::head, now, options.request_timeout);
            c.in.erase(0, scan.length);
            c.scanned = 0;
            ++c.turn_requests;
            if (scan.head.status != 0) {
                ++n_malformed;
                error_answer(c, scan.head.status, scan.head.why + "\n", now);
                return true;
            }
            dispatch(c, std::move(scan.head), now);
        }
        return true;
    }

    // ---- answering -----------------------------------------------------------------------------

    bool rate_limited(Clock::time_point now) { return web && !bucket.take(web->rate_interval, web->rate_burst, now); }

    void dispatch(Conn& c, RequestHead p, Clock::time_point now) {
        if (rate_limited(now)) {
            answer(c, HttpResponse::text(429, "Too Many Requests\n"), p, now);
            return;
        }
        if (web && !web->users.empty()) {
            const auto creds = basic_credentials(p.authorization);
            if (!creds) {
                unauthorized(c, p, now);
                return;
            }
            auto known = web->users.find(creds->user);
            const std::string& hash = known != web->users.end() ? known->second : web->users.begin()->second;
            const std::string key = fmt::format("{}\n{}\n{}", creds->user, hash, creds->password);
            if (!checks.known_right(key)) {
                switch (checks.wait_for(key, c.peer, c.id)) {
                case PasswordChecks::Wait::joined: break;  // the same check is under way: wait for it
                case PasswordChecks::Wait::peer_full:
                    // One client cannot fill the queue: beyond kAuthPerPeer checks waiting, its
                    // new passwords are refused unchecked (a right one is then asked again).
                    unauthorized(c, p, now);
                    return;
                case PasswordChecks::Wait::start:
                    if (!auth->submit({c.id, key, creds->password, hash, known != web->users.end()})) {
                        auto r = HttpResponse::text(503, "too many password checks waiting; try again\n");
                        r.headers.emplace_back("Retry-After", "1");
                        answer(c, std::move(r), p, now);
                        return;
                    }
                    checks.started(key, c.peer, c.id);
                    break;
                }
                c.pending = std::move(p);
                c.auth_key = key;
                set_phase(c, Phase::auth, now, options.request_timeout);
                return;
            }
        }
        serve(c, p, now);
    }

    void unauthorized(Conn& c, const RequestHead& p, Clock::time_point now) {
        auto r = HttpResponse::text(401, "Unauthorized\n");
        r.headers.emplace_back("WWW-Authenticate", "Basic");
        answer(c, std::move(r), p, now);
    }

    void serve(Conn& c, const RequestHead& p, Clock::time_point now) {
        HttpRequest req;
        req.method = p.method;
        req.path = p.path;
        req.accepts_gzip = p.accepts_gzip;
        HttpResponse r;
        try {
            r = handler(req);
        } catch (const std::exception& e) {  // nothing throws across the server boundary
            log::error("exporter: http handler failed: {}", e.what());
            r = HttpResponse::text(500, "internal error\n");
        }
        answer(c, std::move(r), p, now);
    }

    void on_auth_done(Clock::time_point now) {
        if (!auth) return;
        for (auto& d : auth->take()) {
            if (!d.ok) log::error("exporter: http: {}", d.ok.error().message);
            for (const auto id : checks.finished(d.key, d.ok && *d.ok)) {
                Conn* found = table.find(id);
                // Gone, answered by its timer meanwhile, or waiting for another check now.
                if (found == nullptr || found->phase != Phase::auth || found->auth_key != d.key) continue;
                Conn& c = *found;
                RequestHead p = std::move(c.pending);
                c.auth_key.clear();
                if (!d.ok) answer(c, HttpResponse::text(500, "Internal Server Error\n"), p, now);
                else if (*d.ok) serve(c, p, now);
                else unauthorized(c, p, now);
                resume(c, now);
            }
        }
    }

    // A refusal that ends the connection.
    void error_answer(Conn& c, unsigned status, std::string text, Clock::time_point now) {
        RequestHead p;
        p.keep_alive = false;
        answer(c, HttpResponse::text(status, std::move(text)), p, now);
    }

    void answer(Conn& c, HttpResponse r, const RequestHead& p, Clock::time_point now) {
        const bool head_only = p.method == "HEAD";
        const std::size_t length = r.body ? r.body->size() : 0;
        c.close_after = !p.keep_alive || stopping;
        std::string& h = c.out_head;
        h.clear();
        h += fmt::format("HTTP/1.1 {} {}\r\nDate: {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n", r.status,
                         reason_phrase(r.status), http_date(), r.content_type, length);
        if (r.gzip) h += "Content-Encoding: gzip\r\n";
        for (const auto& [k, v] : r.headers) h += fmt::format("{}: {}\r\n", k, v);
        if (web)
            for (const auto& [k, v] : web->headers) h += fmt::format("{}: {}\r\n", k, v);
        if (c.close_after) h += "Connection: close\r\n";
        else if (p.http10) h += "Connection: keep-alive\r\n";
        h += "\r\n";
        c.out_body = head_only ? nullptr : std::move(r.body);
        c.out_pos = 0;
        set_phase(c, Phase::writing, now, options.request_timeout);
        on_writable(c, now);
    }

    // Writes what the socket takes. Returns false when the connection was closed.
    bool on_writable(Conn& c, Clock::time_point now) {
        if (c.phase == Phase::handshake) return handshake(c, now);
        if (c.phase != Phase::writing) {
            // A TLS read that wanted the socket writable.
            if (c.tls_wants_write && reading(c.phase)) return on_readable(c, now);
            return true;
        }
        const std::size_t body_size = c.out_body ? c.out_body->size() : 0;
        const std::size_t total = c.out_head.size() + body_size;
        while (c.out_pos < total) {
            std::size_t n = 0;
            if (c.tls) {
                const char* data;
                std::size_t len;
                if (c.out_pos < c.out_head.size()) {
                    data = c.out_head.data() + c.out_pos;
                    len = c.out_head.size() - c.out_pos;
                } else {
                    data = c.out_body->data() + (c.out_pos - c.out_head.size());
                    len = total - c.out_pos;
                }
                c.tls_wants_read = false;
                auto r = c.tls->write(data, len, n);
                if (r == TlsStream::Io::want_write) break;
                if (r == TlsStream::Io::want_read) {
                    c.tls_wants_read = true;
                    break;
                }
                if (r != TlsStream::Io::ok) {
                    close_conn(c, nullptr);
                    return false;
                }
            } else {
                iovec iov[2];
                int count = 0;
                if (c.out_pos < c.out_head.size()) {
                    iov[count++] = {c.out_head.data() + c.out_pos, c.out_head.size() - c.out_pos};
                    if (body_size) iov[count++] = {const_cast<char*>(c.out_body->data()), body_size};
                } else {
                    const std::size_t off = c.out_pos - c.out_head.size();
                    iov[count++] = {const_cast<char*>(c.out_body->data()) + off, body_size - off};
                }
                msghdr msg{};
                msg.msg_iov = iov;
                msg.msg_iovlen = static_cast<std::size_t>(count);
                const ssize_t w = ::sendmsg(c.fd, &msg, MSG_NOSIGNAL);
                if (w < 0 && (errno == EAGAIN || errno == EINTR)) break;
                if (w <= 0) {
                    close_conn(c, nullptr);
                    return false;
                }
                n = static_cast<std::size_t>(w);
            }
            c.out_pos += n;
        }
        if (c.out_pos < total) {
            update_events(c);
            return true;
        }
        // Done. A pipelined request already received is taken by the caller's loop (process, or
        // resume): never from here, so a stream of pipelined requests does not recurse.
        c.out_body.reset();
        c.out_head.clear();
        c.out_head.shrink_to_fit();
        if (c.close_after) {
            begin_close(c, now);
            return true;
        }
        if (c.in.empty()) {
            c.in.shrink_to_fit();
            set_phase(c, Phase::idle, now, options.idle_timeout);
        } else {
            set_phase(c, Phase::head, now, options.request_timeout);
        }
        return true;
    }

    // After an answer finished outside the reading loop (the socket became writable, a password
    // check came back, a timer): take what is already received. TLS may also hold decrypted bytes
    // epoll cannot see, so it is read too.
    void resume(Conn& c, Clock::time_point now) {
        if (c.fd < 0 || !reading(c.phase)) return;
        if (!c.in.empty() && !process(c, now)) return;
        if (c.fd >= 0 && c.tls && reading(c.phase)) on_readable(c, now);
    }

    // Ends the connection politely: close_notify and FIN, then reads (and drops) what the client
    // still sends for a moment, so our answer is not destroyed by a reset.
    void begin_close(Conn& c, Clock::time_point now) {
        if (c.tls) c.tls->shutdown();
        c.tls.reset();
        c.tls_wants_read = c.tls_wants_write = false;
        ::shutdown(c.fd, SHUT_WR);
        c.in.clear();
        c.in.shrink_to_fit();
        set_phase(c, Phase::closing, now, kLinger);
    }

    void on_timer(Conn& c, Clock::time_point now) {
        switch (c.phase) {
        case Phase::closing:
        case Phase::idle: close_conn(c, nullptr); return;
        case Phase::fresh:
            // The grace is over: an ordinary idle connection for the rest of its idle timeout.
            set_phase(c, Phase::idle, now, options.idle_timeout > grace() ? options.idle_timeout - grace() : Clock::duration{});
            return;
        case Phase::auth: {
            const RequestHead p = std::move(c.pending);
            c.auth_key.clear();
            answer(c, HttpResponse::text(503, "the password check took too long\n"), p, now);
            ++n_timeout;
            resume(c, now);
            return;
        }
        case Phase::handshake:
        case Phase::head:
        case Phase::writing: close_conn(c, &n_timeout); return;
        }
    }

    // ---- the loop ------------------------------------------------------------------------------

    void run() {
        // OpenSSL writes with write(2), which raises SIGPIPE when a client has gone: blocked on
        // this thread, such a write fails with EPIPE instead of killing the process.
        const process::SigpipeBlocked no_sigpipe;
        std::vector<epoll_event> events(256);
        while (!stopping) {
            int timeout_ms = 1000;
            const auto now0 = Clock::now();
            if (const auto next = table.next_deadline()) {
                const auto wait = std::chrono::ceil<std::chrono::milliseconds>(*next - now0).count();
                timeout_ms = static_cast<int>(std::clamp<long long>(wait, 0, 1000));
            }
            if (listen_paused) timeout_ms = std::min(timeout_ms, 100);
            if (!ready.empty()) timeout_ms = 0;  // connections with work left: just look for news
            const int n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), timeout_ms);
            if (n < 0 && errno != EINTR) {
                log::error("exporter: http: epoll_wait: {}", std::strerror(errno));
                return;
            }
            ++pass;  // every connection has a new turn
            const auto now = Clock::now();
            for (int i = 0; i < n; ++i) {
                const std::uint64_t id = events[i].data.u64;
                const std::uint32_t ev = events[i].events;
                if (id == kListenId) {
                    on_accept(now);
                    continue;
                }
                if (id == kWakeId) {
                    std::uint64_t v;
                    [[maybe_unused]] auto r = ::read(wake_fd, &v, sizeof v);
                    on_auth_done(now);
                    continue;
                }
                Conn* found = table.find(id);
                if (found == nullptr) continue;  // closed earlier in this batch
                Conn& c = *found;
                if (ev & EPOLLERR) {
                    close_conn(c, nullptr);
                    continue;
                }
                if (ev & EPOLLOUT) {
                    const bool was_writing = c.phase == Phase::writing;
                    if (!on_writable(c, now) || c.fd < 0) continue;
                    if (was_writing) resume(c, now);
                    if (c.fd < 0) continue;
                }
                if (ev & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) {
                    if (c.phase == Phase::writing && c.tls_wants_read) {
                        on_writable(c, now);  // a TLS write that needed to read first
                        if (c.fd >= 0) resume(c, now);
                        continue;
                    }
                    if (c.phase == Phase::auth || c.phase == Phase::writing) {
                        // Not reading now; a client that hung up entirely is let go.
                        if (ev & EPOLLHUP) close_conn(c, nullptr);
                        continue;
                    }
                    on_readable(c, now);
                }
            }
            // Then the connections left with work by the previous pass's budget, in the order
            // they ran out.
            for (const auto id : std::exchange(ready, {})) {
                Conn* found = table.find(id);
                if (found == nullptr) continue;
                Conn& c = *found;
                c.ready = false;
                if (reading(c.phase)) on_readable(c, now);
            }
            table.bury();
            const auto later = Clock::now();
            while (const auto id = table.first_due(later)) on_timer(*table.find(*id), later);
            table.bury();
            if (listen_paused && later >= listen_resume) {
                epoll_event e{};
                e.events = EPOLLIN;
                e.data.u64 = kListenId;
                ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, listen_fd, &e);
                listen_paused = false;
            }
        }
    }
};

Status check_web_config(const std::string& path) {
    auto cfg = load_web_config(path);
    if (!cfg) return std::unexpected(cfg.error());
    if (cfg->tls) {
        auto ctx = TlsContext::create(*cfg->tls);
        if (!ctx) return std::unexpected(ctx.error().context(path));
    }
    if (!cfg->users.empty()) {
        if (auto s = load_bcrypt(); !s) return std::unexpected(s.error().context(path));
    }
    return {};
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const HttpOptions& options, HttpHandler handler) {
    auto addr = parse_listen_address(options.address);
    if (!addr) return std::unexpected(addr.error());
    std::unique_ptr<HttpServer> server(new HttpServer());
    server->impl_ = std::make_unique<Impl>();
    Impl& im = *server->impl_;
    im.options = options;
    im.options.connection_limit = std::max(1u, options.connection_limit);
    im.options.peer_connection_limit = std::max(1u, options.peer_connection_limit);
    im.handler = std::move(handler);
    im.wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    im.epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
    if (im.wake_fd < 0 || im.epoll_fd < 0) return fail(Code::io, "listening on {}: {}", options.address, std::strerror(errno));
    if (!options.web_config_file.empty()) {
        if (auto s = im.load_web(options.web_config_file); !s) return std::unexpected(s.error());
        im.tls_enabled = im.tls != nullptr;
    }

    auto fd = listen_on(*addr, options.listen_backlog, options.address);
    if (!fd) return std::unexpected(fd.error());
    im.listen_fd = *fd;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(im.listen_fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
        return fail(Code::io, "listening on {}: getsockname: {}", options.address, std::strerror(errno));
    server->bound_ = numeric(ss);
    server->port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u64 = kListenId;
    ::epoll_ctl(im.epoll_fd, EPOLL_CTL_ADD, im.listen_fd, &e);
    e.data.u64 = kWakeId;
    ::epoll_ctl(im.epoll_fd, EPOLL_CTL_ADD, im.wake_fd, &e);
    im.thread = std::thread([&im] { im.run(); });
    return server;
}

HttpServer::~HttpServer() {
    if (!impl_) return;
    impl_->stopping = true;
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(impl_->wake_fd, &one, sizeof one);
    if (impl_->thread.joinable()) impl_->thread.join();
    impl_->auth.reset();
}

bool HttpServer::tls() const { return impl_ && impl_->tls_enabled; }

HttpServerStats HttpServer::stats() const {
    const Impl& im = *impl_;
    return HttpServerStats{im.n_open.load(),    im.n_evicted.load(),   im.n_peer.load(), im.n_timeout.load(),
                           im.n_oversize.load(), im.n_malformed.load(), im.n_tls.load()};
}

}  // namespace kgpu::exporter
