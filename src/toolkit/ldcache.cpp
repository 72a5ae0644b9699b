// update-ldcache: the host's ldconfig run in the container's root, in namespaces of its own
// (hooks.h). The other hooks are in hooks.cpp.
#include "toolkit/hooks.h"

#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <sched.h>
#include <signal.h>
#include <linux/capability.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "common/elf.h"
#include "common/files.h"
#include "common/strings.h"
#include "toolkit/root.h"

namespace kgpu::toolkit {

namespace {

// The directories glibc's ldconfig searches without configuration, as the image's distribution
// builds it (NVIDIA's debianSystemSearchPaths / nonDebianSystemSearchPaths for x86_64, aarch64).
std::vector<std::string> system_dirs(bool debian_like) {
#if defined(__aarch64__)
    const char* multiarch = "aarch64-linux-gnu";
#else
    const char* multiarch = "x86_64-linux-gnu";
#endif
    if (debian_like)
        return {fmt::format("/lib/{}", multiarch), fmt::format("/usr/lib/{}", multiarch), "/lib", "/usr/lib"};
#if defined(__aarch64__)
    return {"/lib", "/usr/lib", "/lib64", "/usr/lib64"};
#else
    return {"/lib", "/usr/lib", "/lib64", "/usr/lib64", "/libx32", "/usr/libx32"};
#endif
}

bool regular_file(const char* p) {
    struct stat st {};
    return ::stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

// A configuration file of the image, read only when it is a regular file of sane size: the
// image decides what its ld.so.conf names, and /dev/zero or a FIFO there must not stall the hook.
std::optional<std::string> read_config(const std::string& file) {
    int fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    Fd f(fd);
    constexpr size_t limit = 1 << 20;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<size_t>(st.st_size) > limit) return std::nullopt;
    std::string out;
    char buf[8192];
    for (ssize_t n; out.size() <= limit && (n = ::read(fd, buf, sizeof buf)) != 0;) {
        if (n < 0) {
            if (errno == EINTR) continue;
            return std::nullopt;
        }
        out.append(buf, static_cast<size_t>(n));
    }
    return out;
}

// The directories ld.so.conf (and what it includes) names, read inside the container's root.
void configured_dirs(const std::string& file, std::set<std::string>& dirs, std::set<std::string>& seen) {
    if (!seen.insert(file).second) return;
    auto text = read_config(file);
    if (!text) return;
    for (auto line : strings::split(*text, '\n')) {
        line = strings::trim(line);
        if (line.empty() || line.starts_with('#')) continue;
        if (line.starts_with("include ")) {
            std::string pattern(strings::trim(line.substr(8)));
            glob_t g{};
            if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
                for (size_t i = 0; i < g.gl_pathc; ++i) configured_dirs(g.gl_pathv[i], dirs, seen);
            ::globfree(&g);
            continue;
        }
        dirs.emplace(line);
    }
}

std::string lines(const std::vector<std::string>& dirs) {
    std::string out;
    std::set<std::string> added;
    for (const auto& d : dirs)
        if (added.insert(d).second) out += d + "\n";
    return out;
}

// The child processes below report on stderr and exit: they run between fork and exec.
[[noreturn]] void die(const std::string& msg) {
    std::string line = "update-ldcache: " + msg + "\n";
    (void)!::write(STDERR_FILENO, line.data(), line.size());
    ::_exit(1);
}

// Closes every descriptor but 0, 1, 2 and `keep`: whatever the caller left open (a directory on
// the host, say) would otherwise be reachable as /proc/self/fd/<n> from inside the root.
void close_inherited_fds(int keep) {
    auto close_from_to = [](unsigned first, unsigned last) {
        if (first > last) return true;
        return ::close_range(first, last, 0) == 0;
    };
    const bool closed = keep < 3 ? close_from_to(3, ~0u)
                                 : close_from_to(3, static_cast<unsigned>(keep) - 1) && close_from_to(static_cast<unsigned>(keep) + 1, ~0u);
    if (closed) return;
    // Kernels before 5.9 have no close_range: list the open ones.
    std::vector<int> open_fds;
    if (DIR* d = ::opendir("/proc/self/fd")) {
        while (dirent* e = ::readdir(d)) {
            int n = -1;
            auto name = std::string_view(e->d_name);
            if (std::from_chars(name.data(), name.data() + name.size(), n).ec == std::errc() && n > 2 && n != keep &&
                n != ::dirfd(d))
                open_fds.push_back(n);
        }
        ::closedir(d);
    }
    for (int n : open_fds) ::close(n);
}

// ldconfig parses ELF files the image controls, as root, before runc drops any capability: a
// parser bug there must not come with every capability root has. It keeps what writing the
// cache and the links in a root owned by anyone takes (CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_CHOWN),
// not CAP_DAC_READ_SEARCH (open_by_handle_at reaches any file of a file system a bind mount comes
// from), CAP_SYS_ADMIN or the rest; no inheritable or ambient ones, and no new privileges on exec.
void drop_privileges_for_ldconfig() {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die(fmt::format("no_new_privs: {}", std::strerror(errno)));
    (void)::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);  // EINVAL before Linux 4.3: none to clear
    for (int cap = 0; cap <= 63; ++cap) {
        if (cap == CAP_DAC_OVERRIDE || cap == CAP_FOWNER || cap == CAP_CHOWN) continue;
        if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)  // EINVAL: past the kernel's last
            die(fmt::format("dropping capability {}: {}", cap, std::strerror(errno)));
    }
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (::syscall(SYS_capget, &header, data) != 0) die(fmt::format("capget: {}", std::strerror(errno)));
    data[0].inheritable = data[1].inheritable = 0;
    if (::syscall(SYS_capset, &header, data) != 0) die(fmt::format("capset: {}", std::strerror(errno)));
}

