// HttpServer::Impl (http_impl.h): accepting connections and reading their requests.
#include "exporter/http_impl.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "common/log.h"
#include "exporter/listen.h"

namespace kgpu::exporter {

void HttpServer::Impl::on_accept(Clock::time_point now) {
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

void HttpServer::Impl::pause_listen(Clock::time_point now) {
    epoll_event e{};
    e.data.u64 = kListenId;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, listen_fd, &e);
    listen_paused = true;
    listen_resume = now + std::chrono::milliseconds(100);
}

void HttpServer::Impl::admit(int fd, const sockaddr_storage& ss, Clock::time_point now) {
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

bool HttpServer::Impl::turn_spent(Conn& c) {
    if (c.turn != pass) {
        c.turn = pass;
        c.turn_requests = 0;
        c.turn_bytes = 0;
    }
    return c.turn_requests >= kTurnRequests || c.turn_bytes >= kTurnBytes;
}

void HttpServer::Impl::defer(Conn& c) {
    if (c.ready) return;
    c.ready = true;
    ready.push_back(c.id);
}

bool HttpServer::Impl::on_readable(Conn& c, Clock::time_point now) {
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

bool HttpServer::Impl::handshake(Conn& c, Clock::time_point now) {
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

bool HttpServer::Impl::process(Conn& c, Clock::time_point now) {
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

}  // namespace kgpu::exporter
