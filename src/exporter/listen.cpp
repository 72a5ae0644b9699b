#include "exporter/listen.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <charconv>
#include <cstring>

#include <fmt/format.h>

#include "common/fd.h"

namespace kgpu::exporter {

Result<ListenAddress> parse_listen_address(std::string_view text) {
    auto bad = [&] {
        return fail(Code::invalid_argument, "expected host:port, :port or [ipv6]:port with a port 0-65535, got '{}'",
                    text);
    };
    ListenAddress out;
    std::string_view port;
    if (text.starts_with('[')) {
        auto close = text.find(']');
        if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') return bad();
        out.host = std::string(text.substr(1, close - 1));
        port = text.substr(close + 2);
        if (out.host.empty()) return bad();
    } else {
        auto colon = text.rfind(':');
        if (colon == std::string_view::npos) return bad();
        out.host = std::string(text.substr(0, colon));
        if (out.host.find(':') != std::string::npos) return bad();  // a bare IPv6 address needs brackets
        port = text.substr(colon + 1);
    }
    unsigned value = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (port.empty() || ec != std::errc() || p != port.data() + port.size() || value > 65535) return bad();
    out.port = static_cast<std::uint16_t>(value);
    return out;
}

namespace {

Result<int> bind_one(const sockaddr* addr, socklen_t len, int family, unsigned backlog, bool dual_stack) {
    Fd s(::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!s) return fail(Code::io, "socket: {}", std::strerror(errno));
    int one = 1;
    ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (family == AF_INET6) {
        int v6only = dual_stack ? 0 : 1;
        ::setsockopt(s.get(), IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
    }
    if (::bind(s.get(), addr, len) != 0) return fail(Code::io, "bind: {}", std::strerror(errno));
    if (::listen(s.get(), static_cast<int>(backlog)) != 0) return fail(Code::io, "listen: {}", std::strerror(errno));
    return s.release();
}

}  // namespace

std::string numeric(const sockaddr_storage& ss) {
    char host[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET6) {
        auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
        ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        return fmt::format("[{}]:{}", host, ntohs(a->sin6_port));
    }
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    return fmt::format("{}:{}", host, ntohs(a->sin_port));
}

std::pair<std::string, std::string> peer_of(const sockaddr_storage& ss) {
    char text[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET6) {
        const auto& a = reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(&a)) {
            ::inet_ntop(AF_INET, a.s6_addr + 12, text, sizeof text);
            return {std::string(reinterpret_cast<const char*>(a.s6_addr + 12), 4), text};
        }
        in6_addr net{};
        std::memcpy(net.s6_addr, a.s6_addr, 8);
        ::inet_ntop(AF_INET6, &net, text, sizeof text);
        return {std::string(reinterpret_cast<const char*>(a.s6_addr), 8), std::string(text) + "/64"};
    }
    if (ss.ss_family == AF_INET) {
        const auto& a = reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr;
        ::inet_ntop(AF_INET, &a, text, sizeof text);
        return {std::string(reinterpret_cast<const char*>(&a), 4), text};
    }
    return {"", "unknown"};
}

Result<int> listen_on(const ListenAddress& a, unsigned backlog, const std::string& text) {
    if (a.host.empty()) {
        // Every address: IPv6 with IPv4 mapped, or IPv4 alone where the host has no IPv6.
        sockaddr_in6 six{};
        six.sin6_family = AF_INET6;
        six.sin6_addr = in6addr_any;
        six.sin6_port = htons(a.port);
        auto fd = bind_one(reinterpret_cast<sockaddr*>(&six), sizeof six, AF_INET6, backlog, true);
        if (fd) return fd;
        sockaddr_in four{};
        four.sin_family = AF_INET;
        four.sin_addr.s_addr = htonl(INADDR_ANY);
        four.sin_port = htons(a.port);
        auto fd4 = bind_one(reinterpret_cast<sockaddr*>(&four), sizeof four, AF_INET, backlog, false);
        if (!fd4) return fail(Code::io, "listening on {}: {}", text, fd4.error().message);
        return fd4;
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const std::string port = fmt::format("{}", a.port);
    if (int rc = ::getaddrinfo(a.host.c_str(), port.c_str(), &hints, &res); rc != 0)
        return fail(Code::io, "listening on {}: cannot resolve '{}': {}", text, a.host, ::gai_strerror(rc));
    std::string why;
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
        auto fd = bind_one(ai->ai_addr, ai->ai_addrlen, ai->ai_family, backlog, false);
        if (fd) {
            ::freeaddrinfo(res);
            return fd;
        }
        why = fd.error().message;
    }
    ::freeaddrinfo(res);
    return fail(Code::io, "listening on {}: {}", text, why);
}

}  // namespace kgpu::exporter
