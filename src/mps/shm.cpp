#include "mps/shm.h"

#include <sys/mount.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "common/files.h"
#include "common/log.h"
#include "common/strings.h"

namespace kgpu::mps {

namespace fs = std::filesystem;

std::string shm_size(std::string_view meminfo) {
    for (auto line : strings::split(meminfo, '\n')) {
        if (!line.starts_with("MemTotal:")) continue;
        auto rest = strings::trim(line.substr(9));
        unsigned long long kb = 0;
        auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), kb);
        if (ec != std::errc() || p == rest.data()) break;
        auto unit = strings::trim(std::string_view(p, static_cast<size_t>(rest.data() + rest.size() - p)));
        return std::to_string(kb / 2) + (unit.empty() ? "" : std::string(1, unit[0]));
    }
    return "65536k";
}

namespace {

// Whether `dir` is a mount point in this mount namespace (/proc/self/mountinfo, field 5).
bool is_mount_point(const fs::path& dir) {
    auto text = files::read("/proc/self/mountinfo");
    if (!text) return false;
    const std::string want = dir.string();
    for (auto line : strings::split(*text, '\n')) {
        auto fields = strings::split(line, ' ');
        if (fields.size() > 4 && fields[4] == want) return true;
    }
    return false;
}

}  // namespace

Status mount_shm(const fs::path& dir_in, const fs::path& meminfo) {
    std::error_code ec;
    fs::path dir = fs::weakly_canonical(fs::absolute(dir_in, ec), ec);
    if (dir.empty()) dir = dir_in;
    for (int i = 0; i < 16 && is_mount_point(dir); ++i) {
        if (::umount2(dir.c_str(), 0) != 0 && ::umount2(dir.c_str(), MNT_DETACH) != 0)
            return fail(Code::io, "unmounting {}: {}", dir.string(), std::strerror(errno));
        log::info("MPS: unmounted the previous mount at {}", dir.string());
    }
    if (auto st = files::create_directories(dir, 0755); !st) return st;  // parents too, whatever the umask
    fs::permissions(dir, fs::perms(0755), ec);
    auto info = files::read(meminfo);
    const std::string size = shm_size(info ? *info : "");
    const std::string data = "size=" + size;
    if (::mount("shm", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RELATIME, data.c_str()) != 0) {
        const int err = errno;
        if (err == EPERM)
            return fail(Code::no_permission,
                        "mounting a tmpfs at {}: {} (needs CAP_SYS_ADMIN: run the init container privileged)",
                        dir.string(), std::strerror(err));
        return fail(Code::io, "mounting a tmpfs at {} ({}): {}", dir.string(), data, std::strerror(err));
    }
    log::info("MPS: mounted a tmpfs at {} (rw,nosuid,nodev,noexec,relatime,{})", dir.string(), data);
    return {};
}

}  // namespace kgpu::mps
