#include "common/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "common/strings.h"

namespace kgpu::files {

namespace {

// The rest of an open file, and the descriptor closed whatever happens.
Result<std::string> read_and_close(int fd, const std::filesystem::path& path) {
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

}  // namespace

Result<std::vector<std::filesystem::directory_entry>> entries(const std::filesystem::path& dir) {
    std::vector<std::filesystem::directory_entry> out;
    std::error_code ec;
    std::filesystem::directory_iterator it(dir, ec), end;
    if (ec)
        return fail(ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory ? Code::not_found : Code::io,
                    "cannot list {}: {}", dir.string(), ec.message());
    for (; !ec && it != end; it.increment(ec)) out.push_back(*it);
    if (ec) return fail(Code::io, "listing {} failed after {} entries: {}", dir.string(), out.size(), ec.message());
    return out;
}

Result<std::string> read(const std::filesystem::path& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return fail(e == ENOENT ? Code::not_found : (e == EACCES ? Code::no_permission : Code::io),
                    "cannot open {}: {}", path.string(), std::strerror(e));
    }
    return read_and_close(fd, path);
}

Result<std::string> read_regular(const std::filesystem::path& path) {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        return fail(e == ENOENT ? Code::not_found : (e == EACCES ? Code::no_permission : Code::io),
                    "cannot open {}: {}", path.string(), std::strerror(e));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        return fail(Code::io, "cannot inspect {}: {}", path.string(), std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        const char* what = S_ISFIFO(st.st_mode)   ? "a FIFO (named pipe)"
                           : S_ISDIR(st.st_mode)  ? "a directory"
                           : S_ISSOCK(st.st_mode) ? "a socket"
                           : S_ISCHR(st.st_mode)  ? "a character device"
                           : S_ISBLK(st.st_mode)  ? "a block device"
                                                  : "not a regular file";
        return fail(Code::invalid_argument, "{} is {}, expected a regular file", path.string(), what);
    }
    return read_and_close(fd, path);
}

Result<std::string> read_line(const std::filesystem::path& path) {
    auto text = read(path);
    if (!text) return std::unexpected(text.error());
    std::string_view v = *text;
    if (auto nl = v.find('\n'); nl != std::string_view::npos) v = v.substr(0, nl);
    return std::string(strings::trim(v));
}

namespace {

namespace fs = std::filesystem;

// Removes ".NAME.tmp-XXXXXX" files in `dir` that no live writer holds: each writer locks its own
// temporary file (flock) for as long as it exists under that name, and a killed writer's lock
// went with it. Best effort: what cannot be removed is left for the next run.
void remove_stale_temporaries(const fs::path& dir, const std::string& name) {
    const std::string prefix = "." + name + ".tmp-";
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string entry = it->path().filename().string();
        if (entry.size() != prefix.size() + 6 || !entry.starts_with(prefix)) continue;
        struct stat by_name {};
        if (::lstat(it->path().c_str(), &by_name) != 0 || !S_ISREG(by_name.st_mode)) continue;  // never open a device
        int fd = ::open(it->path().c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) continue;
        struct stat by_fd {};
        if (::fstat(fd, &by_fd) == 0 && S_ISREG(by_fd.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
            ::lstat(it->path().c_str(), &by_name) == 0 && by_name.st_ino == by_fd.st_ino && by_name.st_dev == by_fd.st_dev)
            ::unlink(it->path().c_str());
        ::close(fd);
    }
}

void fsync_directory(const fs::path& dir) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    (void)::fsync(fd);  // some filesystems refuse; the rename itself is what readers rely on
    ::close(fd);
}

}  // namespace

