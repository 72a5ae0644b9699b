#include "exporter/http_parse.h"

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "common/strings.h"

namespace kgpu::exporter {

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

bool is_token_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// A control character that may not appear in a header value (Go's httpguts.ValidHeaderFieldValue:
// CTLs other than horizontal tab).
bool is_forbidden_in_value(char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && c != '\t') || u == 0x7f;
}

bool equals_ci(std::string_view a, std::string_view b) {
    return a.size() == b.size() && strings::starts_with_ci(a, b);
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Where the head ends in `in` (just past the empty line), searching from `from`; 0 if not yet.
// `in` does not start with an empty line (take_request_head skips those).
std::size_t head_end(std::string_view in, std::size_t from) {
    for (std::size_t i = from; i < in.size(); ++i) {
        if (in[i] != '\n') continue;
        if (i + 1 < in.size() && in[i + 1] == '\n') return i + 2;
        if (i + 2 < in.size() && in[i + 1] == '\r' && in[i + 2] == '\n') return i + 3;
    }
    return 0;
}

// Bytes of empty lines ("\r\n" or "\n") at the start of `in`. A lone '\r' at the very end may
// still become one: it is left for the next look.
std::size_t leading_empty_lines(std::string_view in) {
    std::size_t i = 0;
    while (i < in.size()) {
        if (in[i] == '\n') ++i;
        else if (in[i] == '\r' && i + 1 < in.size() && in[i + 1] == '\n') i += 2;
        else break;
    }
    return i;
}

// Why a head is refused: the status and the reason.
struct Refusal {
    unsigned status;
    std::string why;
};

// The head's lines, CRLF or LF ended (the last one may have no end).
std::vector<std::string_view> head_lines(std::string_view head) {
    std::vector<std::string_view> lines;
    while (!head.empty()) {
        auto nl = head.find('\n');
        std::string_view line = head.substr(0, nl);
        if (line.ends_with('\r')) line.remove_suffix(1);
        lines.push_back(line);
        if (nl == std::string_view::npos) break;
        head.remove_prefix(nl + 1);
    }
    return lines;
}

// "METHOD target HTTP/1.x": the method and version into `p`, the target returned.
std::variant<std::string_view, Refusal> request_line(std::string_view rl, RequestHead& p) {
    const auto sp1 = rl.find(' ');
    const auto sp2 = sp1 == std::string_view::npos ? sp1 : rl.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || rl.find(' ', sp2 + 1) != std::string_view::npos)
        return Refusal{400, "malformed request line"};
    const std::string_view method = rl.substr(0, sp1), target = rl.substr(sp1 + 1, sp2 - sp1 - 1),
                           version = rl.substr(sp2 + 1);
    if (method.empty() || !std::ranges::all_of(method, is_token_char)) return Refusal{400, "malformed method"};
    if (version == "HTTP/1.0") p.http10 = true, p.keep_alive = false;
    else if (version != "HTTP/1.1") {
        if (version.starts_with("HTTP/") && version.size() == 8 && version[5] >= '2' && version[5] <= '9')
            return Refusal{505, "only HTTP/1.0 and HTTP/1.1 are served"};
        return Refusal{400, "malformed HTTP version"};
    }
    p.method = std::string(method);
    return target;
}

// The target's path: origin form "/path?query", absolute form "http://host/path", or "*";
// without query or fragment, percent-decoded.
std::variant<std::string, Refusal> target_path(std::string_view path) {
    if (path.empty()) return Refusal{400, "empty request target"};
    if (path != "*" && path.front() != '/') {
        const auto scheme = path.find("://");
        if (scheme == std::string_view::npos) return Refusal{400, "malformed request target"};
        const auto slash = path.find('/', scheme + 3);
        path = slash == std::string_view::npos ? std::string_view("/") : path.substr(slash);
    }
    if (auto q = path.find_first_of("?#"); q != std::string_view::npos) path = path.substr(0, q);
    std::string decoded;
    decoded.reserve(path.size());
    for (std::size_t i = 0; i < path.size(); ++i) {
        char c = path[i];
        if (c == '%') {
            const int hi = i + 2 < path.size() ? hex_value(path[i + 1]) : -1;
            const int lo = hi >= 0 ? hex_value(path[i + 2]) : -1;
            if (hi < 0 || lo < 0) return Refusal{400, "malformed percent-encoding in the path"};
            c = static_cast<char>(hi * 16 + lo);
            if (c == '\0') return Refusal{400, "NUL in the path"};
            i += 2;
        } else if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
            return Refusal{400, "control character in the request target"};
        }
        decoded += c;
    }
    return decoded;
}

