#include "toolkit/root.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/strings.h"

namespace kgpu::toolkit {

std::string fd_path(int fd) { return fmt::format("/proc/self/fd/{}", fd); }

namespace {

Code code_of(int e) { return e == ENOENT ? Code::not_found : e == EACCES || e == EPERM ? Code::no_permission : Code::io; }

// "a/b/c" relative form of `rel` ("" for the root itself).
std::string relative(std::string_view rel) {
    std::string out;
    for (auto part : strings::split(rel, '/')) {
        if (part.empty() || part == ".") continue;
        if (!out.empty()) out += '/';
        out += part;
    }
    return out;
}

int openat2_in_root(int root, const std::string& rel, int flags, mode_t mode) {
    open_how how{};
    how.flags = static_cast<unsigned long long>(flags | O_CLOEXEC);
    how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
    how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
    return static_cast<int>(::syscall(SYS_openat2, root, rel.empty() ? "." : rel.c_str(), &how, sizeof how));
}

}  // namespace

Result<RootDir> RootDir::open(const std::string& path) {
    if (path.empty()) return fail(Code::invalid_argument, "container root '': refusing to work on the host's root");
    int fd = ::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return fail(code_of(errno), "container root {}: {}", path, std::strerror(errno));
    RootDir r;
    r.path_ = path;
    r.fd_ = Fd(fd);
    // The directory opened, not its spelling: "//", "/." and "/tmp/.." are "/" too (issue #22).
    struct stat opened {}, host {};
    if (::fstat(fd, &opened) != 0 || ::stat("/", &host) != 0)
        return fail(Code::io, "container root {}: {}", path, std::strerror(errno));
    if (opened.st_dev == host.st_dev && opened.st_ino == host.st_ino)
        return fail(Code::invalid_argument, "container root '{}' is the host's root directory: refusing to work on it", path);
    // Probe openat2 once, so an old kernel gets one clear message.
    int probe = openat2_in_root(fd, "", O_PATH, 0);
    if (probe < 0) {
        int e = errno;
        if (e == ENOSYS)
            return fail(Code::not_supported, "openat2 is not available (Linux >= 5.6 needed to work safely inside {})", path);
        return fail(code_of(e), "container root {}: {}", path, std::strerror(e));
    }
    ::close(probe);
    return r;
}

Result<Fd> RootDir::open_at(std::string_view rel, int flags, mode_t mode) const {
    int fd = openat2_in_root(fd_.get(), relative(rel), flags, mode);
    if (fd < 0) return fail(code_of(errno), "{} in container root {}: {}", rel, path_, std::strerror(errno));
    return Fd(fd);
}

bool RootDir::exists(std::string_view rel) const { return open_at(rel, O_PATH).has_value(); }

Result<Fd> RootDir::mkdir_all(std::string_view rel, mode_t mode) const {
    // Component by component; a component that is a dangling symlink is followed (inside the
    // root, as openat2 would) and its target created, so an image's /usr/lib64 -> /usr/lib
    // style links work even before the target exists.
    std::vector<std::string> todo;
    const std::string path = relative(rel);
    for (auto part : strings::split(path, '/'))
        if (!part.empty()) todo.emplace_back(part);
    std::reverse(todo.begin(), todo.end());
    std::string done;  // the resolved prefix, relative to the root
    auto current = open_at("", O_PATH | O_DIRECTORY);
    if (!current) return current;
    for (int links = 0; !todo.empty();) {
        const std::string part = todo.back();
        todo.pop_back();
        if (part == "..") {
            done = done.find('/') == std::string::npos ? "" : done.substr(0, done.rfind('/'));
            current = open_at(done, O_PATH | O_DIRECTORY);
            if (!current) return current;
            continue;
        }
        const std::string next_path = done.empty() ? part : done + "/" + part;
        auto next = open_at(next_path, O_PATH | O_DIRECTORY);
        if (!next && next.error().code == Code::not_found) {
            char target[4096];
            ssize_t n = ::readlinkat(current->get(), part.c_str(), target, sizeof target);
            if (n > 0) {
                if (++links > 40) return fail(Code::invalid_argument, "/{} in container root {}: too many symlinks", next_path, path_);
                std::string t(target, static_cast<size_t>(n));
                std::vector<std::string> parts;
                for (auto p : strings::split(t, '/'))
                    if (!p.empty() && p != ".") parts.emplace_back(p);
                for (auto it = parts.rbegin(); it != parts.rend(); ++it) todo.push_back(*it);
                if (t.starts_with('/')) {
                    done.clear();
                    current = open_at("", O_PATH | O_DIRECTORY);
                    if (!current) return current;
                }
                continue;
            }
            if (::mkdirat(current->get(), part.c_str(), mode) != 0 && errno != EEXIST)
                return fail(code_of(errno), "creating /{} in container root {}: {}", next_path, path_, std::strerror(errno));
            next = open_at(next_path, O_PATH | O_DIRECTORY);
        }
        if (!next) return next;
        done = next_path;
        current = std::move(next);
    }
    return current;
}

Status RootDir::write_file(std::string_view rel, std::string_view content, mode_t mode, bool exclusive, mode_t dir_mode) const {
    const std::string r = relative(rel);
    const auto slash = r.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : r.substr(0, slash);
    const std::string name = slash == std::string::npos ? r : r.substr(slash + 1);
    auto d = mkdir_all(dir, dir_mode);
    if (!d) return std::unexpected(d.error());
    // O_PATH descriptors cannot be used with openat's O_CREAT: reopen the directory for real.
    auto dir_fd = open_at(dir, O_RDONLY | O_DIRECTORY);
    if (!dir_fd) return std::unexpected(dir_fd.error());
    // Replacing: a new file renamed over the old name. Opening the old one with O_TRUNC would
    // write through a hard link the image put there (to any file on the same file system).
    if (auto f = files::replace_at(dir_fd->get(), name, content, mode, exclusive)) {
        const Code code = f->step == "creating" ? code_of(f->error)
                          : f->error == EPERM || f->error == EACCES ? Code::no_permission
                                                                    : Code::io;
        return fail(code, "{} /{} in container root {}: {}", f->step, r, path_, std::strerror(f->error));
    }
    return {};
}

Status RootDir::symlink(std::string_view target, std::string_view rel) const {
    const std::string r = relative(rel);
    const auto slash = r.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : r.substr(0, slash);
    const std::string name = slash == std::string::npos ? r : r.substr(slash + 1);
    if (name.empty()) return fail(Code::invalid_argument, "symlink '{}': no file name", rel);
    auto d = mkdir_all(dir, 0755);
    if (!d) return std::unexpected(d.error());
    auto dir_fd = open_at(dir, O_RDONLY | O_DIRECTORY);
    if (!dir_fd) return std::unexpected(dir_fd.error());
    const std::string tmp = name + "-" + random_suffix();
    if (::symlinkat(std::string(target).c_str(), dir_fd->get(), tmp.c_str()) != 0)
        return fail(code_of(errno), "symlink /{} -> {}: {}", r, target, std::strerror(errno));
    if (::renameat(dir_fd->get(), tmp.c_str(), dir_fd->get(), name.c_str()) != 0) {
        int e = errno;
        ::unlinkat(dir_fd->get(), tmp.c_str(), 0);
        return fail(code_of(e), "symlink /{} -> {}: {}", r, target, std::strerror(e));
    }
    return {};
}

Result<std::string> RootDir::readlink(std::string_view rel) const {
    const std::string r = relative(rel);
    const auto slash = r.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : r.substr(0, slash);
    const std::string name = slash == std::string::npos ? r : r.substr(slash + 1);
    auto dir_fd = open_at(dir, O_PATH | O_DIRECTORY);
    if (!dir_fd) return std::unexpected(dir_fd.error());
    char buf[4096];
    ssize_t n = ::readlinkat(dir_fd->get(), name.c_str(), buf, sizeof buf);
    if (n < 0)
        return fail(errno == EINVAL ? Code::invalid_argument : code_of(errno), "readlink /{}: {}", r, std::strerror(errno));
    return std::string(buf, static_cast<size_t>(n));
}

Result<std::vector<std::string>> RootDir::list(std::string_view rel) const {
    auto d = open_at(rel, O_RDONLY | O_DIRECTORY);
    if (!d) return std::unexpected(d.error());
    DIR* dir = ::fdopendir(d->release());
    if (!dir) return fail(Code::io, "listing {}: {}", rel, std::strerror(errno));
    std::vector<std::string> out;
    while (dirent* e = ::readdir(dir)) {
        std::string_view n = e->d_name;
        if (n != "." && n != "..") out.emplace_back(n);
    }
    ::closedir(dir);
    return out;
}

}  // namespace kgpu::toolkit
