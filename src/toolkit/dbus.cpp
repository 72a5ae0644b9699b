#include "toolkit/dbus.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "common/fd.h"
#include "common/unix_socket.h"

namespace kgpu::toolkit {

namespace {

// Little-endian marshalling with the alignment rules of the D-Bus specification.
struct Writer {
    std::string b;
    void pad(size_t a) {
        while (b.size() % a) b.push_back('\0');
    }
    void u8(unsigned char v) { b.push_back(static_cast<char>(v)); }
    void u32(std::uint32_t v) {
        pad(4);
        for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    }
    void str(const std::string& s) {  // 's' and 'o'
        u32(static_cast<std::uint32_t>(s.size()));
        b += s;
        b.push_back('\0');
    }
    void sig(const std::string& s) {  // 'g'
        u8(static_cast<unsigned char>(s.size()));
        b += s;
        b.push_back('\0');
    }
};

std::uint32_t get_u32(std::string_view b, size_t at) {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(b[at + i])) << (8 * i);
    return v;
}

struct Reply {
    unsigned type = 0;  // 2 METHOD_RETURN, 3 ERROR, 4 SIGNAL
    std::uint32_t reply_serial = 0;
    std::string error_name, signature, body;
};

// Parses one complete message (little-endian only; the bus answers in the caller's order).
Result<Reply> parse(std::string_view m) {
    if (m.size() < 16 || m[0] != 'l') return fail(Code::parse, "D-Bus: unexpected message (not little-endian)");
    Reply r;
    r.type = static_cast<unsigned char>(m[1]);
    const std::uint32_t body_len = get_u32(m, 4), fields_len = get_u32(m, 12);
    size_t at = 16, end = 16 + fields_len;
    if (end > m.size()) return fail(Code::parse, "D-Bus: truncated header");
    while (at < end) {
        at = (at + 7) & ~size_t{7};
        if (at + 4 > end) break;
        const unsigned code = static_cast<unsigned char>(m[at]);
        const unsigned siglen = static_cast<unsigned char>(m[at + 1]);
        const std::string_view sig = m.substr(at + 2, siglen);
        at += 2 + siglen + 1;
        if (sig == "u") {
            at = (at + 3) & ~size_t{3};
            if (code == 5) r.reply_serial = get_u32(m, at);
            at += 4;
        } else if (sig == "s" || sig == "o") {
            at = (at + 3) & ~size_t{3};
            const std::uint32_t len = get_u32(m, at);
            if (at + 4 + len > end) return fail(Code::parse, "D-Bus: bad header string");
            if (code == 4) r.error_name = std::string(m.substr(at + 4, len));
            at += 4 + len + 1;
        } else if (sig == "g") {
            const unsigned len = static_cast<unsigned char>(m[at]);
            if (code == 8) r.signature = std::string(m.substr(at + 1, len));
            at += 1 + len + 1;
        } else {
            return fail(Code::parse, "D-Bus: unexpected header field type '{}'", sig);
        }
    }
    const size_t body_at = (end + 7) & ~size_t{7};
    if (body_at + body_len > m.size()) return fail(Code::parse, "D-Bus: truncated body");
    r.body = std::string(m.substr(body_at, body_len));
    return r;
}

// The first 's' or 'o' argument of a body whose signature starts with it.
std::string first_string(const Reply& r) {
    if (r.signature.empty() || (r.signature[0] != 's' && r.signature[0] != 'o') || r.body.size() < 4) return {};
    const std::uint32_t len = get_u32(r.body, 0);
    return len + 4 <= r.body.size() ? r.body.substr(4, len) : std::string();
}

class Conn {
public:
    Status connect(const std::string& path) {
        fd_ = unix_connect(path);
        if (!fd_ && errno == ENAMETOOLONG) return fail(Code::invalid_argument, "D-Bus socket path too long: {}", path);
        if (!fd_)
            return fail(errno == ENOENT ? Code::not_found : Code::unavailable, "D-Bus: cannot connect to {}: {}", path,
                        std::strerror(errno));
        return {};
    }
    Status send(std::string_view data) {
        while (!data.empty()) {
            ssize_t n = ::send(fd_.get(), data.data(), data.size(), MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return fail(Code::io, "D-Bus: write: {}", std::strerror(errno));
            data.remove_prefix(static_cast<size_t>(n));
        }
        return {};
    }
    // Reads until `need` bytes are buffered.
    Status fill(size_t need, std::chrono::steady_clock::time_point deadline) {
        while (buf_.size() < need) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
            pollfd p{fd_.get(), POLLIN, 0};
            if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return fail(Code::timeout, "D-Bus: no answer");
            char tmp[4096];
            ssize_t n = ::recv(fd_.get(), tmp, sizeof tmp, 0);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return fail(Code::unavailable, "D-Bus: the bus closed the connection");
            buf_.append(tmp, static_cast<size_t>(n));
        }
        return {};
    }
    Result<std::string> line(std::chrono::steady_clock::time_point deadline) {
        for (;;) {
            if (auto nl = buf_.find("\r\n"); nl != std::string::npos) {
                std::string l = buf_.substr(0, nl);
                buf_.erase(0, nl + 2);
                return l;
            }
            if (auto st = fill(buf_.size() + 1, deadline); !st) return std::unexpected(st.error());
        }
    }
    Result<std::string> message(std::chrono::steady_clock::time_point deadline) {
        if (auto st = fill(16, deadline); !st) return std::unexpected(st.error());
        const size_t total = ((16 + get_u32(buf_, 12) + 7) & ~size_t{7}) + get_u32(buf_, 4);
        if (total > (64u << 20)) return fail(Code::parse, "D-Bus: message of {} bytes", total);
        if (auto st = fill(total, deadline); !st) return std::unexpected(st.error());
        std::string m = buf_.substr(0, total);
        buf_.erase(0, total);
        return m;
    }

private:
    Fd fd_;
    std::string buf_;
};

Result<Reply> await_reply(Conn& c, std::uint32_t serial, std::chrono::steady_clock::time_point deadline) {
    for (;;) {
        auto m = c.message(deadline);
        if (!m) return std::unexpected(m.error());
        auto r = parse(*m);
        if (!r) return std::unexpected(r.error());
        if ((r->type == 2 || r->type == 3) && r->reply_serial == serial) return r;  // signals and others skipped
    }
}

}  // namespace

