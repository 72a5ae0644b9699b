// A minimal HTTP/1.0 GET over a plain TCP socket, enough to scrape the exporter's /metrics
// (no client library in Debian worth a dependency for one request).
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace kgpu::demo {

struct HttpResponse {
    int status = 0;
    std::string headers;  // the header block, without the status line
    std::string body;
};

// The most a response may hold (status line, headers and body): the exporter's /metrics on a
// large node is a few MiB; anything past this is a wrong peer, not a scrape.
inline constexpr size_t kMaxResponseBytes = 32u << 20;

// GET http://<host>:<port><path>, "Connection: close", read to EOF. `host` is an IPv4 address.
// A signal interrupting a wait is retried, not taken for a timeout. Errors: io (connect/read
// failed, naming host:port; also a response over `max_bytes`), timeout, parse (no status line).
Result<HttpResponse> http_get(const std::string& host, int port, const std::string& path, std::chrono::milliseconds timeout,
                              size_t max_bytes = kMaxResponseBytes);

struct ListenAddress {
    std::string host;  // IPv4, as logged
    int port = 0;      // 1..65535
};

// Where `kgpu exporter` listens, from its log: the line "exporter: listening on <ipv4>:<port>"
// (src/exporter/exporter.cpp). nullopt while no such line is there. Errors: parse when the line
// names port 0 or a port above 65535.
Result<std::optional<ListenAddress>> find_listening_address(std::string_view log);

}  // namespace kgpu::demo
