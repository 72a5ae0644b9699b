// Test helpers for the exporter: a parser for the text exposition format (enough to check what
// kgpu writes, and strict about it), and a tiny blocking HTTP/1.1 client for loopback.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kgpu::test {

struct ParsedSample {
    std::string name;
    std::vector<std::pair<std::string, std::string>> labels;  // in the order written
    double value = 0;
    std::string line;

    std::optional<std::string> label(std::string_view name) const;
};

struct ParsedMetrics {
    std::vector<ParsedSample> samples;
    std::map<std::string, std::string> help, type;
    std::vector<std::string> errors;  // format violations found while parsing

    // Samples of `name` whose labels include every given pair.
    std::vector<const ParsedSample*> find(std::string_view name,
                                          const std::map<std::string, std::string>& labels = {}) const;
    // The one sample matching, or nullopt when none or several match.
    std::optional<double> value(std::string_view name, const std::map<std::string, std::string>& labels = {}) const;
};

// Parses the 0.0.4 text format, recording violations in errors: HELP/TYPE twice or after a
// sample of the family, a family's samples not contiguous, malformed lines or escapes, duplicate
// name+label sets, a missing final newline.
ParsedMetrics parse_metrics(std::string_view text);

struct HttpResult {
    int status = 0;  // 0: no answer (connection failed or timed out)
    std::map<std::string, std::string> headers;  // lower-case names
    std::string body;
};

// An HTTP/1.x answer as read from the socket, split into status, headers and body (the body as
// sent: chunked bodies are not decoded here); status 0 when it is not one.
HttpResult split_http_answer(const std::string& data);

// One request on a fresh connection to 127.0.0.1:port with Connection: close; reads the whole
// answer. `timeout_ms` bounds the whole exchange.
HttpResult http_request(int port, std::string_view method, std::string_view path,
                        const std::vector<std::string>& extra_headers = {}, int timeout_ms = 30000);

// Connects to 127.0.0.1:port, from `source_ip` when given (another loopback address such as
// 127.0.0.2: the server sees another client); -1 on failure.
int connect_loopback(int port, const char* source_ip = nullptr);

// A query-string value, percent-encoded (everything but letters, digits, '_', '-' and '.').
std::string url_encode(std::string_view s);

// gunzip; nullopt on a malformed stream.
std::optional<std::string> gunzip(std::string_view data);

}  // namespace kgpu::test