Result<std::filesystem::path> write_target(const std::filesystem::path& path) {
    fs::path current = path;
    for (int hops = 0; hops <= 40; ++hops) {
        struct stat st {};
        if (::lstat(current.c_str(), &st) != 0) {
            const int e = errno;
            if (e == ENOENT && hops > 0)
                return fail(Code::not_found, "{} is a symlink to {}, which does not exist (a dangling link): create the "
                                             "target or remove the link",
                            path.string(), current.string());
            if (e == ENOENT) return current;  // a new file
            return fail(e == EACCES ? Code::no_permission : Code::io, "cannot inspect {}: {}", current.string(),
                        std::strerror(e));
        }
        if (S_ISREG(st.st_mode)) return current;
        if (!S_ISLNK(st.st_mode)) {
            if (hops == 0) return fail(Code::invalid_argument, "{} is not a regular file", path.string());
            return fail(Code::invalid_argument, "{} is a symlink to {}, which is not a regular file", path.string(),
                        current.string());
        }
        std::string target(static_cast<size_t>(st.st_size > 0 ? st.st_size : 255) + 1, '\0');
        for (;;) {
            ssize_t n = ::readlink(current.c_str(), target.data(), target.size());
            if (n < 0) return fail(Code::io, "cannot read the symlink {}: {}", current.string(), std::strerror(errno));
            if (static_cast<size_t>(n) < target.size()) {
                target.resize(static_cast<size_t>(n));
                break;
            }
            target.resize(target.size() * 2);  // the link changed under us: read it again
        }
        const fs::path next(target);
        current = (next.is_absolute() ? next : current.parent_path() / next).lexically_normal();
    }
    return fail(Code::invalid_argument, "{}: too many levels of symbolic links", path.string());
}

Status write_atomic(const std::filesystem::path& path, std::string_view content, unsigned mode) {
    auto target = write_target(path);
    if (!target) return std::unexpected(target.error());
    const fs::path& file = *target;
    // Whose and which mode: an existing file keeps both.
    struct stat existing {};
    const bool exists = ::stat(file.c_str(), &existing) == 0;
    const auto dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
    const std::string via = file == path ? std::string() : fmt::format(" (the target of {})", path.string());
    remove_stale_temporaries(dir, file.filename().string());

    std::string tmpl = (dir / ("." + file.filename().string() + ".tmp-XXXXXX")).string();
    int fd = ::mkstemp(tmpl.data());
    if (fd < 0)
        return fail(errno == EACCES ? Code::no_permission : Code::io, "cannot create a temporary file next to {}{}: {}",
                    file.string(), via, std::strerror(errno));
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    (void)::flock(fd, LOCK_EX);  // ours while it lives: remove_stale_temporaries leaves it alone
    auto cleanup = [&](std::string_view what, int e) {
        ::close(fd);
        ::unlink(tmpl.c_str());
        return fail(e == EPERM || e == EACCES ? Code::no_permission : Code::io, "cannot write {}{} ({}): {}", file.string(),
                    via, what, std::strerror(e));
    };
    if (int e = write_all(fd, content)) return cleanup("write", e);
    if (exists && (existing.st_uid != ::geteuid() || existing.st_gid != ::getegid()) &&
        ::fchown(fd, existing.st_uid, existing.st_gid) != 0) {
        // The new file would belong to someone else than the old one: refuse rather than change it.
        return cleanup(fmt::format("keeping its owner {}:{}", existing.st_uid, existing.st_gid), errno);
    }
    // After fchown, which clears set-id bits. fchmod is not filtered by the umask.
    if (::fchmod(fd, exists ? (existing.st_mode & 07777) : mode) != 0) return cleanup("chmod", errno);
    if (::fsync(fd) != 0) return cleanup("fsync", errno);
    if (::close(fd) != 0) {
        int e = errno;
        ::unlink(tmpl.c_str());
        return fail(Code::io, "cannot write {}{} (close): {}", file.string(), via, std::strerror(e));
    }
    if (::rename(tmpl.c_str(), file.c_str()) != 0) {
        int e = errno;
        ::unlink(tmpl.c_str());
        return fail(Code::io, "cannot rename {} to {}{}: {}", tmpl, file.string(), via, std::strerror(e));
    }
    fsync_directory(dir);
    return {};
}

