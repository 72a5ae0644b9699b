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
    std::string host;  // IPv4, as written
    int port = 0;      // 1..65535
};

// Where `kgpu exporter` listens, from the text of its --ready-file: "<ipv4>:<port>\n"
// (src/exporter/exporter.cpp writes it atomically). nullopt while the text is empty (no file yet).
// Errors: parse for anything else, or a port 0 or above 65535.
Result<std::optional<ListenAddress>> parse_ready_address(std::string_view text);

}  // namespace kgpu::demo
