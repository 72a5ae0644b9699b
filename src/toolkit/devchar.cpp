#include "toolkit/devchar.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/files.h"

namespace kgpu::toolkit {

namespace fs = std::filesystem;

std::vector<DevCharLink> nvidia_dev_char_links(const fs::path& root, const fs::path& dev_root) {
    std::vector<DevCharLink> out;
    const fs::path dev = files::under_root(dev_root, "/dev");
    auto scan = [&](const fs::path& dir, bool all) {
        std::error_code ec;
        std::vector<fs::path> entries;
        for (const auto& e : fs::directory_iterator(files::under_root(root, dir), ec)) entries.push_back(e.path());
        std::sort(entries.begin(), entries.end());
        for (const auto& p : entries) {
            const std::string name = p.filename().string();
            if (!all && !name.starts_with("nvidia")) continue;
            struct stat st {};
            if (::lstat(p.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) continue;
            DevCharLink l;
            l.node = (dir / name).string();
            l.major = major(st.st_rdev);
            l.minor = minor(st.st_rdev);
            l.link = fmt::format("/dev/char/{}:{}", l.major, l.minor);
            struct stat target {};
            const fs::path host_link = files::under_root(root, l.link);
            struct stat ls {};
            if (::lstat(host_link.c_str(), &ls) != 0) {
                l.state = DevCharLink::State::missing;
            } else {
                // Resolve the link inside `root` (an absolute target names a host path).
                std::error_code rec;
                fs::path t = fs::read_symlink(host_link, rec);
                fs::path resolved = rec ? host_link : (t.is_absolute() ? files::under_root(root, t) : host_link.parent_path() / t);
                l.state = ::stat(resolved.c_str(), &target) == 0 && S_ISCHR(target.st_mode) && target.st_rdev == st.st_rdev
                              ? DevCharLink::State::ok
                              : DevCharLink::State::wrong;
            }
            out.push_back(std::move(l));
        }
    };
    scan(dev, false);
    scan(dev / "nvidia-caps", true);
    return out;
}

Result<std::vector<std::string>> create_dev_char_links(const fs::path& root, const fs::path& dev_root) {
    std::vector<std::string> created;
    const auto links = nvidia_dev_char_links(root, dev_root);
    if (links.empty()) return created;
    std::error_code ec;
    fs::create_directories(files::under_root(root, "/dev/char"), ec);
    for (const auto& l : links) {
        if (l.state != DevCharLink::State::missing) continue;
        const fs::path host_link = files::under_root(root, l.link);
        if (::symlink(l.node.c_str(), host_link.c_str()) != 0 && errno != EEXIST)
            return fail(Code::io, "cannot create {} -> {}: {}", host_link.string(), l.node, std::strerror(errno));
        created.push_back(l.link);
    }
    return created;
}

}  // namespace kgpu::toolkit
