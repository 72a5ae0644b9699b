// A small HTTP/1.1 server for /metrics, /health and /: libmicrohttpd with one internal thread on
// epoll (DESIGN.md "Decisions": an event-driven server, so idle or slow clients cost a file
// descriptor, not a worker; Debian's cpp-httplib stalls at 8 idle connections). Idle clients are
// closed after `idle_timeout`; at most `connection_limit` connections are open at once (new ones
// beyond are refused by closing them). Handlers run on the server thread and must not block: the
// exporter's only serve a prepared snapshot.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace kgpu::exporter {

struct HttpRequest {
    std::string_view method;  // "GET", "HEAD", ...
    std::string_view path;    // without the query string
    bool accepts_gzip = false;  // Accept-Encoding names gzip (or *) with q > 0
};

struct HttpResponse {
    unsigned status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::shared_ptr<const std::string> body;  // null: empty
    bool gzip = false;                        // body is gzip: Content-Encoding: gzip
    std::vector<std::pair<std::string, std::string>> headers;

    static HttpResponse text(unsigned status, std::string body);
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpOptions {
    // "host:port", ":port" (every address, IPv6 and IPv4 where the host has IPv6), "[v6]:port";
    // port 0 picks a free port (see HttpServer::bound_address).
    std::string address = ":9400";
    std::chrono::seconds idle_timeout{10};
    unsigned connection_limit = 1000;
    unsigned listen_backlog = 1024;
};

struct ListenAddress {
    std::string host;  // "" = every address
    std::uint16_t port = 0;
};
// Errors (invalid_argument) say what was expected: "expected host:port or :port, got 'x'".
Result<ListenAddress> parse_listen_address(std::string_view text);

// Whether an Accept-Encoding header value accepts gzip.
bool accepts_gzip(std::string_view accept_encoding);

class HttpServer {
public:
    // Binds, listens and starts the server thread. Errors: the address is malformed
    // (invalid_argument), cannot be resolved or bound (io; the message names the address).
    static Result<std::unique_ptr<HttpServer>> start(const HttpOptions& options, HttpHandler handler);
    ~HttpServer();  // stops the thread and closes every connection
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // The address actually bound, numeric: "127.0.0.1:41234", "[::]:9400".
    const std::string& bound_address() const { return bound_; }
    std::uint16_t port() const { return port_; }

private:
    HttpServer() = default;
    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::string bound_;
    std::uint16_t port_ = 0;
};

}  // namespace kgpu::exporter
