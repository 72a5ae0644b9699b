#include "exporter/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "common/log.h"
#include "common/strings.h"

namespace kgpu::exporter {

HttpResponse HttpResponse::text(unsigned status, std::string body) {
    HttpResponse r;
    r.status = status;
    r.body = std::make_shared<const std::string>(std::move(body));
    return r;
}

Result<ListenAddress> parse_listen_address(std::string_view text) {
    auto bad = [&] {
        return fail(Code::invalid_argument, "expected host:port, :port or [ipv6]:port with a port 0-65535, got '{}'",
                    text);
    };
    ListenAddress out;
    std::string_view port;
    if (text.starts_with('[')) {
        auto close = text.find(']');
        if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') return bad();
        out.host = std::string(text.substr(1, close - 1));
        port = text.substr(close + 2);
        if (out.host.empty()) return bad();
    } else {
        auto colon = text.rfind(':');
        if (colon == std::string_view::npos) return bad();
        out.host = std::string(text.substr(0, colon));
        if (out.host.find(':') != std::string::npos) return bad();  // a bare IPv6 address needs brackets
        port = text.substr(colon + 1);
    }
    unsigned value = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (port.empty() || ec != std::errc() || p != port.data() + port.size() || value > 65535) return bad();
    out.port = static_cast<std::uint16_t>(value);
    return out;
}

bool accepts_gzip(std::string_view header) {
    for (auto part : strings::split(header, ',')) {
        auto semi = part.find(';');
        auto coding = strings::trim(part.substr(0, semi));
        if (!(strings::lower(coding) == "gzip" || coding == "*")) continue;
        if (semi == std::string_view::npos) return true;
        // "gzip;q=0" refuses it; any other q accepts.
        auto params = strings::trim(part.substr(semi + 1));
        if (params.starts_with("q=") || params.starts_with("Q=")) {
            auto q = strings::trim(params.substr(2));
            bool zero = !q.empty();
            for (char c : q)
                if (c != '0' && c != '.') zero = false;
            if (zero) continue;
        }
        return true;
    }
    return false;
}

namespace {

struct Socket {
    int fd = -1;
    ~Socket() {
        if (fd >= 0) ::close(fd);
    }
    int release() { return std::exchange(fd, -1); }
};

std::string numeric(const sockaddr_storage& ss) {
    char host[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET6) {
        auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
        ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        return fmt::format("[{}]:{}", host, ntohs(a->sin6_port));
    }
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    return fmt::format("{}:{}", host, ntohs(a->sin_port));
}

Result<int> bind_one(const sockaddr* addr, socklen_t len, int family, unsigned backlog, bool dual_stack) {
    Socket s;
    s.fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s.fd < 0) return fail(Code::io, "socket: {}", std::strerror(errno));
    int one = 1;
    ::setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (family == AF_INET6) {
        int v6only = dual_stack ? 0 : 1;
        ::setsockopt(s.fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
    }
    if (::bind(s.fd, addr, len) != 0) return fail(Code::io, "bind: {}", std::strerror(errno));
    if (::listen(s.fd, static_cast<int>(backlog)) != 0) return fail(Code::io, "listen: {}", std::strerror(errno));
    return s.release();
}

Result<int> listen_on(const ListenAddress& a, unsigned backlog, const std::string& text) {
    if (a.host.empty()) {
        // Every address: IPv6 with IPv4 mapped, or IPv4 alone where the host has no IPv6.
        sockaddr_in6 six{};
        six.sin6_family = AF_INET6;
        six.sin6_addr = in6addr_any;
        six.sin6_port = htons(a.port);
        auto fd = bind_one(reinterpret_cast<sockaddr*>(&six), sizeof six, AF_INET6, backlog, true);
        if (fd) return fd;
        sockaddr_in four{};
        four.sin_family = AF_INET;
        four.sin_addr.s_addr = htonl(INADDR_ANY);
        four.sin_port = htons(a.port);
        auto fd4 = bind_one(reinterpret_cast<sockaddr*>(&four), sizeof four, AF_INET, backlog, false);
        if (!fd4) return fail(Code::io, "listening on {}: {}", text, fd4.error().message);
        return fd4;
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const std::string port = fmt::format("{}", a.port);
    if (int rc = ::getaddrinfo(a.host.c_str(), port.c_str(), &hints, &res); rc != 0)
        return fail(Code::io, "listening on {}: cannot resolve '{}': {}", text, a.host, ::gai_strerror(rc));
    std::string why;
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
        auto fd = bind_one(ai->ai_addr, ai->ai_addrlen, ai->ai_family, backlog, false);
        if (fd) {
            ::freeaddrinfo(res);
            return fd;
        }
        why = fd.error().message;
    }
    ::freeaddrinfo(res);
    return fail(Code::io, "listening on {}: {}", text, why);
}

void free_body(void* cls) { delete static_cast<std::shared_ptr<const std::string>*>(cls); }

void mhd_log(void*, const char* fmt, va_list ap) {
    char buf[512];
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    std::string_view msg = strings::trim(buf);
    if (!msg.empty()) log::debug("exporter: http: {}", msg);
}

}  // namespace

struct HttpServer::Impl {
    HttpHandler handler;
    MHD_Daemon* daemon = nullptr;