// The header fields (up to the empty line) into `p`: authorization, gzip, a body, keep-alive.
std::optional<Refusal> header_fields(std::span<const std::string_view> lines, RequestHead& p) {
    std::optional<std::string_view> content_length;
    std::size_t headers = 0, hosts = 0;
    bool has_body = false, keep_alive = p.keep_alive, gzip = false;
    std::string authorization;
    for (const std::string_view line : lines) {
        if (line.empty()) break;
        if (++headers > kMaxRequestHeaders) return Refusal{431, "more than 100 header fields"};
        if (line.front() == ' ' || line.front() == '\t') return Refusal{400, "obsolete header line folding"};
        const auto colon = line.find(':');
        if (colon == std::string_view::npos || colon == 0) return Refusal{400, "malformed header field"};
        const std::string_view name = line.substr(0, colon);
        if (!std::ranges::all_of(name, is_token_char)) return Refusal{400, "malformed header field name"};
        const std::string_view raw = line.substr(colon + 1);
        if (std::ranges::any_of(raw, is_forbidden_in_value)) return Refusal{400, "invalid header value"};
        const std::string_view value = strings::trim(raw);
        if (equals_ci(name, "Host")) {
            if (++hosts > 1) return Refusal{400, "too many Host headers"};
        } else if (equals_ci(name, "Content-Length")) {
            if (value.empty() || !std::ranges::all_of(value, [](char c) { return c >= '0' && c <= '9'; }) ||
                (content_length && *content_length != value))
                return Refusal{400, "malformed or conflicting Content-Length"};
            content_length = value;
            if (value.find_first_not_of('0') != std::string_view::npos) has_body = true;
        } else if (equals_ci(name, "Transfer-Encoding")) {
            has_body = true;
        } else if (equals_ci(name, "Connection")) {
            for (auto token : strings::split(value, ',')) {
                token = strings::trim(token);
                if (equals_ci(token, "close")) keep_alive = false;
                else if (equals_ci(token, "keep-alive")) keep_alive = true;
            }
        } else if (equals_ci(name, "Accept-Encoding")) {
            gzip = gzip || accepts_gzip(value);
        } else if (equals_ci(name, "Authorization")) {
            authorization = std::string(value);
        }
    }
    // RFC 9112 3.2: a server must answer 400 to an HTTP/1.1 request without a Host header (Go's
    // net/http does: "missing required Host header").
    if (!p.http10 && hosts == 0) return Refusal{400, "missing required Host header"};
    p.authorization = std::move(authorization);
    p.accepts_gzip = gzip;
    p.has_body = has_body;
    // Bodies are never needed (GET and HEAD only): the answer closes the connection and the
    // body is drained while closing, so it cannot be taken for a pipelined request.
    p.keep_alive = keep_alive && !has_body;
    return std::nullopt;
}

}  // namespace

RequestHead parse_head(std::string_view head) {
    RequestHead p;
    // A refused head says why, and the version when the request line gave it.
    auto refuse = [&p](Refusal r) {
        RequestHead out;
        out.status = r.status;
        out.why = std::move(r.why);
        out.http10 = p.http10;
        out.keep_alive = p.keep_alive;
        return out;
    };
    const std::vector<std::string_view> lines = head_lines(head);
    // Empty lines before the request line are skipped (RFC 9112 2.2).
    std::size_t first = 0;
    while (first < lines.size() && lines[first].empty()) ++first;
    if (first == lines.size()) return refuse({400, "empty request"});
    auto target = request_line(lines[first], p);
    if (auto* r = std::get_if<Refusal>(&target)) return refuse(std::move(*r));
    auto path = target_path(std::get<std::string_view>(target));
    if (auto* r = std::get_if<Refusal>(&path)) return refuse(std::move(*r));
    if (auto r = header_fields(std::span(lines).subspan(first + 1), p)) return refuse(std::move(*r));
    p.path = std::move(std::get<std::string>(path));
    return p;
}

HeadScan take_request_head(std::string_view in, std::size_t scanned) {
    HeadScan s;
    s.skip = leading_empty_lines(in);
    if (s.skip > 0) scanned = 0;
    in.remove_prefix(s.skip);
    // A head is at most kMaxRequestHead bytes plus the line end of its empty line (+2, CRLF). The
    // same bytes give the same answer however they arrive: without an end yet, it is too large
    // only once no end can come within the limit any more.
    constexpr std::size_t kLimit = kMaxRequestHead + 2;
    const std::size_t end = head_end(in, scanned > 2 ? scanned - 2 : 0);
    if (end == 0) {
        s.state = in.size() >= kLimit ? HeadScan::State::too_large : HeadScan::State::incomplete;
        s.scanned = in.size();
        return s;
    }
    if (end > kLimit) {
        s.state = HeadScan::State::too_large;
        return s;
    }
    s.state = HeadScan::State::complete;
    s.length = end;
    s.head = parse_head(in.substr(0, end));
    return s;
}

}  // namespace kgpu::exporter
