#include "doctor/host.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <regex>

#include "cdi/driver_files.h"
#include "common/files.h"
#include "common/strings.h"
#include "common/unix_socket.h"

namespace kgpu::doctor {

namespace fs = std::filesystem;

std::vector<std::string> parse_modules(std::string_view text) {
    std::vector<std::string> out;
    for (auto line : strings::split(text, '\n')) {
        line = strings::trim(line);
        if (line.empty()) continue;
        auto sp = line.find(' ');
        out.emplace_back(line.substr(0, sp));
    }
    return out;
}

std::string parse_driver_version(std::string_view text) { return cdi::parse_proc_driver_version(text); }

std::vector<XidEvent> parse_xids(std::string_view log) {
    static const std::regex re(R"(NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): ([0-9]+))");
    std::vector<XidEvent> out;
    for (auto line : strings::split(log, '\n')) {
        std::string s(line);
        std::smatch m;
        if (!std::regex_search(s, m, re)) continue;
        // A number past int (a corrupt or forged line) is no XID: skipped, where std::stoi threw
        // out of `kgpu doctor` (found by fuzz/doctor_kernel_log).
        int xid = 0;
        const auto digits = m[2].str();
        if (auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), xid); ec != std::errc{}) continue;
        out.push_back({m[1].str(), xid, std::string(strings::trim(s))});
    }
    return out;
}

XidClass classify_xid(int xid) {
    switch (xid) {
        case 13: case 31: case 43: case 45: case 68: case 109: return XidClass::application;
        case 92: case 94: return XidClass::recoverable;
        case 48: case 61: case 62: case 63: case 64: case 74: case 79: case 95: case 119: case 120: case 140: case 143:
            return XidClass::reset_required;
        default: return XidClass::unknown;
    }
}

Result<std::string> read_kernel_log(const fs::path& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) return fail(Code::not_found, "{}: no such file", path.string());
        return fail(Code::io, "{}: {}", path.string(), std::strerror(errno));
    }
    if (!S_ISCHR(st.st_mode)) return files::read(path);
    // /dev/kmsg: each read() returns one record; EAGAIN at the end of the buffer.
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        Code code = errno == EACCES || errno == EPERM ? Code::no_permission : Code::io;
        return fail(code, "opening {}: {}", path.string(), std::strerror(errno));
    }
    std::string out;
    char buf[8192];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n > 0) {
            // "<prio>,<seq>,<usec>,<flags>;message" -> message
            std::string_view rec(buf, static_cast<size_t>(n));
            auto semi = rec.find(';');
            out.append(semi == std::string_view::npos ? rec : rec.substr(semi + 1));
            if (out.empty() || out.back() != '\n') out.push_back('\n');
            continue;
        }
        if (n < 0 && errno == EPIPE) continue;  // a record was overwritten while reading
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN) {
            Code code = errno == EPERM || errno == EACCES ? Code::no_permission : Code::io;
            int e = errno;
            ::close(fd);
            return fail(code, "reading {}: {}", path.string(), std::strerror(e));
        }
        break;
    }
    ::close(fd);
    return out;
}

kgpu::Status probe_unix_socket(const fs::path& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return fail(Code::not_found, "{}: no such file", path.string());
    if (!S_ISSOCK(st.st_mode)) return fail(Code::invalid_argument, "{} exists but is not a unix socket", path.string());
    const std::string p = path.string();
    if (unix_connect(p)) return {};
    const int e = errno;
    if (e == ENAMETOOLONG) return fail(Code::invalid_argument, "{}: path too long for a unix socket", path.string());
    if (e == ECONNREFUSED) return fail(Code::unavailable, "{}: connection refused (stale socket: nobody listens)", path.string());
    if (e == EACCES || e == EPERM) return fail(Code::no_permission, "{}: {}", path.string(), std::strerror(e));
    return fail(Code::io, "{}: {}", path.string(), std::strerror(e));
}

std::optional<fs::path> find_binary(const fs::path& root, std::string_view name, const std::vector<std::string>& dirs) {
    for (const auto& d : dirs) {
        fs::path p = files::under_root(root, fs::path(d) / name);
        std::error_code ec;
        if (fs::is_regular_file(p, ec)) return fs::path(d) / name;
    }
    return std::nullopt;
}

}  // namespace kgpu::doctor
