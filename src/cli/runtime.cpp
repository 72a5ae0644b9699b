#include "cli/runtime.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>

#include "common/files.h"
#include "common/log.h"
#include "common/strings.h"
#include "demo/process.h"
#include "doctor/host.h"
#include "runtime/containerd.h"
#include "runtime/crio.h"
#include "runtime/diff.h"
#include "runtime/docker.h"
#include "runtime/oci_hook.h"

namespace kgpu::cli {

namespace fs = std::filesystem;

CLI::App* add_runtime_command(CLI::App& app, RuntimeOptions& opts) {
    auto* rt = app.add_subcommand("runtime", "Container runtime configuration");
    rt->require_subcommand(1);
    auto* c = rt->add_subcommand("configure", "Add the NVIDIA runtime (and CDI) to containerd's, CRI-O's or Docker's config");
    c->add_option("--runtime", opts.runtime, "The container engine to configure: containerd, crio or docker")
        ->capture_default_str()
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    c->add_option("--config", opts.config,
                  "The engine's config file (default: /etc/containerd/config.toml, /etc/crio/crio.conf, "
                  "/etc/docker/daemon.json)")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    c->add_option("--drop-in-config,--drop-in", opts.drop_in,
                  "The NVIDIA drop-in file written instead of editing --config (default: "
                  "/etc/containerd/conf.d/99-nvidia.toml, /etc/crio/crio.conf.d/99-nvidia.toml; none for Docker); "
                  "\"\" edits --config in place")
        ->expected(0, 1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    c->add_option("--executable-path", opts.executable_path,
                  "The engine's binary, for `config dump` (--config-source command, and the check of the result)")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    c->add_option("--config-mode", opts.config_mode,
                  "config-file (default) or the deprecated oci-hook: write an OCI hook file instead")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    c->add_option("--config-source", opts.config_source,
                  "Where the current settings are read from: file, or command (`containerd config dump`, "
                  "`crio status config`)")
        ->capture_default_str()
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    c->add_option("--oci-hook-path", opts.oci_hook_path, "With --config-mode oci-hook: the hook file to write (default: stdout)")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    c->add_option("--nvidia-runtime-name", opts.runtime_name, "Name of the runtime to add (the RuntimeClass handler)")
        ->capture_default_str()
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    c->add_option("--nvidia-runtime-path,--runtime-path", opts.runtime_path,
                  "The NVIDIA runtime binary (/usr/bin/nvidia-container-runtime for containerd and CRI-O; looked up "
                  "in Docker's PATH for Docker)")
        ->capture_default_str()
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    c->add_option("--nvidia-runtime-hook-path", opts.runtime_hook_path,
                  "With --config-mode oci-hook: the nvidia-container-runtime-hook binary")
        ->capture_default_str()
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    c->add_flag("--nvidia-set-as-default,--set-as-default", opts.set_as_default, "Make it the engine's default runtime");
    c->add_flag("--cdi.enabled,--cdi.enable,--enable-cdi", opts.enable_cdi,
                "Enable CDI (containerd: enable_cdi; Docker: features.cdi; CRI-O has it on already)");
    c->add_flag("--dry-run", opts.dry_run, "Print the changes as unified diffs; write nothing");
    // Unset and "" differ: unset is the runtime's default drop-in, "" edits in place.
    auto* drop_in = c->get_option("--drop-in-config");
    c->callback([&opts, drop_in] { opts.drop_in_given = drop_in->count() > 0; });
    return rt;
}

namespace {

// A file as it was before the run.
struct Original {
    std::string text;
    bool exists = false;
    unsigned mode = 0644;
    uid_t uid = 0;
    gid_t gid = 0;
};

Result<Original> read_original(const std::string& path) {
    // A directory, FIFO, socket or device is refused (a FIFO would block the read forever).
    auto text = files::read_regular(path);
    if (!text) {
        if (text.error().code == Code::not_found) return Original{};
        return std::unexpected(text.error());
    }
    Original o{*text, true, 0644, ::getuid(), ::getgid()};
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
        o.mode = st.st_mode & 07777;
        o.uid = st.st_uid;
        o.gid = st.st_gid;
    }
    return o;
}

// The one place kgpu writes a runtime config (so the atomic-write helper can change under it):
// atomically, then the owner of the file it replaces.
Status write_file(const std::string& path, const std::string& text, const Original& like) {
    if (auto st = files::write_atomic(path, text, like.mode); !st) return st;
    if (like.exists && (like.uid != ::getuid() || like.gid != ::getgid())) {
        if (::chown(path.c_str(), like.uid, like.gid) != 0)
            return fail(Code::io, "cannot give {} its owner back ({}:{}): {}", path, like.uid, like.gid, std::strerror(errno));
    }
    return {};
}

// <path>.bak, or the first free <path>.bak.N: a backup never replaces an older one, so the
// pristine original survives any number of runs.
std::string backup_path(const std::string& path) {
    std::error_code ec;
    std::string candidate = path + ".bak";
    for (int n = 1; fs::symlink_status(candidate, ec).type() != fs::file_type::not_found; ++n)
        candidate = path + ".bak." + std::to_string(n);
    return candidate;
}

struct Change {
    std::string path;
    Original before;
    std::string after;
    bool changed() const { return !before.exists || before.text != after; }
};

// The engine's binary: --executable-path, else `name` in PATH; nullopt when absent.
std::optional<std::string> find_executable(const std::string& explicit_path, const std::string& name) {
    if (!explicit_path.empty()) {
        if (::access(explicit_path.c_str(), X_OK) == 0) return fs::absolute(explicit_path).string();
        return std::nullopt;
    }
    std::vector<std::string> dirs;
    if (const char* path = std::getenv("PATH"))
        for (auto d : strings::split(path, ':'))
            if (!d.empty()) dirs.emplace_back(d);
    for (const char* d : {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}) dirs.emplace_back(d);
    if (auto p = doctor::find_binary("/", name, dirs); p && ::access(p->c_str(), X_OK) == 0) return p->string();
    return std::nullopt;
}

// A scratch directory, removed with everything in it.
struct ScratchDir {
    std::string path;
    ScratchDir() {
        const char* base = std::getenv("TMPDIR");
        std::string tmpl = std::string(base && *base ? base : "/tmp") + "/kgpu-runtime-XXXXXX";
        if (::mkdtemp(tmpl.data())) path = tmpl;
    }
    ~ScratchDir() {
        std::error_code ec;
        if (!path.empty()) fs::remove_all(path, ec);
    }
};

// Runs `argv` (argv[0] absolute) and returns its stdout. Errors: io when it cannot run; internal
// with its stderr when it exits non-zero.
Result<std::string> run_for_output(const std::vector<std::string>& argv, const ScratchDir& dir, const std::string& tag) {
    demo::SpawnOptions so;
    so.argv = argv;
    so.stdout_path = dir.path + "/" + tag + ".out";
    so.log_path = dir.path + "/" + tag + ".err";
    auto rc = demo::run_to_completion(so, std::chrono::seconds(30), [] { return false; });
    if (!rc) return std::unexpected(rc.error());
    auto out = files::read(so.stdout_path);
    if (*rc != 0) {
        auto err = files::read(so.log_path);
        std::string why = err ? std::string(strings::trim(*err)) : "";
        if (why.size() > 2000) why = "..." + why.substr(why.size() - 2000);
        std::string cmd;
        for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
        return fail(Code::internal, "`{}` exited with {}: {}", cmd, *rc, why);
    }
    if (!out) return std::unexpected(out.error());
    return *out;
}

// Reads the engine's current settings with its own binary (--config-source command).
Result<runtime::SourceText> command_source(const RuntimeOptions& o) {
    const std::string name = o.runtime == "crio" ? "crio" : "containerd";
    auto exe = find_executable(o.executable_path, name);
    if (!exe)
        return fail(Code::not_found, "--config-source command: {} not found{}", name,
                    o.executable_path.empty() ? " in PATH (set --executable-path)" : " at " + o.executable_path);
    ScratchDir dir;
    if (dir.path.empty()) return fail(Code::io, "cannot create a temporary directory: {}", std::strerror(errno));
    if (o.runtime == "crio") {
        auto out = run_for_output({*exe, "status", "config"}, dir, "status");
        if (out) return runtime::SourceText{*out, *exe + " status config"};
        if (auto alt = find_executable("", "crio-status")) {
            auto out2 = run_for_output({*alt, "config"}, dir, "status2");
            if (out2) return runtime::SourceText{*out2, *alt + " config"};
        }
        return std::unexpected(out.error());
    }
    auto out = run_for_output({*exe, "config", "dump"}, dir, "dump");
    if (!out) return std::unexpected(out.error());
    return runtime::SourceText{*out, *exe + " config dump"};
}

// Before anything is written: containerd itself reads the result (`containerd config dump` on
// a staged copy: the main config with its import of the drop-in pointed at a scratch copy)
// and must show the runtime. Skipped, with a log line, when no containerd binary is there or
// when it is too old for the config's version.
Status check_with_containerd(const RuntimeOptions& o, const runtime::ContainerdOptions& co, int version,
                             const std::string& new_main, const std::optional<std::string>& new_drop_in) {
    auto exe = find_executable(o.executable_path, "containerd");
    if (!exe) {
        log::info("containerd not found{}: the result was not checked with `containerd config dump`",
                  o.executable_path.empty() ? " in PATH" : " at " + o.executable_path);
        return {};
    }
    ScratchDir dir;
    if (dir.path.empty()) return fail(Code::io, "cannot create a temporary directory: {}", std::strerror(errno));
    auto version_text = run_for_output({*exe, "--version"}, dir, "version");
    const auto cv = version_text ? runtime::parse_containerd_version(*version_text) : std::nullopt;
    const int major = cv ? cv->first : 0;
    const std::string cv_text = cv ? std::to_string(cv->first) + "." + std::to_string(cv->second) : "of unknown version";
    if (version == 3 && major < 2) {
        log::warn("{} is containerd {}, which cannot read a version 3 config: the result was not checked with "
                  "`containerd config dump` (containerd 2.x reads it)",
                  *exe, cv_text);
        return {};
    }
    const std::string config_dir = fs::path(o.config).parent_path().string();
    std::string staged_drop_in;
    if (new_drop_in) {
        const fs::path real_dir = fs::path(o.drop_in).parent_path();
        const fs::path staged_dir = fs::path(dir.path) / "conf.d";
        std::error_code ec;
        fs::create_directories(staged_dir, ec);
        // The other drop-ins the import pattern takes in come along.
        for (const auto& e : fs::directory_iterator(real_dir, ec)) {
            if (e.path().extension() != ".toml" || e.path().filename() == fs::path(o.drop_in).filename()) continue;
            fs::copy_file(e.path(), staged_dir / e.path().filename(), fs::copy_options::overwrite_existing, ec);
        }
        staged_drop_in = (staged_dir / fs::path(o.drop_in).filename()).string();
        if (auto st = files::write_atomic(staged_drop_in, *new_drop_in); !st) return st;
    }
    auto staged = runtime::staged_main_config(new_main, o.config, config_dir.empty() ? "/" : config_dir,
                                              new_drop_in ? o.drop_in : std::string(), staged_drop_in);
    if (!staged) return std::unexpected(staged.error());
    const std::string staged_main = dir.path + "/config.toml";
    if (auto st = files::write_atomic(staged_main, *staged); !st) return st;
    auto dump = run_for_output({*exe, "--config", staged_main, "config", "dump"}, dir, "dump");
    if (!dump) return fail(Code::invalid_argument, "containerd rejects the result, so nothing was written: {}", dump.error().message);
    if (strings::trim(*dump).empty()) {
        // Not containerd's answer (a stand-in binary): no evidence either way.
        log::warn("`{} config dump` printed nothing: the result was not checked", *exe);
        return {};
    }
    if (auto st = runtime::check_dump(*dump, co); !st)
        return fail(Code::invalid_argument, "{}; nothing was written", st.error().message);
    log::info("checked the result with `{} config dump` (containerd {})", *exe, cv_text);
    return {};
}

int report(const Error& e) {
    std::cerr << "kgpu runtime configure: " << e.message << "\n";
    return 1;
}

int usage(const std::string& message) {
    std::cerr << "kgpu runtime configure: " << message << "\n";
    return 2;
}

// Prints the diffs (dry run) or writes the changed files, each after a backup of its former
// self; drop-ins first, so the main config never imports a file that is not there yet.
int apply_changes(const RuntimeOptions& o, const std::vector<Change>& changes) {
    bool any = false;
    for (const auto& c : changes) any = any || c.changed();
    if (o.dry_run) {
        for (const auto& c : changes)
            if (c.changed())
                std::cout << runtime::unified_diff(c.before.text, c.after, c.before.exists ? c.path : "/dev/null",
                                                   c.path + " (kgpu)");
        if (!any) std::cerr << "kgpu runtime configure: already configured; nothing to change\n";
        return 0;
    }
    if (!any) {
        std::cerr << "kgpu runtime configure: " << changes.back().path << " is already configured; nothing changed\n";
        return 0;
    }
    std::string written;
    for (const auto& c : changes) {
        if (!c.changed()) continue;
        // 0755 whatever the umask (issue #14): a drop-in directory nobody else may write to.
        if (auto st = files::create_directories(fs::path(c.path).parent_path(), 0755); !st) return report(st.error());
        if (c.before.exists) {
            const std::string bak = backup_path(c.path);
            if (auto st = write_file(bak, c.before.text, c.before); !st) return report(st.error());
            written += fmt::format("{}{} (previous version in {})", written.empty() ? "" : ", ", c.path, bak);
        } else {
            written += fmt::format("{}{} (new)", written.empty() ? "" : ", ", c.path);
        }
        if (auto st = write_file(c.path, c.after, c.before); !st) return report(st.error());
    }
    const std::string service = o.runtime == "crio" ? "crio" : o.runtime;
    std::cerr << "kgpu runtime configure: updated " << written << ". Restart " << service
              << " to apply it: systemctl restart " << service << "\n";
    return 0;
}

int configure_containerd(const RuntimeOptions& o, const std::optional<runtime::SourceText>& from) {
    runtime::ContainerdOptions co;
    co.runtime_name = o.runtime_name;
    co.runtime_path = o.runtime_path;
    co.set_as_default = o.set_as_default;
    co.enable_cdi = o.enable_cdi;
    auto main = read_original(o.config);
    if (!main) return report(main.error());
    auto version = runtime::config_version(from ? from->text : main->text, from ? from->name : o.config, co);
    if (!version) return report(version.error());
    std::vector<Change> changes;
    std::optional<std::string> new_drop_in;
    std::string new_main;
    if (o.drop_in.empty() || *version == 1) {
        if (!o.drop_in.empty())
            log::info("{} is a version 1 config, which has no imports: editing it in place instead of writing {}",
                      o.config, o.drop_in);
        auto edited = runtime::configure(main->text, o.config, co, from);
        if (!edited) return report(edited.error());
        new_main = edited->text;
    } else {
        auto edited = runtime::configure_drop_in(main->text, o.config, o.drop_in, co, from);
        if (!edited) return report(edited.error());
        auto old = read_original(o.drop_in);
        if (!old) return report(old.error());
        changes.push_back({o.drop_in, *old, edited->drop_in});
        new_drop_in = edited->drop_in;
        new_main = edited->main.text;
    }
    changes.push_back({o.config, *main, new_main});
    bool any = false;
    for (const auto& c : changes) any = any || c.changed();
    if (any) {
        if (auto st = check_with_containerd(o, co, *version, new_main, new_drop_in); !st) return report(st.error());
    }
    return apply_changes(o, changes);
}

int configure_crio(const RuntimeOptions& o, const std::optional<runtime::SourceText>& from) {
    runtime::CrioOptions co;
    co.runtime_name = o.runtime_name;
    co.runtime_path = o.runtime_path;
    co.set_as_default = o.set_as_default;
    auto main = read_original(o.config);
    if (!main) return report(main.error());
    std::vector<Change> changes;
    if (o.drop_in.empty()) {
        auto edited = runtime::configure_crio(main->text, o.config, co, from);
        if (!edited) return report(edited.error());
        changes.push_back({o.config, *main, edited->text});
    } else {
        auto text = runtime::crio_drop_in(from ? *from : runtime::SourceText{main->text, o.config}, co);
        if (!text) return report(text.error());
        auto old = read_original(o.drop_in);
        if (!old) return report(old.error());
        changes.push_back({o.drop_in, *old, *text});
    }
    return apply_changes(o, changes);
}

int configure_docker(const RuntimeOptions& o) {
    runtime::DockerOptions d;
    d.runtime_name = o.runtime_name;
    d.runtime_path = o.runtime_path;
    d.set_as_default = o.set_as_default;
    d.enable_cdi = o.enable_cdi;
    auto main = read_original(o.config);
    if (!main) return report(main.error());
    auto edited = runtime::configure_docker(main->text, o.config, d);
    if (!edited) return report(edited.error());
    return apply_changes(o, {{o.config, *main, edited->text}});
}

}  // namespace

int run_runtime_configure(RuntimeOptions o) {
    // Flag checks and defaults as nvidia-ctk's validateFlags.
    if (o.config_mode == "oci-hook" || o.config_mode == "hook") {
        log::warn("the \"{}\" config mode is deprecated (as in nvidia-ctk)", o.config_mode);
        if (o.runtime_hook_path.empty() || o.runtime_hook_path.front() != '/')
            return usage(fmt::format("--nvidia-runtime-hook-path '{}': expected an absolute path", o.runtime_hook_path));
        const std::string hook = runtime::oci_hook_json(o.runtime_hook_path);
        if (o.oci_hook_path.empty() || o.dry_run) {
            std::cout << hook;
            return 0;
        }
        auto old = read_original(o.oci_hook_path);
        if (!old) return report(old.error());
        return apply_changes(o, {{o.oci_hook_path, *old, hook}});
    }
    if (!o.config_mode.empty() && o.config_mode != "config-file" && o.config_mode != "config")
        log::warn("ignoring the unsupported config mode \"{}\" for {}: using config-file", o.config_mode, o.runtime);
    if (o.runtime != "containerd" && o.runtime != "crio" && o.runtime != "docker")
        return usage(fmt::format("unrecognized runtime '{}': expected containerd, crio or docker", o.runtime));
    if (o.runtime != "docker") {
        if (o.runtime_path == "nvidia-container-runtime") o.runtime_path = "/usr/bin/nvidia-container-runtime";
        if (o.runtime_path.empty() || o.runtime_path.front() != '/')
            return usage(fmt::format("--nvidia-runtime-path '{}': expected an absolute path", o.runtime_path));
    }
    if (o.runtime == "crio" && o.enable_cdi) {
        log::warn("ignoring --cdi.enabled for crio: CRI-O enables CDI by itself");
        o.enable_cdi = false;
    }
    if (o.runtime == "docker" && !o.executable_path.empty()) {
        log::warn("ignoring --executable-path={} for docker", o.executable_path);
        o.executable_path.clear();
    }
    if (o.config_source == "command" && o.runtime == "docker") {
        log::warn("a command config source is not supported for docker; using file");
        o.config_source = "file";
    } else if (o.config_source != "file" && o.config_source != "command") {
        return usage(fmt::format("--config-source '{}': expected file or command", o.config_source));
    }
    if (o.config.empty()) {
        o.config = o.runtime == "containerd" ? "/etc/containerd/config.toml"
                   : o.runtime == "crio"     ? "/etc/crio/crio.conf"
                                             : "/etc/docker/daemon.json";
    }
    if (!o.drop_in_given) {
        o.drop_in = o.runtime == "containerd" ? "/etc/containerd/conf.d/99-nvidia.toml"
                    : o.runtime == "crio"     ? "/etc/crio/crio.conf.d/99-nvidia.toml"
                                              : "";
    }
    if (!o.drop_in.empty() && o.runtime == "docker") return usage("runtime docker does not support drop-in configs");
    if (!o.drop_in.empty() && o.drop_in.front() != '/')
        return usage(fmt::format("--drop-in-config '{}': expected an absolute path", o.drop_in));

    std::optional<runtime::SourceText> from;
    if (o.config_source == "command") {
        auto src = command_source(o);
        if (!src) return report(src.error());
        from = std::move(*src);
    }
    if (o.runtime == "containerd") return configure_containerd(o, from);
    if (o.runtime == "crio") return configure_crio(o, from);
    return configure_docker(o);
}

}  // namespace kgpu::cli