std::string dbus_encode_call(const DbusCall& call, unsigned serial) {
    Writer body;
    for (const auto& a : call.args) body.str(a);
    Writer h;
    h.u8('l');
    h.u8(1);  // METHOD_CALL
    h.u8(0);
    h.u8(1);  // protocol version
    h.u32(static_cast<std::uint32_t>(body.b.size()));
    h.u32(serial);
    Writer fields;  // array of (byte, variant), each struct 8-aligned; offsets relative to the message start
    fields.b = std::string(16, '\0');
    auto field = [&](unsigned char code, char type, const std::string& value) {
        fields.pad(8);
        fields.u8(code);
        fields.sig(std::string(1, type));
        if (type == 'g') fields.sig(value);
        else fields.str(value);
    };
    field(1, 'o', call.path);
    if (!call.interface.empty()) field(2, 's', call.interface);
    field(3, 's', call.member);
    if (!call.destination.empty()) field(6, 's', call.destination);
    if (!call.args.empty()) field(8, 'g', std::string(call.args.size(), 's'));
    const std::string array = fields.b.substr(16);
    h.u32(static_cast<std::uint32_t>(array.size()));
    h.b += array;
    h.pad(8);
    return h.b + body.b;
}

Result<std::string> dbus_call(const std::string& socket, const DbusCall& call, int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    Conn c;
    if (auto st = c.connect(socket); !st) return std::unexpected(st.error());
    // SASL EXTERNAL with our uid, in hex of its decimal digits.
    std::string uid_hex;
    for (char ch : std::to_string(::geteuid())) uid_hex += fmt::format("{:02x}", static_cast<unsigned>(ch));
    if (auto st = c.send(std::string(1, '\0') + "AUTH EXTERNAL " + uid_hex + "\r\n"); !st) return std::unexpected(st.error());
    auto ok = c.line(deadline);
    if (!ok) return std::unexpected(ok.error());
    if (!ok->starts_with("OK ")) return fail(Code::no_permission, "D-Bus: authentication refused by {}: {}", socket, *ok);
    if (auto st = c.send("BEGIN\r\n"); !st) return std::unexpected(st.error());
    if (auto st = c.send(dbus_encode_call({"org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "Hello", {}}, 1));
        !st)
        return std::unexpected(st.error());
    auto hello = await_reply(c, 1, deadline);
    if (!hello) return std::unexpected(hello.error());
    if (hello->type == 3) return fail(Code::unavailable, "D-Bus: Hello refused: {}", hello->error_name);
    if (auto st = c.send(dbus_encode_call(call, 2)); !st) return std::unexpected(st.error());
    auto reply = await_reply(c, 2, deadline);
    if (!reply) return std::unexpected(reply.error());
    if (reply->type == 3)
        return fail(Code::unavailable, "{}.{}: {}: {}", call.interface, call.member, reply->error_name, first_string(*reply));
    return first_string(*reply);
}

Result<std::string> systemd_restart_unit(const std::string& socket, const std::string& unit) {
    return dbus_call(socket, {"org.freedesktop.systemd1", "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager",
                              "RestartUnit", {unit, "replace"}});
}

}  // namespace kgpu::toolkit
