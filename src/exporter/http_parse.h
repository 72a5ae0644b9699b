// The HTTP/1.x request head parser of the exporter's server (http.h), as pure functions of the
// bytes received: the server calls take_request_head on what a connection has sent, and so do the
// fuzz target (fuzz/targets/http_head.cpp) and the unit tests. Nothing here touches a socket.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kgpu::exporter {

inline constexpr std::size_t kMaxRequestHead = 8192;  // request line + header lines (431 beyond)
inline constexpr std::size_t kMaxRequestHeaders = 100;

// A request head, parsed. status != 0: the request is refused with that status (and `why`, a
// short text for the answer's body); the connection is then closed.
struct RequestHead {
    unsigned status = 0;
    std::string why;
    std::string method;         // a token ("GET", "HEAD", ...), never empty when status == 0
    std::string path;           // starts with '/' (or is "*"): without query, percent-decoded, no NUL
    std::string authorization;  // the Authorization header's value, "" when none
    bool http10 = false;        // HTTP/1.0 (else 1.1)
    bool keep_alive = true;     // the connection may carry another request after the answer
    bool accepts_gzip = false;  // Accept-Encoding names gzip (or *) with q > 0
    bool has_body = false;      // Content-Length > 0 or Transfer-Encoding (never read: keep_alive is false)
};

// Parses a complete head: request line and header lines, up to but without the empty line that
// ends it (leading empty lines are skipped too). Lines may end in CRLF or LF, as Go's server
// accepts. Refuses (400) what Go's net/http refuses: a malformed request line, method, target or
// header line, a control character (other than tab) in a header value, HTTP/1.1 without exactly
// one Host header, a conflicting Content-Length; 505 for HTTP/2+, 431 for more than 100 headers.
RequestHead parse_head(std::string_view head);

// What the server makes of the bytes a connection has sent so far (`in`, which starts where the
// previous request ended).
struct HeadScan {
    enum class State {
        incomplete,  // no complete head yet: keep reading (an end can still come within the limit)
        complete,    // `head` is the next request (or its refusal, head.status != 0)
        too_large,   // the head is longer than kMaxRequestHead bytes plus its final line end: 431
    };
    State state = State::incomplete;
    std::size_t skip = 0;     // empty lines before the request line (RFC 9112 2.2): drop these first
    std::size_t length = 0;   // complete: bytes of the head after `skip`, with its empty line
    std::size_t scanned = 0;  // incomplete: pass as `scanned` next time (after dropping `skip`)
    RequestHead head;         // complete
};
// `scanned`: bytes at the start of `in` (after any leading empty lines) already known to hold no
// head end, from the previous call on the same connection; 0 for a fresh look.
HeadScan take_request_head(std::string_view in, std::size_t scanned = 0);

// Whether an Accept-Encoding header value accepts gzip.
bool accepts_gzip(std::string_view accept_encoding);

}  // namespace kgpu::exporter
