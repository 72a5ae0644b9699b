#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/strings.h"

namespace kgpu::files {

Result<std::string> read(const std::filesystem::path& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return fail(e == ENOENT ? Code::not_found : (e == EACCES ? Code::no_permission : Code::io),
                    "cannot open {}: {}", path.string(), std::strerror(e));
    }
    std::string out;
    char buf[8192];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            ::close(fd);
            return fail(Code::io, "cannot read {}: {}", path.string(), std::strerror(e));
        }
        if (n == 0) break;
        out.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return out;
}

Result<std::string> read_line(const std::filesystem::path& path) {
    auto text = read(path);
    if (!text) return std::unexpected(text.error());
    std::string_view v = *text;
    if (auto nl = v.find('\n'); nl != std::string_view::npos) v = v.substr(0, nl);
    return std::string(strings::trim(v));
}

Status create_directories(const std::filesystem::path& dir, unsigned mode) {
    std::vector<std::filesystem::path> missing;
    std::error_code ec;
    for (std::filesystem::path p = dir; !p.empty() && !std::filesystem::exists(p, ec); p = p.parent_path()) {
        missing.push_back(p);
        if (p == p.parent_path()) break;
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
        if (::mkdir(it->c_str(), static_cast<mode_t>(mode)) != 0) {
            if (errno == EEXIST) continue;
            return fail(Code::io, "cannot create the directory {}: {}", it->string(), std::strerror(errno));
        }
        if (::chmod(it->c_str(), static_cast<mode_t>(mode)) != 0)
            return fail(Code::io, "cannot set mode {:o} on {}: {}", mode, it->string(), std::strerror(errno));
    }
    return {};
}

Status write_atomic(const std::filesystem::path& path, std::string_view content, unsigned mode) {
    const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    std::string tmpl = (dir / ("." + path.filename().string() + ".tmp-XXXXXX")).string();
    int fd = ::mkstemp(tmpl.data());
    if (fd < 0) return fail(Code::io, "cannot create a temporary file next to {}: {}", path.string(), std::strerror(errno));
    auto cleanup = [&](std::string_view what) {
        int e = errno;
        ::close(fd);
        ::unlink(tmpl.c_str());
        return fail(Code::io, "cannot write {} ({}): {}", path.string(), what, std::strerror(e));
    };
    const char* p = content.data();
    size_t left = content.size();
    while (left > 0) {
        ssize_t n = ::write(fd, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            return cleanup("write");
        }
        p += n;
        left -= static_cast<size_t>(n);
    }
    if (::fchmod(fd, mode) != 0) return cleanup("chmod");
    if (::fsync(fd) != 0) return cleanup("fsync");
    if (::close(fd) != 0) {
        int e = errno;
        ::unlink(tmpl.c_str());
        return fail(Code::io, "cannot write {} (close): {}", path.string(), std::strerror(e));
    }
    if (::rename(tmpl.c_str(), path.c_str()) != 0) {
        int e = errno;
        ::unlink(tmpl.c_str());
        return fail(Code::io, "cannot rename {} to {}: {}", tmpl, path.string(), std::strerror(e));
    }
    return {};
}

std::filesystem::path under_root(const std::filesystem::path& root, const std::filesystem::path& path) {
    if (root.empty() || root == "/") return path;
    return root / path.relative_path();
}

}  // namespace kgpu::files
