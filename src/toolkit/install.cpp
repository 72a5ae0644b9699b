#include "toolkit/install.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ranges>

#include <fmt/format.h>
#include <gnu/libc-version.h>

#include "common/elf.h"
#include "common/files.h"
#include "doctor/devchar.h"
#include "runtime/containerd.h"
#include "toolkit/dbus.h"

namespace kgpu::toolkit {

namespace fs = std::filesystem;

namespace {

struct Existing {
    std::string text;
    bool exists = false;
    unsigned mode = 0644;
};

Result<Existing> read_existing(const fs::path& p) {
    auto text = files::read(p);
    if (text) {
        struct stat st {};
        unsigned mode = ::stat(p.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0644;
        return Existing{std::move(*text), true, mode};
    }
    if (text.error().code == Code::not_found) return Existing{};
    return std::unexpected(text.error());
}

Status ensure_dir(const fs::path& d) {
    std::error_code ec;
    fs::create_directories(d, ec);
    if (ec) return fail(Code::io, "cannot create {}: {}", d.string(), ec.message());
    return {};
}

// Writes `content` unless the file already has it; true when written.
Result<bool> write_if_changed(const fs::path& p, const std::string& content, unsigned mode, bool backup = false) {
    auto old = read_existing(p);
    if (!old) return std::unexpected(old.error());
    if (old->exists && old->text == content) return false;
    if (auto st = ensure_dir(p.parent_path()); !st) return std::unexpected(st.error());
    if (backup && old->exists)
        if (auto st = files::write_atomic(p.string() + ".bak", old->text, old->mode); !st) return std::unexpected(st.error());
    if (auto st = files::write_atomic(p, content, old->exists ? old->mode : mode); !st) return std::unexpected(st.error());
    return true;
}

// A symlink `link` -> `target`, replaced when it points elsewhere; true when created.
Result<bool> ensure_symlink(const fs::path& link, const std::string& target) {
    std::error_code ec;
    if (fs::is_symlink(link, ec) && fs::read_symlink(link, ec) == target) return false;
    const fs::path tmp = link.parent_path() / ("." + link.filename().string() + ".kgpu-tmp");
    fs::remove(tmp, ec);
    fs::create_symlink(target, tmp, ec);
    if (ec) return fail(Code::io, "cannot create {}: {}", tmp.string(), ec.message());
    fs::rename(tmp, link, ec);
    if (ec) return fail(Code::io, "cannot rename {} to {}: {}", tmp.string(), link.string(), ec.message());
    return true;
}

fs::path host_path(const InstallOptions& o, const std::string& p) { return files::under_root(o.host_root, p); }

// Runs `<dir>/kgpu --version` inside the host's root: proof the binary runs there with the
// host's own libraries.
Result<std::string> run_on_host(const fs::path& host_root, const std::string& binary) {
    int pipefd[2];
    if (::pipe2(pipefd, O_CLOEXEC) != 0) return fail(Code::io, "pipe: {}", std::strerror(errno));
    pid_t pid = ::fork();
    if (pid < 0) return fail(Code::io, "fork: {}", std::strerror(errno));
    if (pid == 0) {
        ::dup2(pipefd[1], STDOUT_FILENO);
        ::dup2(pipefd[1], STDERR_FILENO);
        if (host_root != "/" && (::chroot(host_root.c_str()) != 0 || ::chdir("/") != 0)) {
            std::string msg = fmt::format("chroot {}: {}", host_root.string(), std::strerror(errno));
            (void)!::write(STDOUT_FILENO, msg.data(), msg.size());
            ::_exit(126);
        }
        const char* argv[] = {"kgpu", "--version", nullptr};
        const char* envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", nullptr};
        ::execve(binary.c_str(), const_cast<char* const*>(argv), const_cast<char* const*>(envp));
        std::string msg = fmt::format("exec {}: {}", binary, std::strerror(errno));
        (void)!::write(STDOUT_FILENO, msg.data(), msg.size());
        ::_exit(127);
    }
    ::close(pipefd[1]);
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR);)
        if (n > 0) out.append(buf, static_cast<size_t>(n));
    ::close(pipefd[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return out;
    return fail(Code::not_supported, "the installed {} does not run on this host ({}): {}", binary,
                WIFEXITED(status) ? fmt::format("exit status {}", WEXITSTATUS(status)) : "killed", out);
}

std::string join_path(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

// Step 1a: the dynamic loader and glibc this binary runs on, copied into <install-dir>/lib, and
// `image` (the binary's bytes) pointed at that loader (common/elf.h says why). The copies are
// those of this process's own glibc, which is the image's: the glibc the binary was built for.
// Each file is written atomically and only when it differs; the binary is written after them,
// so nothing ever runs a loader that is not there yet. Returns the report line, "" for a static
// binary (nothing to carry).
Result<std::string> carry_glibc(const InstallOptions& o, std::string& image, const std::string& source) {
    auto interp = elf::read_interpreter(image, source);
    if (!interp && interp.error().code == Code::not_found) return std::string();
    if (!interp) return std::unexpected(interp.error().context("install"));
    const std::string libc_dir = elf::running_libc_dir();
    if (libc_dir.empty()) return fail(Code::not_found, "install: cannot find the libc.so.6 this process runs on (dladdr)");
    const std::string loader = fs::path(interp->value).filename().string();
    const std::string lib_dir = join_path(o.install_dir, "lib");
    // The binary names the loader by its standard path (padded with slashes); the loader of the
    // glibc this process runs on is next to its libc.so.6 (Debian: /lib/x86_64-linux-gnu).
    std::vector<std::pair<std::string, fs::path>> files;  // name in lib_dir, source
    std::error_code ec;
    files.emplace_back(loader, fs::exists(fs::path(libc_dir) / loader, ec) ? fs::path(libc_dir) / loader
                                                                          : fs::path(interp->value).lexically_normal());
    for (std::string_view name : elf::kCarriedLibraries) files.emplace_back(std::string(name), fs::path(libc_dir) / name);
    // The copy's loader is the carried one, and it searches the carried glibc first (an absolute
    // RPATH: $ORIGIN would need /proc). A binary linked without the padded RPATH cannot be
    // carried: the carried loader would take the host's libc.
    auto rpath = elf::read_rpath(image, source);
    if (!rpath)
        return fail(Code::invalid_argument, "install: {}: kgpu must be linked with the padded RPATH of src/CMakeLists.txt "
                    "to run on the glibc it carries ({})", source, rpath.error().message);
    const std::string what = fmt::format("install --install-dir {}: the copy's", o.install_dir);
    if (auto st = elf::rewrite(image, *interp, join_path(lib_dir, loader), what + " program interpreter"); !st)
        return std::unexpected(st.error());
    if (auto st = elf::rewrite(image, *rpath, lib_dir, what + " RPATH"); !st) return std::unexpected(st.error());
    size_t total = 0;
    std::vector<std::string> written;
    for (const auto& [name, from] : files) {
        auto content = files::read(from);
        if (!content)
            return std::unexpected(content.error().context(
                fmt::format("install: the glibc file {} to carry onto the host (kgpu's image ships it)", name)));
        total += content->size();
        const fs::path to = host_path(o, join_path(lib_dir, name));
        auto w = write_if_changed(to, *content, 0755);
        if (!w) return std::unexpected(w.error());
        if (::chmod(to.c_str(), 0755) != 0) return fail(Code::io, "chmod {}: {}", to.string(), std::strerror(errno));
        if (*w) written.push_back(name);
    }
    const std::string line = fmt::format("{}/{{{}}}: the loader and glibc {} the copy runs on, whatever the host's "
                                         "glibc ({:.1f} MB)",
                                         lib_dir, fmt::join(files | std::views::keys, ","), ::gnu_get_libc_version(),
                                         static_cast<double>(total) / 1e6);
    return written.empty() ? "unchanged: " + line : fmt::format("carried {} (wrote {})", line, fmt::join(written, ", "));
}

}  // namespace

Result<int> signal_socket_owner(const std::string& socket) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (socket.size() >= sizeof a.sun_path) return fail(Code::invalid_argument, "socket path too long: {}", socket);
    std::memcpy(a.sun_path, socket.c_str(), socket.size() + 1);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        int e = errno;
        if (fd >= 0) ::close(fd);
        return fail(Code::unavailable, "cannot connect to {} to find containerd: {}", socket, std::strerror(e));
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    int rc = ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
    ::close(fd);
    if (rc != 0 || cred.pid <= 0)
        return fail(Code::unavailable, "{}: the serving process is not visible from here (run with the host's PID namespace)",
                    socket);
    if (::kill(cred.pid, SIGHUP) != 0) return fail(Code::io, "SIGHUP to pid {}: {}", cred.pid, std::strerror(errno));
    return cred.pid;
}

Result<InstallReport> install(const InstallOptions& o) {
    InstallReport report;
    auto host = [&](const std::string& p) { return files::under_root(o.host_root, p); };
    if (o.install_dir.empty() || o.install_dir.front() != '/')
        return fail(Code::invalid_argument, "--install-dir '{}': expected an absolute host path", o.install_dir);

    // 1. The binary and its links.
    std::string source = o.source_binary;
    if (source.empty()) {
        std::error_code ec;
        source = fs::read_symlink("/proc/self/exe", ec).string();
        if (ec) return fail(Code::io, "cannot find this binary (/proc/self/exe): {}", ec.message());
    }
    auto bytes = files::read(source);
    if (!bytes) return std::unexpected(bytes.error().context("install"));
    if (auto carried = carry_glibc(o, *bytes, source); !carried)
        return std::unexpected(carried.error());
    else if (!carried->empty())
        report.lines.push_back(*carried);
    const std::string binary = join_path(o.install_dir, "kgpu");
    auto copied = write_if_changed(host(binary), *bytes, 0755);
    if (!copied) return std::unexpected(copied.error());
    if (::chmod(host(binary).c_str(), 0755) != 0)
        return fail(Code::io, "chmod {}: {}", host(binary).string(), std::strerror(errno));
    report.lines.push_back(fmt::format("{} {} ({:.1f} MB)", *copied ? "installed" : "unchanged:", binary,
                                       static_cast<double>(bytes->size()) / 1e6));
    std::vector<std::string> linked;
    for (const char* name : {"kgpu-container-runtime", "nvidia-cdi-hook"}) {
        auto made = ensure_symlink(host(join_path(o.install_dir, name)), "kgpu");
        if (!made) return std::unexpected(made.error());
        if (*made) linked.push_back(name);
    }
    report.lines.push_back(linked.empty() ? fmt::format("unchanged: {}/{{kgpu-container-runtime,nvidia-cdi-hook}} -> kgpu", o.install_dir)
                                          : fmt::format("linked {} -> kgpu in {}", fmt::join(linked, ", "), o.install_dir));

    // 2. It runs on the host, before anything points at it.
    if (o.verify) {
        if (o.host_root != "/" && ::geteuid() != 0) {
            report.lines.push_back("not verified: running it inside --host-root needs root (chroot)");
        } else {
            auto v = run_on_host(o.host_root, binary);
            if (!v)
                return fail(v.error().code, "{}; nothing points at the copy yet, so containerd and the runtime's config "
                            "were left as they were", v.error().message);
            report.lines.push_back(fmt::format("verified: {} --version runs on the host: {}", binary, *v));
        }
    }
    // 3. The runtime's config.
    RuntimeConfig rc = o.runtime;
    if (rc.hook_path.empty()) rc.hook_path = join_path(o.install_dir, "nvidia-cdi-hook");
    auto wrote = write_if_changed(host(o.runtime_config_path), render_config(rc), 0644, true);
    if (!wrote) return std::unexpected(wrote.error());
    report.lines.push_back(fmt::format("{} {}", *wrote ? "wrote" : "unchanged:", o.runtime_config_path));

    // 4. containerd.
    runtime::ContainerdOptions co;
    co.runtime_name = o.runtime_name;
    co.runtime_path = join_path(o.install_dir, "kgpu-container-runtime");
    co.set_as_default = o.set_as_default;
    co.enable_cdi = o.enable_cdi;
    auto main = read_existing(host(o.containerd_config));
    if (!main) return std::unexpected(main.error());
    if (o.drop_in.empty()) {
        auto edited = runtime::configure(main->text, o.containerd_config, co);
        if (!edited) return std::unexpected(edited.error());
        auto w = write_if_changed(host(o.containerd_config), edited->text, 0644, true);
        if (!w) return std::unexpected(w.error());
        report.containerd_changed = *w;
    } else {
        auto edited = runtime::configure_drop_in(main->text, o.containerd_config, o.drop_in, co);
        if (!edited) return std::unexpected(edited.error());
        auto d = write_if_changed(host(o.drop_in), edited->drop_in, 0644);
        if (!d) return std::unexpected(d.error());
        auto w = write_if_changed(host(o.containerd_config), edited->main.text, 0644, true);
        if (!w) return std::unexpected(w.error());
        report.containerd_changed = *d || *w;
    }
    report.lines.push_back(report.containerd_changed
                               ? fmt::format("updated {}: runtime {} -> {}", o.drop_in.empty() ? o.containerd_config : o.drop_in,
                                             o.runtime_name, co.runtime_path)
                               : fmt::format("unchanged: {} already runs {} as {}", o.containerd_config, co.runtime_path,
                                             o.runtime_name));

    // 5. Restart containerd, only for a changed config.
    if (!report.containerd_changed) {
        report.lines.push_back("containerd not restarted: its config did not change");
    } else if (o.restart == RestartMode::none) {
        report.lines.push_back("containerd not restarted (--restart-mode none): restart it to apply the change");
    } else if (o.restart == RestartMode::signal) {
        auto pid = signal_socket_owner(host(o.containerd_socket).string());
        if (!pid) return std::unexpected(pid.error().context("restarting containerd"));
        report.lines.push_back(fmt::format("restarted containerd: SIGHUP to pid {} (systemd starts it again)", *pid));
    } else {
        auto job = systemd_restart_unit(host(o.dbus_socket).string(), o.containerd_unit);
        if (!job) return std::unexpected(job.error().context("restarting containerd through systemd"));
        report.lines.push_back(fmt::format("restarted {} through systemd (D-Bus job {})", o.containerd_unit, *job));
    }

    // 6. /dev/char links.
    if (o.dev_char_links) {
        const fs::path dev_root = o.runtime.dev_root.empty() ? fs::path(o.runtime.driver_root) : fs::path(o.runtime.dev_root);
        auto made = doctor::create_dev_char_links(o.host_root, dev_root);
        if (!made) return std::unexpected(made.error());
        const auto all = doctor::nvidia_dev_char_links(o.host_root, dev_root);
        report.lines.push_back(all.empty() ? "no NVIDIA device nodes: no /dev/char links to create"
                               : made->empty() ? fmt::format("unchanged: /dev/char links for {} NVIDIA device nodes", all.size())
                                               : fmt::format("created {} /dev/char links", made->size()));
    }

    return report;
}

}  // namespace kgpu::toolkit