    static MHD_Result on_request(void* cls, MHD_Connection* conn, const char* url, const char* method,
                                 const char* /*version*/, const char* /*upload_data*/, size_t* upload_data_size,
                                 void** req_cls) {
        auto* self = static_cast<Impl*>(cls);
        // A body (never expected) is read and dropped; answer once the headers are in.
        if (*req_cls == nullptr) {
            *req_cls = self;
        } else if (*upload_data_size != 0) {
            *upload_data_size = 0;
            return MHD_YES;
        }
        HttpRequest req;
        req.method = method ? method : "";
        req.path = url ? url : "";
        if (auto q = req.path.find('?'); q != std::string_view::npos) req.path = req.path.substr(0, q);
        const char* ae = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT_ENCODING);
        req.accepts_gzip = ae && accepts_gzip(ae);

        HttpResponse r;
        try {
            r = self->handler(req);
        } catch (const std::exception& e) {  // nothing throws across the server boundary
            log::error("exporter: http handler failed: {}", e.what());
            r = HttpResponse::text(500, "internal error\n");
        }
        auto* keep = new std::shared_ptr<const std::string>(r.body ? r.body : std::make_shared<const std::string>());
        MHD_Response* resp = MHD_create_response_from_buffer_with_free_callback_cls(
            (*keep)->size(), const_cast<char*>((*keep)->data()), &free_body, keep);
        if (!resp) {
            delete keep;
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r.content_type.c_str());
        if (r.gzip) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
        for (const auto& [k, v] : r.headers) MHD_add_response_header(resp, k.c_str(), v.c_str());
        MHD_Result ok = MHD_queue_response(conn, r.status, resp);
        MHD_destroy_response(resp);
        return ok;
    }
};

Result<std::unique_ptr<HttpServer>> HttpServer::start(const HttpOptions& options, HttpHandler handler) {
    auto addr = parse_listen_address(options.address);
    if (!addr) return std::unexpected(addr.error());
    auto fd = listen_on(*addr, options.listen_backlog, options.address);
    if (!fd) return std::unexpected(fd.error());
    Socket sock;
    sock.fd = *fd;

    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(sock.fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
        return fail(Code::io, "listening on {}: getsockname: {}", options.address, std::strerror(errno));

    std::unique_ptr<HttpServer> server(new HttpServer());
    server->impl_ = std::make_unique<Impl>();
    server->impl_->handler = std::move(handler);
    server->bound_ = numeric(ss);
    server->port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);

    const unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    server->impl_->daemon = MHD_start_daemon(
        flags, 0, nullptr, nullptr, &Impl::on_request, server->impl_.get(),              //
        MHD_OPTION_LISTEN_SOCKET, static_cast<MHD_socket>(sock.fd),                      //
        MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(options.idle_timeout.count()),  //
        MHD_OPTION_CONNECTION_LIMIT, options.connection_limit,                           //
        MHD_OPTION_EXTERNAL_LOGGER, &mhd_log, nullptr,                                   //
        MHD_OPTION_END);
    if (!server->impl_->daemon)
        return fail(Code::io, "listening on {}: libmicrohttpd did not start (see the debug log)", options.address);
    sock.release();  // the daemon owns it now and closes it when stopped
    return server;
}

HttpServer::~HttpServer() {
    if (impl_ && impl_->daemon) MHD_stop_daemon(impl_->daemon);
}

}  // namespace kgpu::exporter
