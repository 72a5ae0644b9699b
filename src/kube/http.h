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

// An HTTP/1.1 response decoded as its bytes arrive, each byte looked at once: the status line
// and headers, then the body framed by Content-Length, chunked transfer coding, or the end of
// the connection, handed out as it is decoded (a watch's body never ends). Errors: parse, naming
// what is wrong (headers over 64 KiB, a body over `max_body`, a bad chunk size...).
class ResponseReader {
public:
    explicit ResponseReader(std::size_t max_body = 64u << 20) : max_body_(max_body) {}
    // Consumes `bytes`; the body bytes decoded from them are appended to `body`.
    Status feed(std::string_view bytes, std::string& body);
    // The connection ended: completes a body framed by it; an error when the response was cut.
    Status finish();
    bool head_done() const { return state_ != State::head; }
    bool complete() const { return state_ == State::done; }
    // The status and headers once head_done() (body empty).
    const Response& head() const { return head_; }

private:
    enum class State { head, length, to_close, chunk_size, chunk_data, chunk_end, trailers, done };
    Status parse_head(std::string_view text);
    Status take_body(std::size_t n);

    std::size_t max_body_;
    State state_ = State::head;
    std::string line_;          // the head, or a chunk-size / trailer line, until it is complete
    Response head_;
    std::size_t remaining_ = 0;  // of the Content-Length body or of the current chunk
    std::size_t total_ = 0;      // body bytes so far
};

// One HTTP/1.1 response from its bytes: status line, headers, then a body framed by
// Content-Length or chunked transfer coding (or, with neither, by the end of the connection:
// `at_eof`). `complete` is false when more bytes are needed. Errors: parse, naming what is wrong
// (a body over `max_body` included).
Result<Response> parse_response(std::string_view bytes, bool at_eof, bool& complete, std::size_t max_body = 64u << 20);

// "GET /api/v1/nodes/x: 403 Forbidden: <the Status object's message>" for a response that is not 2xx.
std::string describe_failure(std::string_view method, std::string_view path, const Response& r);

}  // namespace kgpu::kube