// Where the image's system directories go (one file, replaced at each run).
constexpr const char* kSystemDirsConf = "/etc/ld.so.conf.d/zz-kgpu-system.conf";

// Pid 1 of the hook's own PID namespace, in its own mount namespace (update_ldcache): makes the
// container's root this process's root with nothing of the host left in it, writes the
// configuration and execs ldconfig from `ldconfig_fd`. Never returns.
//
// Why each step (CVE-2025-23267, issue #22): runc runs createContainer hooks before pivot_root,
// with the container's procfs already mounted at <root>/proc, where /proc/1/root is the host's
// "/". A chroot alone leaves that (and every other magic link of a foreign procfs) reachable, so
// an image whose /etc, ld.so.conf.d entries or library folders go through /proc would have the
// hook and ldconfig write on the host. Here /proc in the root is a fresh procfs of this PID
// namespace (it shows only this process, then ldconfig), the root replaces the host's with
// pivot_root and the old root is detached, and no descriptor of the host stays open but the
// ldconfig binary (close-on-exec, a regular file).
[[noreturn]] void ldconfig_in_new_root(const std::string& root, dev_t dev, ino_t ino, int ldconfig_fd,
                                       const std::vector<std::string>& folders) {
    close_inherited_fds(ldconfig_fd);
    // The root again, in this mount namespace (mounts need its mounts, not the caller's), and
    // checked to be the directory the caller checked.
    auto reopen = [&]() {
        auto r = RootDir::open(root);
        if (!r) die(r.error().message);
        struct stat st {};
        if (::fstat(r->fd(), &st) != 0 || st.st_dev != dev || st.st_ino != ino)
            die(fmt::format("container root {} changed while the hook ran", root));
        return std::move(*r);
    };
    RootDir r = reopen();
    // pivot_root needs the root to be a mount: runc's is (it bind-mounts the rootfs onto
    // itself); a plain directory (the hook run outside runc) is made one, in this namespace only.
    struct statx sx {};
    const bool mounted = ::statx(r.fd(), "", AT_EMPTY_PATH, STATX_INO, &sx) == 0 &&
                         (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) && (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
    if (!mounted) {
        const std::string self = fd_path(r.fd());
        if (::mount(self.c_str(), self.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
            die(fmt::format("bind mount of {} onto itself: {}", root, std::strerror(errno)));
        r = reopen();  // the path now leads to the new mount
    }
    // A fresh procfs on /proc, resolved inside the root (mount(2) follows symlinks in its
    // target, so the target is a descriptor, never a path the image could redirect).
    {
        auto proc = r.mkdir_all("/proc", 0555);
        if (!proc) die(proc.error().message);
        // subset=pid (Linux 5.8): only the process directories, no /proc/kmsg (an image whose
        // ld.so.conf includes it would have ldconfig drain and then wait on the host's kernel
        // log) and no /proc/sys; older kernels refuse the option and get the whole procfs.
        const std::string target = fd_path(proc->get());
        const unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
        if (::mount("proc", target.c_str(), "proc", flags, "subset=pid") != 0 &&
            (errno != EINVAL || ::mount("proc", target.c_str(), "proc", flags, nullptr) != 0))
            die(fmt::format("mounting a new procfs on /proc in {}: {}", root, std::strerror(errno)));
    }
    // pivot_root(".", "."): the old root ends up stacked on the new one and is detached.
    {
        Fd old_root(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (!old_root || ::fchdir(r.fd()) != 0) die(fmt::format("entering {}: {}", root, std::strerror(errno)));
        if (::syscall(SYS_pivot_root, ".", ".") == 0) {
            if (::fchdir(old_root.get()) != 0 || ::umount2(".", MNT_DETACH) != 0)
                die(fmt::format("detaching the host's root: {}", std::strerror(errno)));
        } else if (errno != EINVAL || ::chroot(".") != 0) {
            // EINVAL: the caller's "/" is no mount (an initramfs, or a chroot itself). chroot is
            // then as safe here: the fresh procfs already hides every magic link to the host.
            die(fmt::format("pivot_root to {}: {}", root, std::strerror(errno)));
        }
        if (::chdir("/") != 0) die(fmt::format("chdir / in {}: {}", root, std::strerror(errno)));
    }

    // The configuration: read with plain paths (only the root is there to read), written through
    // the root's descriptor with openat2 (no magic link, no symlink out of it).
    const std::string ld_so_conf = "/etc/ld.so.conf";
    // An image without /etc/ld.so.conf (distroless) gets the usual one.
    (void)r.write_file(ld_so_conf, "include /etc/ld.so.conf.d/*.conf\n", 0644);
    const auto system = system_dirs(regular_file("/etc/debian_version"));
    std::set<std::string> have(system.begin(), system.end()), seen;
    configured_dirs(ld_so_conf, have, seen);
    std::vector<std::string> added;
    for (const auto& f : folders)
        if (have.insert(f).second) added.push_back(f);
    const std::string suffix = random_suffix();
    if (!added.empty())
        if (auto st = r.write_file("/etc/ld.so.conf.d/00-kgpu-" + suffix + ".conf", lines(added), 0644); !st) die(st.error().message);
    // The image's own system directories last (the host's ldconfig may have other built-in ones),
    // under one name: a container started again on the same root (docker restart) replaces the
    // file instead of adding another each time.
    if (auto st = r.write_file(kSystemDirsConf, lines(system), 0644, /*exclusive=*/false); !st) die(st.error().message);
    if (regular_file("/etc/alpine-release")) {
        // musl reads no cache: its search path file lists the directories.
#if defined(__aarch64__)
        const char* path_file = "/etc/ld-musl-aarch64.path";
#else
        const char* path_file = "/etc/ld-musl-x86_64.path";
#endif
        // Appended to, as NVIDIA does, only when it is a regular file of one link: a FIFO there
        // must not stall the hook (O_NONBLOCK: no reader is ENXIO) and a hard link to another of
        // the image's files must not be written through. Only the folders and system directories
        // it does not list yet: musl reads no ld.so.conf, and a restart adds nothing.
        if (auto fd = r.open_at(path_file, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK, 0644)) {
            struct stat st {};
            if (::fstat(fd->get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1)
                die(fmt::format("{} in {} is not a regular file of one link", path_file, root));
            // Read with a plain path, as ld.so.conf above (only the root is there to read).
            const std::string listed_now = read_config(path_file).value_or("");
            std::set<std::string> listed;
            for (auto line : strings::split(listed_now, '\n'))
                if (line = strings::trim(line); !line.empty()) listed.emplace(line);
            std::vector<std::string> missing;
            for (const auto* dirs : {&folders, &system})
                for (const auto& d : *dirs)
                    if (listed.insert(d).second) missing.push_back(d);
            const std::string text = lines(missing);
            (void)!::write(fd->get(), text.data(), text.size());
        }
    }
    drop_privileges_for_ldconfig();
    const char* argv[] = {"ldconfig", "-f", "/etc/ld.so.conf", "-C", "/etc/ld.so.cache", nullptr};
    const char* envp[] = {nullptr};
    ::syscall(SYS_execveat, ldconfig_fd, "", argv, envp, AT_EMPTY_PATH);
    die(fmt::format("cannot run the host's ldconfig: {}", std::strerror(errno)));
}

// The exit status of `pid` as this process's own: its exit code, or its signal raised again.
[[noreturn]] void exit_like(pid_t pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) die(fmt::format("waitpid: {}", std::strerror(errno)));
    if (WIFSIGNALED(status)) {
        ::signal(WTERMSIG(status), SIG_DFL);
        ::raise(WTERMSIG(status));
    }
    ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

}  // namespace

Status update_ldcache(const std::string& root, const LdcacheOptions& o) {
    auto r = RootDir::open(root);  // refuses the host's root, and checks openat2, before anything runs
    if (!r) return std::unexpected(r.error().context("update-ldcache"));
    struct stat root_st {};
    if (::fstat(r->fd(), &root_st) != 0) return fail(Code::io, "update-ldcache: {}: {}", root, std::strerror(errno));
    std::string ldconfig = o.ldconfig_path;
    if (ldconfig.starts_with('@')) ldconfig.erase(0, 1);
    // Ubuntu's /sbin/ldconfig is a shell script around ldconfig.real.
    if (regular_file((ldconfig + ".real").c_str())) ldconfig += ".real";
    int ld = ::open(ldconfig.c_str(), O_RDONLY | O_CLOEXEC);
    if (ld < 0) return fail(Code::not_found, "update-ldcache: host ldconfig {}: {}", ldconfig, std::strerror(errno));
    Fd ld_fd(ld);
    // ldconfig runs in the container's root: a dynamically linked one would load the loader and
    // libc the image puts at its interpreter's path, as root. glibc's ldconfig is static.
    {
        // The headers are in the first pages of any linker's output: read those, and the whole
        // file only when a program header or PT_INTERP lies beyond them (each container start
        // runs this: ldconfig is about 1 MiB).
        std::string image(64 * 1024, '\0');
        const ssize_t got = ::pread(ld_fd.get(), image.data(), image.size(), 0);
        if (got < 0) return fail(Code::io, "update-ldcache: host ldconfig {}: {}", ldconfig, std::strerror(errno));
        const bool whole = static_cast<size_t>(got) < image.size();
        image.resize(static_cast<size_t>(got));
        auto interp = elf::read_interpreter(image, ldconfig);
        if (!interp && interp.error().code == Code::parse && !whole) {
            auto all = files::read(fd_path(ld_fd.get()));
            if (!all) return std::unexpected(all.error().context("update-ldcache: host ldconfig " + ldconfig));
            interp = elf::read_interpreter(*all, ldconfig);
        }
        if (interp)
            return fail(Code::invalid_argument,
                        "update-ldcache: host ldconfig {} is dynamically linked (interpreter {}): run in the container's root "
                        "it would load the image's loader; give a static ldconfig (--ldconfig-path, as glibc builds it)",
                        ldconfig, interp->value);
        if (interp.error().code != Code::not_found)
            return fail(Code::invalid_argument, "update-ldcache: host ldconfig {}: {}", ldconfig, interp.error().message);
    }
    pid_t pid = ::fork();
    if (pid < 0) return fail(Code::io, "update-ldcache: fork: {}", std::strerror(errno));
    if (pid == 0) try {
        // New namespaces, as NVIDIA's hook since 1.17.8: mount (nothing done here reaches the
        // container's or the host's; slave, so no unmount propagates back), PID (it takes effect
        // for children only: the next fork is its pid 1, whose fresh procfs shows nothing of the
        // host), UTS and IPC. Not network, unlike NVIDIA's: no path leads through it, ldconfig
        // opens no socket, runc runs the hook in the container's network namespace already, and
        // creating and tearing one down costs about 1 ms per container start (issue #26).
        if (::unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC) != 0)
            die(fmt::format("new namespaces: {}", std::strerror(errno)));
        if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) {
            // EINVAL: the caller's "/" is no mount (it runs in a chroot). Then the root's own
            // mount (runc bind-mounts the rootfs onto itself) is what must not propagate back;
            // a root that is no mount either cannot be isolated, and nothing is mounted.
            if (errno != EINVAL || ::mount(nullptr, root.c_str(), nullptr, MS_REC | MS_SLAVE, nullptr) != 0)
                die(fmt::format("new mount namespace: neither / nor the container root {} is a mount whose mounts can be "
                                "kept from the host's: {}",
                                root, std::strerror(errno)));
        }
        pid_t init = ::fork();
        if (init < 0) die(fmt::format("fork: {}", std::strerror(errno)));
        if (init == 0) ldconfig_in_new_root(root, root_st.st_dev, root_st.st_ino, ld_fd.get(), o.folders);
        exit_like(init);
    } catch (...) {
        // Never back into the caller's code from a forked child (bad_alloc in a message, say).
        die("unexpected exception");
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {
        // ECHILD: SIGCHLD ignored (it survives exec) lets the kernel reap the child; its status
        // is lost, and a lost status is no success.
        if (errno != EINTR)
            return fail(Code::io, "update-ldcache: waiting for ldconfig in {}: {}", root, std::strerror(errno));
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
    return fail(Code::io, "update-ldcache: ldconfig in {} failed ({} {})", root, WIFEXITED(status) ? "exit status" : "signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

}  // namespace kgpu::toolkit
