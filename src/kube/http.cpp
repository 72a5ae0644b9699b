// HTTP/1.1 response framing for the API client (http.h).
#include "kube/http.h"

#include <charconv>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/strings.h"

namespace kgpu::kube {
namespace {

std::string status_text(int status) {
    switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "";
    }
}

}  // namespace

Result<Response> parse_response(std::string_view bytes, bool at_eof, bool& complete, std::size_t max_body) {
    complete = false;
    const auto end = bytes.find("\r\n\r\n");
    if (end == std::string_view::npos) {
        if (bytes.size() > 64 * 1024) return fail(Code::parse, "HTTP response: headers longer than 64 KiB");
        if (at_eof) return fail(Code::parse, "HTTP response: the connection closed before the headers ended");
        return Response{};
    }
    Response r;
    auto lines = bytes.substr(0, end);
    auto eol = lines.find("\r\n");
    const std::string_view status_line = lines.substr(0, eol);
    if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12 || status_line[8] != ' ')
        return fail(Code::parse, "HTTP response: '{}' is not an HTTP/1.x status line", status_line.substr(0, 64));
    {
        const auto code = status_line.substr(9, 3);
        auto [p, ec] = std::from_chars(code.data(), code.data() + code.size(), r.status);
        if (ec != std::errc{} || p != code.data() + 3 || r.status < 100 || r.status > 599)
            return fail(Code::parse, "HTTP response: '{}': no status code", status_line.substr(0, 64));
    }
    while (eol != std::string_view::npos) {
        lines.remove_prefix(eol + 2);
        eol = lines.find("\r\n");
        const auto line = lines.substr(0, eol);
        const auto colon = line.find(':');
        if (colon == std::string_view::npos || colon == 0)
            return fail(Code::parse, "HTTP response: header line '{}' has no name", line.substr(0, 64));
        r.headers[strings::lower(line.substr(0, colon))] = std::string(strings::trim(line.substr(colon + 1)));
    }
    std::string_view body = bytes.substr(end + 4);
    if (r.status / 100 == 1 || r.status == 204 || r.status == 304) {
        complete = true;
        return r;
    }
    if (auto te = r.headers.find("transfer-encoding"); te != r.headers.end()) {
        if (strings::lower(te->second) != "chunked")
            return fail(Code::parse, "HTTP response: transfer-encoding '{}' is not supported", te->second);
        for (;;) {
            const auto size_end = body.find("\r\n");
            if (size_end == std::string_view::npos) break;
            auto size_text = body.substr(0, size_end);
            if (auto semi = size_text.find(';'); semi != std::string_view::npos) size_text = size_text.substr(0, semi);
            size_text = strings::trim(size_text);
            std::size_t n = 0;
            auto [p, ec] = std::from_chars(size_text.data(), size_text.data() + size_text.size(), n, 16);
            if (ec != std::errc{} || p != size_text.data() + size_text.size())
                return fail(Code::parse, "HTTP response: chunk size '{}' is not hexadecimal", size_text.substr(0, 32));
            if (n > max_body || r.body.size() + n > max_body)
                return fail(Code::parse, "HTTP response: body over {} bytes", max_body);
            if (n == 0) {
                // Trailers (ignored) up to an empty line.
                auto rest = body.substr(size_end + 2);
                for (;;) {
                    const auto t = rest.find("\r\n");
                    if (t == std::string_view::npos) break;
                    if (t == 0) {
                        complete = true;
                        return r;
                    }
                    rest.remove_prefix(t + 2);
                }
                break;
            }
            if (body.size() < size_end + 2 + n + 2) break;
            if (body.substr(size_end + 2 + n, 2) != "\r\n")
                return fail(Code::parse, "HTTP response: a chunk of {} bytes is not followed by CRLF", n);
            r.body.append(body.substr(size_end + 2, n));
            body.remove_prefix(size_end + 2 + n + 2);
        }
        if (at_eof) return fail(Code::parse, "HTTP response: the connection closed inside a chunked body");
        r.body.clear();
        return r;
    }
    if (auto cl = r.headers.find("content-length"); cl != r.headers.end()) {
        std::size_t n = 0;
        auto [p, ec] = std::from_chars(cl->second.data(), cl->second.data() + cl->second.size(), n);
        if (ec != std::errc{} || p != cl->second.data() + cl->second.size())
            return fail(Code::parse, "HTTP response: content-length '{}' is not a number", cl->second.substr(0, 32));
        if (n > max_body) return fail(Code::parse, "HTTP response: body of {} bytes is over {}", n, max_body);
        if (body.size() < n) {
            if (at_eof)
                return fail(Code::parse, "HTTP response: the connection closed after {} of {} body bytes", body.size(), n);
            return r;
        }
        r.body = std::string(body.substr(0, n));
        complete = true;
        return r;
    }
    if (body.size() > max_body) return fail(Code::parse, "HTTP response: body over {} bytes", max_body);
    if (at_eof) {
        r.body = std::string(body);
        complete = true;
    }
    return r;
}

std::string describe_failure(std::string_view method, std::string_view path, const Response& r) {
    std::string message;
    try {
        auto j = nlohmann::json::parse(r.body);
        if (j.is_object() && j.contains("message") && j["message"].is_string()) message = j["message"].get<std::string>();
    } catch (const nlohmann::json::exception&) {
    }
    if (message.empty()) message = r.body.substr(0, 200);
    const std::string text = status_text(r.status);
    return fmt::format("{} {}: {}{}{}{}", method, path, r.status, text.empty() ? "" : " ", text,
                       message.empty() ? "" : ": " + message);
}

}  // namespace kgpu::kube
