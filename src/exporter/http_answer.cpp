// HttpServer::Impl (http_impl.h): answering a request: routing, basic auth, writing the answer.
#include "exporter/http_impl.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <string_view>

#include "common/log.h"

namespace kgpu::exporter {

namespace {

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

}  // namespace

void HttpServer::Impl::dispatch(Conn& c, RequestHead p, Clock::time_point now) {
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

void HttpServer::Impl::unauthorized(Conn& c, const RequestHead& p, Clock::time_point now) {
    auto r = HttpResponse::text(401, "Unauthorized\n");
    r.headers.emplace_back("WWW-Authenticate", "Basic");
    answer(c, std::move(r), p, now);
}

void HttpServer::Impl::serve(Conn& c, const RequestHead& p, Clock::time_point now) {
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

void HttpServer::Impl::on_auth_done(Clock::time_point now) {
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

void HttpServer::Impl::error_answer(Conn& c, unsigned status, std::string text, Clock::time_point now) {
    RequestHead p;
    p.keep_alive = false;
    answer(c, HttpResponse::text(status, std::move(text)), p, now);
}

void HttpServer::Impl::answer(Conn& c, HttpResponse r, const RequestHead& p, Clock::time_point now) {
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

bool HttpServer::Impl::on_writable(Conn& c, Clock::time_point now) {
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

void HttpServer::Impl::resume(Conn& c, Clock::time_point now) {
    if (c.fd < 0 || !reading(c.phase)) return;
    if (!c.in.empty() && !process(c, now)) return;
    if (c.fd >= 0 && c.tls && reading(c.phase)) on_readable(c, now);
}

void HttpServer::Impl::begin_close(Conn& c, Clock::time_point now) {
    if (c.tls) c.tls->shutdown();
    c.tls.reset();
    c.tls_wants_read = c.tls_wants_write = false;
    ::shutdown(c.fd, SHUT_WR);
    c.in.clear();
    c.in.shrink_to_fit();
    set_phase(c, Phase::closing, now, kLinger);
}

}  // namespace kgpu::exporter
