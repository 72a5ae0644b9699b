#include "demo/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <regex>

#include "common/fd.h"
#include "common/strings.h"

namespace kgpu::demo {

Result<HttpResponse> http_get(const std::string& host, int port, const std::string& path,
                              std::chrono::milliseconds timeout, size_t max_bytes) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    auto left_ms = [&] {
        auto l = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count();
        return static_cast<int>(l < 0 ? 0 : l);
    };
    // poll() for `events` until ready or the deadline; EINTR (a signal the caller handles
    // elsewhere) waits again for what is left. true when ready.
    auto wait_for = [&](int fd, short events) {
        while (true) {
            pollfd p{fd, events, 0};
            int r = ::poll(&p, 1, left_ms());
            if (r == 1) return true;
            if (r < 0 && errno == EINTR) continue;
            return false;
        }
    };
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1)
        return fail(Code::invalid_argument, "{}: not an IPv4 address", host);
    Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (s.get() < 0) return fail(Code::io, "socket: {}", std::strerror(errno));
    if (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS)
        return fail(Code::io, "connecting to {}:{}: {}", host, port, std::strerror(errno));
    if (!wait_for(s.get(), POLLOUT)) return fail(Code::timeout, "connecting to {}:{}: timed out", host, port);
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return fail(Code::io, "connecting to {}:{}: {}", host, port, std::strerror(err));

    const std::string req = "GET " + path + " HTTP/1.0\r\nHost: " + host + ":" + std::to_string(port) +
                            "\r\nConnection: close\r\nAccept: text/plain\r\n\r\n";
    size_t sent = 0;
    while (sent < req.size()) {
        if (!wait_for(s.get(), POLLOUT)) return fail(Code::timeout, "sending to {}:{}: timed out", host, port);
        ssize_t n = ::send(s.get(), req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return fail(Code::io, "sending to {}:{}: {}", host, port, std::strerror(errno));
        if (n > 0) sent += static_cast<size_t>(n);
    }
    std::string raw;
    char buf[16384];
    while (true) {
        if (!wait_for(s.get(), POLLIN)) return fail(Code::timeout, "reading from {}:{}: timed out", host, port);
        ssize_t n = ::recv(s.get(), buf, sizeof buf, 0);
        if (n == 0) break;
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            return fail(Code::io, "reading from {}:{}: {}", host, port, std::strerror(errno));
        }
        if (raw.size() + static_cast<size_t>(n) > max_bytes)
            return fail(Code::io, "{}:{}{}: the response exceeds {} bytes; not read further", host, port,
                        path, max_bytes);
        raw.append(buf, static_cast<size_t>(n));
    }
    // "HTTP/1.x NNN reason\r\n" headers "\r\n\r\n" body
    auto eol = raw.find("\r\n");
    if (!raw.starts_with("HTTP/") || eol == std::string::npos || raw.size() < 12)
        return fail(Code::parse, "{}:{}{}: not an HTTP response", host, port, path);
    HttpResponse out;
    out.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
    auto blank = raw.find("\r\n\r\n");
    if (blank == std::string::npos) return fail(Code::parse, "{}:{}{}: headers not terminated", host, port, path);
    out.headers = raw.substr(eol + 2, blank - eol - 2);
    out.body = raw.substr(blank + 4);
    return out;
}

Result<std::optional<ListenAddress>> parse_ready_address(std::string_view text) {
    if (text.empty()) return std::nullopt;
    // The port is matched as digits of any length and range-checked here, so a long digit string
    // is an error, not an exception from stoi.
    static const std::regex re(R"(([0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}):([0-9]+)\n)");
    std::match_results<std::string_view::const_iterator> m;
    if (!std::regex_match(text.begin(), text.end(), m, re))
        return fail(Code::parse, "expected '<ipv4>:<port>' and a newline, got '{}'", strings::trim(text.substr(0, 80)));
    const std::string digits = m[2].str();
    const std::string addr = m[1].str() + ":" + digits;
    if (digits.size() > 5) return fail(Code::parse, "'{}': not a TCP port", addr);
    const int port = std::atoi(digits.c_str());
    if (port < 1 || port > 65535) return fail(Code::parse, "'{}': the port must be 1..65535", addr);
    return ListenAddress{m[1].str(), port};
}

}  // namespace kgpu::demo
