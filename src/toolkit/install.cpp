#include "toolkit/install.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <ranges>
#include <thread>

#include <fmt/format.h>
#include <gnu/libc-version.h>

#include "common/elf.h"
#include "common/fd.h"
#include "common/files.h"
#include "common/process.h"
#include "common/unix_socket.h"
#include "runtime/containerd.h"
#include "toolkit/dbus.h"
#include "toolkit/devchar.h"

namespace kgpu::toolkit {

namespace fs = std::filesystem;

namespace {

struct Existing {
    std::string text;
    bool exists = false;
    unsigned mode = 0644;
};

Result<Existing> read_existing(const fs::path& p) {
    auto text = files::read_regular(p);  // a FIFO at a config's path is refused, not waited on
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

// A host path as the installer reaches it: under --host-root, with the host's own symlinks
// resolved inside it (files::resolve_in_root): NixOS' /etc/containerd/config.toml ->
// /etc/static/... -> /nix/store/... or a /usr/local that links elsewhere lead to the host's files,
// never to the installer's (its container's) own.
Result<fs::path> host_path(const InstallOptions& o, const std::string& p) {
    auto r = files::resolve_in_root(o.host_root, p);
    if (!r) return std::unexpected(r.error().context("install: --host-root " + o.host_root.string()));
    return r;
}

// Runs `<dir>/kgpu --version` inside the host's root: proof the binary runs there with the
// host's own libraries.
Result<std::string> run_on_host(const fs::path& host_root, const std::string& binary) {
    process::RunOptions ro;
    ro.argv = {binary, "--version"};
    ro.set_env = {{"PATH", "/usr/sbin:/usr/bin:/sbin:/bin"}};
    ro.inherit_env = false;  // not the installer's LD_LIBRARY_PATH and the like: the host's own libraries
    if (host_root != "/") ro.root = host_root.string();
    ro.timeout = std::chrono::seconds(30);
    auto done = process::run(ro);
    if (!done) return std::unexpected(done.error().context("running the installed kgpu --version"));
    std::string out = done->out;
    if (!out.empty() && !done->err.empty() && out.back() != '\n') out += '\n';
    out += done->err;
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    if (done->exit_code == 0) return out;
    return fail(Code::not_supported, "the installed {} does not run on this host (exit code {}{}): {}", binary,
                done->exit_code, done->exit_code > 128 ? ", or killed by a signal" : "", out);
}

std::string join_path(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

// The name of the versioned directory of one carried glibc: a short hash of the files' names and
// contents (FNV-1a, 64 bits; only to tell glibcs apart, not a guard against tampering).
constexpr size_t kGlibcDirNameLength = 12;

std::string glibc_dir_name(const std::vector<std::pair<std::string, std::string>>& files) {
    uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&h](std::string_view bytes) {
        for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
    };
    for (const auto& [name, content] : files) {
        mix(name);
        mix(std::string_view("\0", 1));
        mix(std::to_string(content.size()));
        mix(std::string_view("\0", 1));
        mix(content);
    }
    return fmt::format("{:016x}", h).substr(0, kGlibcDirNameLength);
}

bool is_glibc_dir_name(std::string_view name) {
    return name.size() == kGlibcDirNameLength &&
           std::ranges::all_of(name, [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

struct Carried {
    std::string line;     // the report line, "" for a static binary (nothing to carry)
    std::string lib_dir;  // <install-dir>/lib/<hash> (a host path), "" for a static binary
};

// Step 1a: the dynamic loader and glibc this binary runs on, copied into their own versioned
// directory <install-dir>/lib/<hash of their contents>, and `image` (the binary's bytes) pointed
// at that loader (common/elf.h says why). The copies are those of this process's own glibc, which
// is the image's: the glibc the binary was built for. Each file is written atomically and only
// when it differs, and the binary is swapped in after all of them (install()), so whatever runs
// the binary, old or new, finds the loader and libraries it names complete and matching: an
// upgrade to another glibc never mixes the new loader with the old libc. Errors (a too-long
// --install-dir included) come before anything is written.
Result<Carried> carry_glibc(const InstallOptions& o, std::string& image, const std::string& source) {
    auto interp = elf::read_interpreter(image, source);
    if (!interp && interp.error().code == Code::not_found) return Carried{};
    if (!interp) return std::unexpected(interp.error().context("install"));
    const std::string libc_dir = elf::running_libc_dir();
    if (libc_dir.empty()) return fail(Code::not_found, "install: cannot find the libc.so.6 this process runs on (dladdr)");
    const std::string loader = fs::path(interp->value).filename().string();
    // The binary names the loader by its standard path (padded with slashes); the loader of the
    // glibc this process runs on is next to its libc.so.6 (Debian: /lib/x86_64-linux-gnu).
    std::vector<std::pair<std::string, fs::path>> sources;  // name in the lib dir, source
    std::error_code ec;
    sources.emplace_back(loader, fs::exists(fs::path(libc_dir) / loader, ec) ? fs::path(libc_dir) / loader
                                                                            : fs::path(interp->value).lexically_normal());
    for (std::string_view name : elf::kCarriedLibraries) sources.emplace_back(std::string(name), fs::path(libc_dir) / name);
    std::vector<std::pair<std::string, std::string>> files;  // name, content
    size_t total = 0;
    for (const auto& [name, from] : sources) {
        auto content = files::read(from);
        if (!content)
            return std::unexpected(content.error().context(
                fmt::format("install: the glibc file {} to carry onto the host (kgpu's image ships it)", name)));
        total += content->size();
        files.emplace_back(name, std::move(*content));
    }
    const std::string lib_dir = join_path(join_path(o.install_dir, "lib"), glibc_dir_name(files));
    // The copy's loader is the carried one, and it searches the carried glibc first (an absolute
    // RPATH: $ORIGIN would need /proc). A binary linked without the padded RPATH cannot be
    // carried: the carried loader would take the host's libc.
    auto rpath = elf::read_rpath(image, source);
    if (!rpath)
        return fail(Code::invalid_argument, "install: {}: kgpu must be linked with the padded RPATH of src/CMakeLists.txt "
                    "to run on the glibc it carries ({})", source, rpath.error().message);
    const std::string what = fmt::format("install --install-dir {}: the copy's", o.install_dir);
    const std::string new_interp = join_path(lib_dir, loader);
    if (auto st = elf::rewrite(image, *interp, new_interp, what + " program interpreter"); !st) {
        // <install-dir>/lib/<hash>/<loader>: what is left of the room is the install dir's.
        const size_t fixed = new_interp.size() - o.install_dir.size();
        const size_t most = interp->room > fixed + 1 ? interp->room - 1 - fixed : 0;
        return fail(st.error().code, "{} (<install-dir>/lib/<{}-character hash>/{}: an --install-dir of at most {} "
                    "characters fits)", st.error().message, kGlibcDirNameLength, loader, most);
    }
    if (auto st = elf::rewrite(image, *rpath, lib_dir, what + " RPATH"); !st) return std::unexpected(st.error());
    std::vector<std::string> written;
    for (const auto& [name, content] : files) {
        auto host_to = host_path(o, join_path(lib_dir, name));
        if (!host_to) return std::unexpected(host_to.error());
        const fs::path& to = *host_to;
        auto w = write_if_changed(to, content, 0755);
        if (!w) return std::unexpected(w.error());
        if (::chmod(to.c_str(), 0755) != 0) return fail(Code::io, "chmod {}: {}", to.string(), std::strerror(errno));
        if (*w) written.push_back(name);
    }
    const std::string line = fmt::format("{}/{{{}}}: the loader and glibc {} the copy runs on, whatever the host's "
                                         "glibc ({:.1f} MB)",
                                         lib_dir, fmt::join(files | std::views::keys, ","), ::gnu_get_libc_version(),
                                         static_cast<double>(total) / 1e6);
    return Carried{written.empty() ? "unchanged: " + line : fmt::format("carried {} (wrote {})", line, fmt::join(written, ", ")),
                   lib_dir};
}

// The directory of the program interpreter that `image` (the installed binary) names, "" when
// there is none (no binary yet, a static one, not ELF).
std::string interpreter_dir(std::string_view image, const std::string& what) {
    auto interp = elf::read_interpreter(image, what);
    if (!interp) return {};
    return fs::path(interp->value).lexically_normal().parent_path().string();
}

// After a new binary was swapped in: removes the carried glibcs in <install-dir>/lib other than
// `current` (the new binary's) and `previous` (the replaced binary's, which a runtime or hook
// started just before the swap may still be loading), i.e. the versioned directories and the
// files of the old flat layout (<install-dir>/lib/ld-linux-…, before versioned directories).
// Only names kgpu writes are touched. Returns what was removed (host-independent paths).
Result<std::vector<std::string>> prune_glibcs(const InstallOptions& o, const std::string& current, const std::string& previous) {
    const std::string lib_root = join_path(o.install_dir, "lib");
    auto host_root = host_path(o, lib_root);
    if (!host_root) return std::unexpected(host_root.error());
    std::vector<std::string> removed;
    std::error_code ec;
    fs::directory_iterator it(*host_root, ec), end;
    if (ec) return removed;
    std::vector<fs::directory_entry> entries(it, end);
    for (const auto& e : entries) {
        const std::string name = e.path().filename().string();
        const std::string path = join_path(lib_root, name);
        const bool flat_file = name.starts_with("ld-linux") || std::ranges::find(elf::kCarriedLibraries, name) != elf::kCarriedLibraries.end();
        if (is_glibc_dir_name(name) && e.is_directory(ec) && !e.is_symlink(ec)) {
            if (path == current || path == previous) continue;
            fs::remove_all(e.path(), ec);
        } else if (flat_file && !e.is_directory(ec)) {
            if (lib_root == current || lib_root == previous) continue;
            fs::remove(e.path(), ec);
        } else {
            continue;
        }
        if (ec) return fail(Code::io, "install: cannot remove the old carried glibc {}: {}", e.path().string(), ec.message());
        removed.push_back(path);
    }
    std::ranges::sort(removed);
    return removed;
}

}  // namespace

SocketIdentity socket_identity(const std::string& socket) {
    struct stat st {};
    if (::stat(socket.c_str(), &st) != 0) return {};
    return {true, st.st_ino, st.st_ctim.tv_sec, st.st_ctim.tv_nsec};
}

std::optional<double> wait_for_new_server(const std::string& socket, const SocketIdentity& before,
                                          std::chrono::milliseconds timeout) {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
        const SocketIdentity now = socket_identity(socket);
        if (now.exists && !(now == before) && unix_connect(socket))
            return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (std::chrono::steady_clock::now() - start >= timeout) return std::nullopt;
        ::usleep(50 * 1000);
    }
}

Result<InstalledBinary> inspect_installed(const fs::path& host_root, const std::string& binary) {
    auto image = files::read(files::under_root(host_root, binary));
    if (!image) return std::unexpected(image.error());
    auto interp = elf::read_interpreter(*image, binary);
    if (!interp) return std::unexpected(interp.error());
    InstalledBinary out;
    out.interpreter = interp->value;
    std::error_code ec;
    const fs::path lib_dir = fs::path(interp->value).lexically_normal().parent_path();
    const fs::path install_lib = fs::path(binary).lexically_normal().parent_path() / "lib";
    if (!fs::exists(files::under_root(host_root, interp->value), ec)) out.missing.push_back(interp->value);
    if (lib_dir == install_lib || lib_dir.parent_path() == install_lib)
        for (std::string_view name : elf::kCarriedLibraries)
            if (!fs::exists(files::under_root(host_root, (lib_dir / name).string()), ec))
                out.missing.push_back((lib_dir / name).string());
    return out;
}

Result<int> socket_owner(const std::string& socket) {
    const Fd fd = unix_connect(socket);
    if (!fd && errno == ENAMETOOLONG) return fail(Code::invalid_argument, "socket path too long: {}", socket);
    if (!fd) return fail(Code::unavailable, "cannot connect to {} to find containerd: {}", socket, std::strerror(errno));
    ucred cred{};
    socklen_t len = sizeof cred;
    const int rc = ::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len);
    if (rc != 0 || cred.pid <= 0)
        return fail(Code::unavailable, "{}: the serving process is not visible from here (run with the host's PID namespace)",
                    socket);
    return cred.pid;
}

namespace {

// install()'s state and steps, in the order install() runs them. Each step returns an error
// that ends the install; what the steps before it did stays done.
class Installer {
public:
    explicit Installer(const InstallOptions& o) : o_(o) {}

    Result<InstallReport> run() {
        if (auto st = resolve_paths(); !st) return std::unexpected(st.error());
        if (auto st = stage_binary(); !st) return std::unexpected(st.error());
        if (auto st = verify_on_host(); !st) return std::unexpected(st.error());
        if (auto st = write_runtime_config(); !st) return std::unexpected(st.error());
        if (auto st = swap_in(); !st) return std::unexpected(st.error());
        if (auto st = configure_containerd(); !st) return std::unexpected(st.error());
        if (auto st = dev_char_links(); !st) return std::unexpected(st.error());
        if (auto st = restart_containerd(); !st) return std::unexpected(st.error());
        return std::move(report_);
    }

private:
    // Each line is handed on as soon as its step is done, not only in the report: a restart of
    // containerd loses what the init container prints after it (see options.progress).
    void say(std::string line) {
        if (o_.progress) o_.progress(line);
        report_.lines.push_back(std::move(line));
    }

    // Every host path, resolved inside --host-root before anything is written (host_path()). The
    // install directory's own entries are named under the resolved directory, so that the links
    // kgpu-container-runtime and nvidia-cdi-hook are replaced, not followed.
    Status resolve_paths() {
        if (o_.install_dir.empty() || o_.install_dir.front() != '/')
            return fail(Code::invalid_argument, "--install-dir '{}': expected an absolute host path", o_.install_dir);
        if (o_.runtime_config_path.empty() || o_.runtime_config_path.front() != '/' ||
            o_.runtime_config_path.find('\n') != std::string::npos)
            return fail(Code::invalid_argument, "--runtime-config '{}': expected an absolute host path",
                        o_.runtime_config_path);
        for (const std::string& p : {o_.install_dir, o_.runtime_config_path, o_.containerd_config, o_.drop_in,
                                     o_.containerd_socket, o_.dbus_socket}) {
            if (p.empty() || p.front() != '/' || resolved_.contains(p)) continue;
            auto r = host_path(o_, p);
            if (!r) return std::unexpected(r.error());
            resolved_.emplace(p, std::move(*r));
        }
        return {};
    }
    fs::path host(const std::string& p) const {
        if (auto it = resolved_.find(p); it != resolved_.end()) return it->second;
        const fs::path rel = fs::path(p).lexically_relative(o_.install_dir);
        if (!rel.empty() && *rel.begin() != "..") return resolved_.at(o_.install_dir) / rel;
        return files::under_root(o_.host_root, p);  // not reached: every path is one of the above
    }

    // 1. The binary, stripped and with its glibc carried, staged next to its place: it runs on
    // the host (step 2) and is swapped in by one rename after its glibc is complete; until then
    // the old binary and its glibc serve.
    Status stage_binary() {
        std::string source = o_.source_binary;
        if (source.empty()) {
            std::error_code ec;
            source = fs::read_symlink("/proc/self/exe", ec).string();
            if (ec) return fail(Code::io, "cannot find this binary (/proc/self/exe): {}", ec.message());
        }
        auto bytes = files::read(source);
        if (!bytes) return std::unexpected(bytes.error().context("install"));
        // Every container start executes the copy (runtime, hooks): without the debug information
        // a build tree's binary carries, which only a debugger reads (common/elf.h).
        auto stripped = elf::strip_debug(*bytes, source);
        if (!stripped) return std::unexpected(stripped.error().context("install"));
        if (stripped->sections != 0)
            stripped_note_ = fmt::format("; {} is {:.1f} MB with its debug information, not copied", source,
                                         static_cast<double>(bytes->size()) / 1e6);
        image_ = std::move(stripped->image);
        auto carried = carry_glibc(o_, image_, source);
        if (!carried) return std::unexpected(carried.error());
        if (!carried->line.empty()) say(carried->line);
        carried_lib_dir_ = carried->lib_dir;
        binary_ = join_path(o_.install_dir, "kgpu");
        auto existing = read_existing(host(binary_));
        if (!existing) return std::unexpected(existing.error());
        existed_ = existing->exists;
        previous_glibc_ = existing->exists ? interpreter_dir(existing->text, binary_) : std::string();
        changed_ = !existing->exists || existing->text != image_;
        staged_ = changed_ ? join_path(o_.install_dir, ".kgpu.new") : binary_;
        if (changed_) {
            if (auto st = ensure_dir(host(o_.install_dir)); !st) return st;
            if (auto st = files::write_atomic(host(staged_), image_, 0755); !st) return st;
        }
        if (::chmod(host(staged_).c_str(), 0755) != 0)
            return fail(Code::io, "chmod {}: {}", host(staged_).string(), std::strerror(errno));
        return {};
    }
    void discard_staged() {
        std::error_code ec;
        if (changed_) fs::remove(host(staged_), ec);
    }

    // 2. It runs on the host, before anything points at it (an upgrade: before it replaces the
    // binary containerd runs).
    Status verify_on_host() {
        if (!o_.verify) return {};
        if (o_.host_root != "/" && ::geteuid() != 0) {
            verified_ = "not verified: running it inside --host-root needs root (chroot)";
            return {};
        }
        auto v = run_on_host(o_.host_root, staged_);
        if (!v) {
            discard_staged();
            return fail(v.error().code,
                        "{}; it was not put in place ({} {}), so containerd and the runtime's config were left as they "
                        "were",
                        v.error().message, binary_, existed_ ? "is the binary from before" : "was not installed");
        }
        verified_ = fmt::format("verified: {} --version runs on the host: {}", binary_, *v);
        return {};
    }

    // 3. The runtime's config, and where it is, next to the runtime: containerd passes the
    // runtime no env variable or flag, so without the record an --runtime-config elsewhere than
    // the default path would never be read (toolkit/config.h). Both before the new binary is
    // swapped in: a new runtime that finds no record (an upgrade from before the record, a write
    // that failed) would run with NVIDIA's permissive defaults.
    Status write_runtime_config() {
        RuntimeConfig rc = o_.runtime;
        if (rc.hook_path.empty()) rc.hook_path = join_path(o_.install_dir, "nvidia-cdi-hook");
        auto wrote = write_if_changed(host(o_.runtime_config_path), render_config(rc), 0644, true);
        if (!wrote) {
            discard_staged();
            return std::unexpected(wrote.error());
        }
        say(fmt::format("{} {}", *wrote ? "wrote" : "unchanged:", o_.runtime_config_path));
        const std::string record = join_path(o_.install_dir, std::string(kConfigRecordName));
        auto recorded = write_if_changed(host(record), o_.runtime_config_path + "\n", 0644);
        if (!recorded) {
            discard_staged();
            return std::unexpected(recorded.error());
        }
        say(fmt::format("{} {}: the runtime reads {}", *recorded ? "wrote" : "unchanged:", record,
                        o_.runtime_config_path));
        return {};
    }

    // The staged binary renamed over the old one, the glibcs no binary needs pruned, the links.
    Status swap_in() {
        if (changed_ && ::rename(host(staged_).c_str(), host(binary_).c_str()) != 0)
            return fail(Code::io, "cannot rename {} to {}: {}", host(staged_).string(), host(binary_).string(),
                        std::strerror(errno));
        say(fmt::format("{} {} ({:.1f} MB{})", changed_ ? "installed" : "unchanged:", binary_,
                        static_cast<double>(image_.size()) / 1e6, stripped_note_));
        // Only a swap retires a glibc: an unchanged install changes nothing.
        if (changed_ && !carried_lib_dir_.empty()) {
            auto removed = prune_glibcs(o_, carried_lib_dir_, previous_glibc_);
            if (!removed) return std::unexpected(removed.error());
            if (!previous_glibc_.empty() && previous_glibc_ != carried_lib_dir_)
                say(fmt::format("kept {}: the glibc of the binary it replaced, for a runtime or hook started before the "
                                "swap",
                                previous_glibc_));
            if (!removed->empty()) say(fmt::format("removed {}: older carried glibc", fmt::join(*removed, ", ")));
        }
        std::vector<std::string> linked;
        for (const char* name : {"kgpu-container-runtime", "nvidia-cdi-hook"}) {
            auto made = ensure_symlink(host(join_path(o_.install_dir, name)), "kgpu");
            if (!made) return std::unexpected(made.error());
            if (*made) linked.push_back(name);
        }
        say(linked.empty()
                ? fmt::format("unchanged: {}/{{kgpu-container-runtime,nvidia-cdi-hook}} -> kgpu", o_.install_dir)
                : fmt::format("linked {} -> kgpu in {}", fmt::join(linked, ", "), o_.install_dir));
        if (!verified_.empty()) say(verified_);
        return {};
    }

    // 4. containerd's config (or its drop-in).
    Status configure_containerd() {
        runtime::ContainerdOptions co;
        co.runtime_name = o_.runtime_name;
        co.runtime_path = join_path(o_.install_dir, "kgpu-container-runtime");
        co.set_as_default = o_.set_as_default;
        co.enable_cdi = o_.enable_cdi;
        auto main = read_existing(host(o_.containerd_config));
        if (!main) return std::unexpected(main.error());
        if (o_.drop_in.empty()) {
            auto edited = runtime::configure(main->text, o_.containerd_config, co);
            if (!edited) return std::unexpected(edited.error());
            auto w = write_if_changed(host(o_.containerd_config), edited->text, 0644, true);
            if (!w) return std::unexpected(w.error());
            report_.containerd_changed = *w;
        } else {
            auto edited = runtime::configure_drop_in(main->text, o_.containerd_config, o_.drop_in, co);
            if (!edited) return std::unexpected(edited.error());
            auto d = write_if_changed(host(o_.drop_in), edited->drop_in, 0644);
            if (!d) return std::unexpected(d.error());
            auto w = write_if_changed(host(o_.containerd_config), edited->main.text, 0644, true);
            if (!w) return std::unexpected(w.error());
            report_.containerd_changed = *d || *w;
        }
        say(report_.containerd_changed
                ? fmt::format("updated {}: runtime {} -> {}", o_.drop_in.empty() ? o_.containerd_config : o_.drop_in,
                              o_.runtime_name, co.runtime_path)
                : fmt::format("unchanged: {} already runs {} as {}", o_.containerd_config, co.runtime_path,
                              o_.runtime_name));
        return {};
    }

    // 5. /dev/char links (before the restart, which is the last step: the DaemonSet's init
    // container's output after containerd went away may never reach its log).
    Status dev_char_links() {
        if (!o_.dev_char_links) return {};
        const fs::path dev_root =
            o_.runtime.dev_root.empty() ? fs::path(o_.runtime.driver_root) : fs::path(o_.runtime.dev_root);
        auto made = create_dev_char_links(o_.host_root, dev_root);
        if (!made) return std::unexpected(made.error());
        const auto all = nvidia_dev_char_links(o_.host_root, dev_root);
        say(all.empty()     ? "no NVIDIA device nodes: no /dev/char links to create"
            : made->empty() ? fmt::format("unchanged: /dev/char links for {} NVIDIA device nodes", all.size())
                            : fmt::format("created {} /dev/char links", made->size()));
        return {};
    }

    // 6. containerd restarted, only for a changed config; each way is said before it is done.
    Status restart_containerd() {
        if (!report_.containerd_changed) {
            say("containerd not restarted: its config did not change");
            return {};
        }
        if (o_.restart == RestartMode::none) {
            say("containerd not restarted (--restart-mode none): restart it to apply the change");
            return {};
        }
        const std::string socket = host(o_.containerd_socket).string();
        const SocketIdentity before = socket_identity(socket);
        if (o_.restart == RestartMode::signal) {
            auto pid = socket_owner(socket);
            if (!pid) return std::unexpected(pid.error().context("restarting containerd"));
            say(fmt::format("restarting containerd: SIGHUP to pid {} (it exits; its service manager, e.g. systemd, starts "
                            "it again)",
                            *pid));
            if (::kill(*pid, SIGHUP) != 0)
                return fail(Code::io, "restarting containerd: SIGHUP to pid {}: {}", *pid, std::strerror(errno));
        } else {
            say(fmt::format("restarting {} through systemd (RestartUnit over D-Bus)", o_.containerd_unit));
            auto job = systemd_restart_unit(host(o_.dbus_socket).string(), o_.containerd_unit);
            if (!job) return std::unexpected(job.error().context("restarting containerd through systemd"));
            say(fmt::format("restarted {} through systemd (D-Bus job {})", o_.containerd_unit, *job));
        }
        if (o_.restart_timeout.count() <= 0) return {};
        auto back = wait_for_new_server(socket, before, o_.restart_timeout);
        if (!back)
            return fail(Code::unavailable,
                        "containerd did not serve {} again within {} s of the restart: nothing started it again (with "
                        "--restart-mode signal a service manager must, e.g. systemd's Restart=; or use --restart-mode "
                        "systemd); its config is already changed, so starting it is all that is left",
                        o_.containerd_socket,
                        std::chrono::duration_cast<std::chrono::seconds>(o_.restart_timeout).count());
        say(fmt::format("containerd serves {} again ({:.1f} s after the restart)", o_.containerd_socket, *back));
        // containerd answers on its socket a few milliseconds before its CRI plugin subscribes to
        // task exits and recovers its containers. A container that exits in between (this one,
        // when it runs as the DaemonSet's init container) is never seen to exit: the pod stays
        // Init:0/1 (seen in the e2e suite under load). Let containerd settle first.
        std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(std::chrono::seconds(2), o_.restart_timeout));
        return {};
    }

    const InstallOptions& o_;
    InstallReport report_;
    std::map<std::string, fs::path> resolved_;  // host paths by their name on the host
    std::string image_;                         // the binary as installed
    std::string stripped_note_;                 // what stripping left behind, for the report
    std::string carried_lib_dir_;               // the glibc carried with it (empty: none)
    std::string binary_, staged_;               // <install-dir>/kgpu, and where it is staged
    bool existed_ = false, changed_ = false;    // a binary was there; it differs from ours
    std::string previous_glibc_;                // the glibc the binary there uses
    std::string verified_;                      // step 2's line, said after the swap
};

}  // namespace

Result<InstallReport> install(const InstallOptions& o) { return Installer(o).run(); }

}  // namespace kgpu::toolkit
