// HTTP/1.1 responses as the API client reads them (client.h): framing and a failure's words.
// Separate from the client so the fuzz build takes it alone (fuzz/targets/kube_http.cpp).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>

#include "common/error.h"

namespace kgpu::kube {

struct Response {
    int status = 0;
    std::map<std::string, std::string> headers;  // names lower-cased
    std::string body;
};

// One HTTP/1.1 response from its bytes: status line, headers, then a body framed by
// Content-Length or chunked transfer coding (or, with neither, by the end of the connection:
// `at_eof`). `complete` is false when more bytes are needed. Errors: parse, naming what is wrong
// (a body over `max_body` included).
Result<Response> parse_response(std::string_view bytes, bool at_eof, bool& complete, std::size_t max_body = 64u << 20);

// "GET /api/v1/nodes/x: 403 Forbidden: <the Status object's message>" for a response that is not 2xx.
std::string describe_failure(std::string_view method, std::string_view path, const Response& r);

}  // namespace kgpu::kube
