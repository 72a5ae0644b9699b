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

Status ResponseReader::parse_head(std::string_view lines) {
    auto eol = lines.find("\r\n");
    const std::string_view status_line = lines.substr(0, eol);
    if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12 || status_line[8] != ' ')
        return fail(Code::parse, "HTTP response: '{}' is not an HTTP/1.x status line", status_line.substr(0, 64));
    {
        const auto code = status_line.substr(9, 3);
        auto [p, ec] = std::from_chars(code.data(), code.data() + code.size(), head_.status);
        if (ec != std::errc{} || p != code.data() + 3 || head_.status < 100 || head_.status > 599)
            return fail(Code::parse, "HTTP response: '{}': no status code", status_line.substr(0, 64));
    }
    while (eol != std::string_view::npos) {
        lines.remove_prefix(eol + 2);
        eol = lines.find("\r\n");
        const auto line = lines.substr(0, eol);
        const auto colon = line.find(':');
        if (colon == std::string_view::npos || colon == 0)
            return fail(Code::parse, "HTTP response: header line '{}' has no name", line.substr(0, 64));
        head_.headers[strings::lower(line.substr(0, colon))] = std::string(strings::trim(line.substr(colon + 1)));
    }
    if (head_.status / 100 == 1 || head_.status == 204 || head_.status == 304) {
        state_ = State::done;
        return {};
    }
    if (auto te = head_.headers.find("transfer-encoding"); te != head_.headers.end()) {
        if (strings::lower(te->second) != "chunked")
            return fail(Code::parse, "HTTP response: transfer-encoding '{}' is not supported", te->second);
        state_ = State::chunk_size;
        return {};
    }
    if (auto cl = head_.headers.find("content-length"); cl != head_.headers.end()) {
        std::size_t n = 0;
        auto [p, ec] = std::from_chars(cl->second.data(), cl->second.data() + cl->second.size(), n);
        if (ec != std::errc{} || p != cl->second.data() + cl->second.size())
            return fail(Code::parse, "HTTP response: content-length '{}' is not a number", cl->second.substr(0, 32));
        if (n > max_body_) return fail(Code::parse, "HTTP response: body of {} bytes is over {}", n, max_body_);
        remaining_ = n;
        state_ = n == 0 ? State::done : State::length;
        return {};
    }
    state_ = State::to_close;
    return {};
}

Status ResponseReader::take_body(std::size_t n) {
    if (n > max_body_ - std::min(total_, max_body_)) return fail(Code::parse, "HTTP response: body over {} bytes", max_body_);
    total_ += n;
    return {};
}

Status ResponseReader::feed(std::string_view bytes, std::string& body) {
    while (!bytes.empty() && state_ != State::done) {
        switch (state_) {
        case State::head: {
            // The end of the head may straddle two reads: look from 3 bytes before the new ones.
            const std::size_t from = line_.size() < 3 ? 0 : line_.size() - 3;
            line_.append(bytes);
            bytes = {};
            const auto end = line_.find("\r\n\r\n", from);
            if (end == std::string::npos ? line_.size() > 64 * 1024 + 3 : end > 64 * 1024)
                return fail(Code::parse, "HTTP response: headers longer than 64 KiB");
            if (end == std::string::npos) break;
            std::string rest = line_.substr(end + 4);
            const std::string text = line_.substr(0, end);
            line_.clear();
            if (auto st = parse_head(text); !st) return st;
            bytes = {};
            if (!rest.empty()) return feed(rest, body);
            break;
        }
        case State::length:
        case State::chunk_data: {
            const std::size_t n = std::min(remaining_, bytes.size());
            body.append(bytes.substr(0, n));
            bytes.remove_prefix(n);
            remaining_ -= n;
            if (remaining_ == 0) state_ = state_ == State::length ? State::done : State::chunk_end;
            break;
        }
        case State::to_close:
            if (auto st = take_body(bytes.size()); !st) return st;
            body.append(bytes);
            bytes = {};
            break;
        case State::chunk_end:
            // The CRLF after a chunk's data (it may come one byte at a time).
            line_.push_back(bytes.front());
            bytes.remove_prefix(1);
            if (line_.size() == 2) {
                if (line_ != "\r\n")
                    return fail(Code::parse, "HTTP response: a chunk is not followed by CRLF");
                line_.clear();
                state_ = State::chunk_size;
            }
            break;
        case State::chunk_size:
        case State::trailers: {
            const auto eol = bytes.find('\n');
            line_.append(bytes.substr(0, eol == std::string_view::npos ? bytes.size() : eol + 1));
            bytes.remove_prefix(eol == std::string_view::npos ? bytes.size() : eol + 1);
            if (line_.size() > 4096) return fail(Code::parse, "HTTP response: a chunk-size or trailer line over 4 KiB");
            if (eol == std::string_view::npos) break;
            if (line_.size() < 2 || line_[line_.size() - 2] != '\r')
                return fail(Code::parse, "HTTP response: a chunk-size or trailer line does not end in CRLF");
            std::string_view text(line_.data(), line_.size() - 2);
            if (state_ == State::trailers) {
                if (text.empty()) state_ = State::done;  // trailers (ignored) end at an empty line
                line_.clear();
                break;
            }
            if (auto semi = text.find(';'); semi != std::string_view::npos) text = text.substr(0, semi);
            text = strings::trim(text);
            std::size_t n = 0;
            auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n, 16);
            if (text.empty() || ec != std::errc{} || p != text.data() + text.size())
                return fail(Code::parse, "HTTP response: chunk size '{}' is not hexadecimal", text.substr(0, 32));
            if (auto st = take_body(n); !st) return st;
            line_.clear();
            remaining_ = n;
            state_ = n == 0 ? State::trailers : State::chunk_data;
            break;
        }
        case State::done: break;
        }
    }
    return {};
}

Status ResponseReader::finish() {
    switch (state_) {
    case State::done: return {};
    case State::to_close: state_ = State::done; return {};
    case State::head: return fail(Code::parse, "HTTP response: the connection closed before the headers ended");
    case State::length:
        return fail(Code::parse, "HTTP response: the connection closed {} bytes before the end of the body (content-length {})",
                    remaining_, head_.headers.at("content-length"));
    default: return fail(Code::parse, "HTTP response: the connection closed inside a chunked body");
    }
}

Result<Response> parse_response(std::string_view bytes, bool at_eof, bool& complete, std::size_t max_body) {
    complete = false;
    ResponseReader reader(max_body);
    std::string body;
    if (auto st = reader.feed(bytes, body); !st) return std::unexpected(st.error());
    if (at_eof)
        if (auto st = reader.finish(); !st) return std::unexpected(st.error());
    complete = reader.complete();
    Response r = reader.head();
    if (complete) r.body = std::move(body);
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