Status create_directories(const std::filesystem::path& dir, unsigned mode) {
    if (dir.empty()) return {};
    // The missing ancestors, outermost first.
    std::vector<fs::path> missing;
    for (fs::path d = dir.lexically_normal(); !d.empty(); d = d.parent_path()) {
        struct stat st {};
        if (::stat(d.c_str(), &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                return fail(Code::io, "cannot create {}: {} is not a directory", dir.string(), d.string());
            break;
        }
        missing.push_back(d);
        if (d == d.parent_path()) break;
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
        if (::mkdir(it->c_str(), mode) != 0) {
            int e = errno;
            if (e == EEXIST) continue;  // made by someone else meanwhile: theirs, left as it is
            return fail(e == EACCES ? Code::no_permission : Code::io, "cannot create the directory {}: {}", it->string(),
                        std::strerror(e));
        }
        // mkdir's mode went through the umask; chmod does not.
        if (::chmod(it->c_str(), mode) != 0)
            return fail(Code::io, "cannot set the mode of {} to {:04o}: {}", it->string(), mode, std::strerror(errno));
    }
    return {};
}

std::filesystem::path under_root(const std::filesystem::path& root, const std::filesystem::path& path) {
    if (root.empty() || root == "/") return path;
    return root / path.relative_path();
}

Result<std::filesystem::path> resolve_in_root(const std::filesystem::path& root, const std::filesystem::path& path) {
    if (!path.is_absolute()) return fail(Code::invalid_argument, "{}: expected an absolute path", path.string());
    if (root.empty() || root == "/") return path;
    // The components still to walk, front first; `done` is the resolved part (relative to root).
    std::vector<std::string> todo;
    for (const auto& c : path.relative_path()) todo.push_back(c.string());
    std::reverse(todo.begin(), todo.end());
    std::vector<std::string> done;
    int links = 0;
    while (!todo.empty()) {
        const std::string c = std::move(todo.back());
        todo.pop_back();
        if (c.empty() || c == ".") continue;
        if (c == "..") {
            if (!done.empty()) done.pop_back();  // never above the root
            continue;
        }
        fs::path here = root;
        for (const auto& d : done) here /= d;
        here /= c;
        struct stat st {};
        if (::lstat(here.c_str(), &st) != 0) {
            // Missing (or not reachable): the rest is taken as it is.
            done.push_back(c);
            while (!todo.empty()) {
                done.push_back(std::move(todo.back()));
                todo.pop_back();
            }
            break;
        }
        if (!S_ISLNK(st.st_mode)) {
            done.push_back(c);
            continue;
        }
        if (++links > 40)
            return fail(Code::invalid_argument, "{} (under {}): too many levels of symbolic links", path.string(),
                        root.string());
        std::string target(static_cast<size_t>(st.st_size > 0 ? st.st_size : 255) + 1, '\0');
        for (;;) {
            ssize_t n = ::readlink(here.c_str(), target.data(), target.size());
            if (n < 0) return fail(Code::io, "cannot read the symlink {}: {}", here.string(), std::strerror(errno));
            if (static_cast<size_t>(n) < target.size()) {
                target.resize(static_cast<size_t>(n));
                break;
            }
            target.resize(target.size() * 2);
        }
        const fs::path t(target);
        if (t.is_absolute()) done.clear();  // from the root again: the host's /, not ours
        std::vector<std::string> parts;
        for (const auto& p : t.relative_path()) parts.push_back(p.string());
        for (auto it = parts.rbegin(); it != parts.rend(); ++it) todo.push_back(*it);
    }
    fs::path out = root;
    for (const auto& d : done) out /= d;
    return out;
}

int write_all(int fd, std::string_view content) {
    while (!content.empty()) {
        const ssize_t n = ::write(fd, content.data(), content.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return EIO;  // no progress: not retried forever
        content.remove_prefix(static_cast<size_t>(n));
    }
    return 0;
}

std::optional<WriteFailure> replace_at(int dir_fd, const std::string& name, std::string_view content, unsigned mode,
                                       bool exclusive) {
    const std::string file = exclusive ? name : "." + name + ".kgpu-" + random_suffix();
    const int fd = ::openat(dir_fd, file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0) return WriteFailure{"creating", errno};
    auto failed = [&](std::string_view step, int e) {
        ::close(fd);
        ::unlinkat(dir_fd, file.c_str(), 0);  // ours (O_EXCL): nothing half-written stays
        return WriteFailure{step, e};
    };
    if (int e = write_all(fd, content)) return failed("writing", e);
    if (::fchmod(fd, mode) != 0) return failed("chmod", errno);  // exactly `mode`, whatever the umask
    if (!exclusive && ::renameat(dir_fd, file.c_str(), dir_fd, name.c_str()) != 0) return failed("replacing", errno);
    ::close(fd);
    return std::nullopt;
}

std::string random_suffix() {
    unsigned char b[8] = {};
    if (::getrandom(b, sizeof b, 0) != sizeof b) {
        auto v = static_cast<unsigned long long>(::getpid()) * 2654435761ull ^ static_cast<unsigned long long>(::time(nullptr));
        std::memcpy(b, &v, sizeof b);
    }
    std::string out;
    for (unsigned char c : b) out += fmt::format("{:02x}", c);
    return out;
}

}  // namespace kgpu::files
