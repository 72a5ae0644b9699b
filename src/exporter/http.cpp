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

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "common/process.h"
#include "exporter/http_impl.h"
#include "exporter/listen.h"
#include "exporter/tls.h"
#include "exporter/web_config.h"

namespace kgpu::exporter {

HttpResponse HttpResponse::text(unsigned status, std::string body) {
    HttpResponse r;
    r.status = status;
    r.body = std::make_shared<const std::string>(std::move(body));
    return r;
}

HttpServer::Impl::~Impl() {
    table.for_each([](Conn& c) { ::close(c.fd); });
    if (listen_fd >= 0) ::close(listen_fd);
    if (epoll_fd >= 0) ::close(epoll_fd);
    if (wake_fd >= 0) ::close(wake_fd);
}

void HttpServer::Impl::set_events(Conn& c, std::uint32_t ev) {
    if (ev == c.events) return;
    epoll_event e{};
    e.events = ev;
    e.data.u64 = c.id;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &e);
    c.events = ev;
}

void HttpServer::Impl::set_phase(Conn& c, Phase p, Clock::time_point now, Clock::duration timeout) {
    if (c.fd < 0) return;  // closed earlier in this batch
    table.set_phase(c, p, now, timeout);
    // An answer is written at once (answer() calls on_writable next): EPOLLOUT is asked for only
    // when the socket does not take it all, which saves two epoll_ctl calls per scrape.
    if (p != Phase::writing) update_events(c);
}

void HttpServer::Impl::update_events(Conn& c) {
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

void HttpServer::Impl::close_conn(Conn& c, std::atomic<std::uint64_t>* counter) {
    if (counter) ++*counter;
    if (!c.auth_key.empty()) forget_auth_wait(c);
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
    c.tls.reset();
    ::close(c.fd);
    c.fd = -1;
    table.take_out(c);
    n_open = table.size();
}

void HttpServer::Impl::forget_auth_wait(Conn& c) {
    const std::string key = std::exchange(c.auth_key, {});
    if (checks.leave(key, c.id) && auth && auth->cancel(key)) checks.dropped(key);
}

bool HttpServer::Impl::evict(std::optional<std::uint64_t> id, std::atomic<std::uint64_t>& counter) {
    Conn* c = id ? table.find(*id) : nullptr;
    if (c == nullptr) return false;
    close_conn(*c, &counter);
    return true;
}

Status HttpServer::Impl::load_web(const std::string& path) {
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
        bucket.reset(cfg->rate_burst, now());
    web_reload.loaded(cfg->files);
    web = std::move(*cfg);
    tls = std::move(ctx);
    checks.forget_right();
    return {};
}

void HttpServer::Impl::maybe_reload(Clock::time_point now) {
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

void HttpServer::Impl::on_timer(Conn& c, Clock::time_point now) {
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

void HttpServer::Impl::fire_due_timers(Clock::time_point now) {
    while (const auto id = table.first_due(now)) on_timer(*table.find(*id), now);
    table.bury();
}

void HttpServer::Impl::on_conn_event(Conn& c, std::uint32_t ev, Clock::time_point now) {
    if (ev & EPOLLERR) {
        close_conn(c, nullptr);
        return;
    }
    if (ev & EPOLLOUT) {
        const bool was_writing = c.phase == Phase::writing;
        if (!on_writable(c, now) || c.fd < 0) return;
        if (was_writing) resume(c, now);
        if (c.fd < 0) return;
    }
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) {
        if (c.phase == Phase::writing && c.tls_wants_read) {
            on_writable(c, now);  // a TLS write that needed to read first
            if (c.fd >= 0) resume(c, now);
            return;
        }
        if (c.phase == Phase::auth || c.phase == Phase::writing) {
            // Not reading now; a client that hung up entirely is let go.
            if (ev & EPOLLHUP) close_conn(c, nullptr);
            return;
        }
        on_readable(c, now);
    }
}

void HttpServer::Impl::run() {
    // OpenSSL writes with write(2), which raises SIGPIPE when a client has gone: blocked on
    // this thread, such a write fails with EPIPE instead of killing the process.
    const process::SigpipeBlocked no_sigpipe;
    std::vector<epoll_event> events(256);
    while (!stopping) {
        int timeout_ms = 1000;
        const auto now0 = now();
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
        const auto now = this->now();
        // Timers due first: a newcomer's room is made by ranks as they are now (a fresh
        // connection whose grace ran out while epoll waited is idle, not a head in progress).
        fire_due_timers(now);
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
            if (Conn* c = table.find(id)) on_conn_event(*c, ev, now);  // else closed earlier in this batch
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
        const auto later = this->now();
        fire_due_timers(later);
        if (listen_paused && later >= listen_resume) {
            epoll_event e{};
            e.events = EPOLLIN;
            e.data.u64 = kListenId;
            ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, listen_fd, &e);
            listen_paused = false;
        }
    }
}

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
    e.data.u64 = Impl::kListenId;
    ::epoll_ctl(im.epoll_fd, EPOLL_CTL_ADD, im.listen_fd, &e);
    e.data.u64 = Impl::kWakeId;
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
