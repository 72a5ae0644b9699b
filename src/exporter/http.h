// A small HTTP/1.1 server for /metrics, /health and /: our own, on one epoll thread (issue #14,
// docs/exporter.md "HTTP server" says why it replaced libmicrohttpd).
//
// What it guarantees, so idle, slow or flooding clients cannot stop a scrape:
// - it always accepts: a connection never waits in the kernel's queue. At `connection_limit`
//   open connections a new one makes room by closing the oldest connection that is doing the
//   least: first ones already closing, then idle ones (nothing sent since the last answer, or
//   since connecting more than `new_connection_grace` ago), then ones still sending their request
//   head or just accepted (oldest first: a newcomer never pushes out the connection accepted just
//   before it), last ones being answered;
// - connections take turns: each pass of the loop serves at most 16 requests and reads at most
//   64 KiB per connection, so one client pipelining without pause does not delay the others;
// - one client address (an IPv4 address, an IPv6 /64) holds at most `peer_connection_limit`
//   connections; beyond it, its own oldest is closed, never another client's;
// - a request head must be complete within `request_timeout` of its first byte (an absolute
//   deadline: trickling bytes do not extend it), and an answer must be taken within
//   `request_timeout` too; a connection with nothing in flight is closed after `idle_timeout`;
// - a request head is at most 8 KiB (431), bodies are not read (the answer closes the
//   connection), HTTP/1.0 and 1.1 with keep-alive and pipelining;
// - with a web config (exporter-toolkit format, web_config.h): TLS, basic auth (bcrypt, checked
//   on a worker thread so a flood of wrong passwords does not hold up other clients), extra
//   response headers and a rate limit. Only right passwords are remembered (a flood of wrong
//   ones cannot push them out) and one client address has at most two checks waiting. OpenSSL
//   and libcrypt are loaded only then, so processes without TLS never map them.
// Handlers run on the server thread and must not block: the exporter's serve prepared snapshots.
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
#include "exporter/http_parse.h"

namespace kgpu::exporter {

struct HttpRequest {
    std::string_view method;    // "GET", "HEAD", ...
    std::string_view path;      // without the query string, percent-decoded
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
    std::chrono::milliseconds idle_timeout{10000};
    std::chrono::milliseconds request_timeout{10000};
    unsigned connection_limit = 1000;
    unsigned peer_connection_limit = 256;
    unsigned listen_backlog = 1024;
    // A connection accepted (or through its TLS handshake) this recently, that has sent nothing
    // yet, ranks with the request heads in progress when room is needed, not with idle ones.
    std::chrono::milliseconds new_connection_grace{1000};
    // An exporter-toolkit web config file (TLS, basic auth, headers, rate limit); "" for none.
    std::string web_config_file;
    // The clock connection ages, grace periods and timeouts are measured on (tests give one they
    // advance; it also times the pause after running out of descriptors and the rate limit's
    // refill); empty: std::chrono::steady_clock.
    std::function<std::chrono::steady_clock::time_point()> clock;
};

// Why the server closed connections before they were done (kgpu_exporter_http_connections_closed_total).
struct HttpServerStats {
    std::uint64_t open = 0;        // connections open now
    std::uint64_t evicted = 0;     // the connection limit was reached
    std::uint64_t peer_limit = 0;  // one client address held too many
    std::uint64_t timeout = 0;     // request head or answer not done within request_timeout
    std::uint64_t oversize = 0;    // request head over 8 KiB (431)
    std::uint64_t malformed = 0;   // request head refused by parse_head (400, 505, 431)
    std::uint64_t tls = 0;         // TLS handshake failed (or plain HTTP on a TLS port)
};

struct ListenAddress {
    std::string host;  // "" = every address
    std::uint16_t port = 0;
};
// Errors (invalid_argument) say what was expected: "expected host:port or :port, got 'x'".
Result<ListenAddress> parse_listen_address(std::string_view text);

// Everything HttpServer::start checks about a web config file (its YAML, its files, the
// certificate and key, the libraries TLS and bcrypt need), without serving: for the command line
// to refuse a bad file before anything starts. Errors as HttpServer::start's.
Status check_web_config(const std::string& path);

class HttpServer {
public:
    // Loads the web config (when named), binds, listens and starts the server thread. Errors: the
    // address is malformed (invalid_argument), cannot be resolved or bound (io; the message names
    // the address), the web config is invalid (parse, naming file:line) or needs a library that
    // does not load (not_found: OpenSSL for TLS, libcrypt for bcrypt).
    static Result<std::unique_ptr<HttpServer>> start(const HttpOptions& options, HttpHandler handler);
    ~HttpServer();  // stops the thread and closes every connection
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // The address actually bound, numeric: "127.0.0.1:41234", "[::]:9400".
    const std::string& bound_address() const { return bound_; }
    std::uint16_t port() const { return port_; }
    // Whether answers are served over TLS (the web config has a tls_server_config).
    bool tls() const;
    HttpServerStats stats() const;

private:
    HttpServer() = default;
    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::string bound_;
    std::uint16_t port_ = 0;
};

}  // namespace kgpu::exporter
