#include "toolkit/runtime.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cdi/hooks.h"
#include "common/files.h"
#include "common/log.h"
#include "common/strings.h"
#include "inventory/discovery.h"
#include "nvml/brand.h"
#include "nvml/device.h"
#include "nvml/library.h"
#include "toolkit/devices.h"
#include "toolkit/edits.h"
#include "toolkit/inventory_cache.h"
#include "toolkit/oci_edit.h"
#include "toolkit/request.h"
#include "toolkit/requirements.h"

namespace kgpu::toolkit {

namespace fs = std::filesystem;

RuncArgs parse_runc_args(const std::vector<std::string>& args) {
    RuncArgs a;
    auto flag_name = [](std::string_view arg) {
        std::string_view n = arg;
        while (n.starts_with('-')) n.remove_prefix(1);
        return n.substr(0, n.find('='));
    };
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        std::string_view name = arg.starts_with('-') ? flag_name(arg) : std::string_view{};
        // --bundle/-b anywhere (NVIDIA's GetBundleDirFromArgs).
        if (name == "b" || name == "bundle") {
            if (auto eq = arg.find('='); eq != std::string::npos) a.bundle = arg.substr(eq + 1);
            else if (i + 1 < args.size()) a.bundle = args[++i];
            continue;
        }
        if (!a.command.empty()) continue;
        if (!arg.starts_with('-')) {
            a.command = arg;
            continue;
        }
        if (name == "version" || name == "v") a.version = true;
        // runc's global flags that take a value.
        if (name == "root" || name == "log" || name == "log-format" || name == "criu" || name == "rootless") {
            std::string value;
            if (auto eq = arg.find('='); eq != std::string::npos) value = arg.substr(eq + 1);
            else if (i + 1 < args.size()) value = args[++i];
            if (name == "log") a.log_file = value;
            if (name == "log-format") a.log_format = value;
        }
    }
    a.modifies = a.command == "create" || a.command == "run";
    return a;
}

namespace {

class NvmlNodeSource : public NodeSource {
public:
    explicit NvmlNodeSource(RuntimeConfig c) : config_(std::move(c)) {}

    Result<inventory::Node> node() override {
        if (node_) return *node_;
        if (auto st = open(); !st) return std::unexpected(st.error());
        inventory::DiscoveryOptions d;
        d.topology = false;
        auto n = inventory::discover(*session_, d);
        if (!n) return std::unexpected(n.error());
        node_ = std::move(*n);
        return *node_;
    }

    Result<std::string> brand(const std::string& uuid) override {
        if (auto st = open(); !st) return std::unexpected(st.error());
        auto dev = session_->device_by_uuid(uuid);
        if (!dev) return std::unexpected(dev.error());
        auto b = dev->brand();
        if (!b) return std::unexpected(b.error());
        return std::string(nvml::brand_name(*b).toolkit);
    }

private:
    Status open() {
        if (session_) return {};
        auto s = nvml::open_session({config_.nvml_library, config_.driver_root});
        if (!s) return std::unexpected(s.error());
        session_.emplace(std::move(*s));
        return {};
    }

    RuntimeConfig config_;
    std::optional<nvml::Session> session_;
    std::optional<inventory::Node> node_;
};

// The CDI hooks of `hooks` that the spec's hooks.<hookName> does not hold yet, compared in the OCI
// form apply_container_edits writes (oci_hook).
nlohmann::ordered_json hooks_not_in(const nlohmann::ordered_json& spec, const nlohmann::ordered_json& hooks) {
    if (!hooks.is_array()) return hooks;
    const auto all = spec.find("hooks");
    if (all == spec.end() || !all->is_object()) return hooks;
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& h : hooks) {
        const auto list = h.is_object() ? all->find(h.value("hookName", std::string())) : all->end();
        if (list == all->end() || !list->is_array()) {
            out.push_back(h);
            continue;
        }
        if (std::find(list->begin(), list->end(), oci_hook(h)) == list->end()) out.push_back(h);
    }
    return out;
}

}  // namespace

std::unique_ptr<NodeSource> nvml_node_source(const RuntimeConfig& config) { return std::make_unique<NvmlNodeSource>(config); }

Result<std::optional<Modified>> modify_spec(std::string_view text, const RuntimeConfig& config, const ModifyOptions& options,
                                            NodeSource& nodes, std::vector<std::string>& log) {
    auto spec = parse_spec(text);
    if (!spec) return std::unexpected(spec.error());
    // NVIDIA's runtime drops the legacy hook from every container it creates in its CDI modes,
    // whether or not the container asks for a GPU (hook_remover.go).
    const std::vector<std::string> removed = remove_legacy_hooks(*spec);
    const std::string removed_note =
        removed.empty() ? std::string()
                        : fmt::format("removed NVIDIA's legacy prestart hook {} (kgpu injects the GPUs itself)", fmt::join(removed, ", "));
    // No GPU: the spec as it came, or without the legacy hook.
    auto no_gpu = [&]() -> Result<std::optional<Modified>> {
        if (removed.empty()) return std::optional<Modified>{};
        auto out = dump_spec(*spec);
        if (!out) return std::unexpected(out.error());
        Modified m;
        m.text = std::move(*out);
        m.summary = "no GPU requested; " + removed_note;
        return std::optional<Modified>{std::move(m)};
    };
    auto view = read_container(*spec);
    if (!view) return std::unexpected(view.error());
    auto request = requested_devices(*view, config);
    if (!request) return std::unexpected(request.error());
    for (auto& n : request->notes) log.push_back(std::move(n));
    if (request->devices.empty()) return no_gpu();
    if (!options.refuse_gpus.empty())
        return fail(Code::not_found, "{} (the container asks for {} by {})", options.refuse_gpus, fmt::join(request->devices, ","),
                    to_string(request->source));

    const auto t_nvml = std::chrono::steady_clock::now();
    auto node = nodes.node();
    if (!node) return std::unexpected(node.error());
    const auto t_edit = std::chrono::steady_clock::now();
    auto sel = resolve_devices(*node, request->devices, config.default_kind);
    // A cached inventory is asked of NVML again where no witness covers it: a device it does not
    // know (MIG devices re-created in the same layout get new UUIDs), or "all" on a node where a
    // GPU's MIG mode may have changed without an instance coming or going.
    const bool doubt = sel ? sel->all && std::any_of(node->gpus.begin(), node->gpus.end(),
                                                     [](const auto& g) { return g.mig_mode != inventory::MigMode::unsupported; })
                           : sel.error().code == Code::not_found;
    if (doubt && nodes.refresh()) {
        node = nodes.node();
        if (!node) return std::unexpected(node.error());
        sel = resolve_devices(*node, request->devices, config.default_kind);
    }
    if (!sel) return std::unexpected(sel.error());
    for (auto& n : sel->notes) log.push_back(std::move(n));
    if (sel->empty()) return no_gpu();

    // The GPUs the container gets (MIG devices count as their parent), for arch/brand rules.
    std::vector<unsigned> gpus;
    if (sel->all) {
        for (unsigned i = 0; i < node->gpus.size(); ++i)
            if (!node->gpus[i].lost && !node->gpus[i].uuid.empty()) gpus.push_back(i);
    } else {
        gpus = sel->gpus;
        for (const auto& m : sel->migs)
            if (std::find(gpus.begin(), gpus.end(), m.gpu) == gpus.end()) gpus.push_back(m.gpu);
    }
    if (!config.disable_require) {
        auto reqs = requirements(*view);
        if (!reqs) return std::unexpected(reqs.error());
        if (!reqs->empty()) {
            NodeProperties props{node->cuda_version_string(), node->driver_version, {}};
            const bool needs_brand = std::any_of(reqs->begin(), reqs->end(), [](const auto& r) {
                return strings::lower(r.second).find("brand") != std::string::npos;
            });
            for (unsigned i : gpus) {
                const auto& g = node->gpus[i];
                GpuProperties p{g.index, g.name, fmt::format("{}.{}", g.cc_major, g.cc_minor), {}};
                if (needs_brand) {
                    if (auto b = nodes.brand(g.uuid)) p.brand = *b;
                    else log.push_back(fmt::format("GPU {}: brand unknown: {}", g.index, b.error().message));
                }
                props.gpus.push_back(std::move(p));
            }
            auto unmet = check_requirements(*reqs, props);
            if (!unmet) return std::unexpected(unmet.error());
            if (*unmet) return fail(Code::not_supported, "{}", explain(**unmet, props));
        }
    }

    EditOptions eo;
    eo.kind = config.default_kind;
    eo.driver_root = config.driver_root;
    eo.dev_root = config.dev_root;
    eo.proc_root = config.proc_root;
    eo.hook_path = options.hook_path;
    // The default ("@/sbin/ldconfig") is what both hooks (kgpu's, nvidia-cdi-hook) use without
    // the flag, and NVIDIA's runtime never passes one: the spec carries it only when configured.
    if (config.ldconfig_path != RuntimeConfig{}.ldconfig_path) eo.ldconfig_path = config.ldconfig_path;
    eo.capabilities = request->capabilities;
    auto edits = container_edits(*node, *sel, eo);
    if (!edits) return std::unexpected(edits.error());
    size_t steps = 0, hooks = 0;
    if (auto h = edits->find("hooks"); h != edits->end()) {
        if (options.chain_hooks) {
            // Hooks the spec already holds (containerd applied the same CDI device's edits, with
            // the same hooks' binary) are skipped by the edit; chained, they would not match and
            // run twice.
            *h = hooks_not_in(*spec, *h);
            steps = h->size();
            *h = cdi::chain_hooks(*h);
        } else {
            steps = h->size();
        }
        hooks = h->size();
    }
    if (auto st = apply_container_edits(*spec, *edits); !st) return std::unexpected(st.error());
    auto out = dump_spec(*spec);
    if (!out) return std::unexpected(out.error());

    std::vector<std::string> names;
    if (sel->all) names.push_back("all");
    if (sel->none) names.push_back("none");
    for (unsigned g : sel->gpus) names.push_back(node->gpus[g].uuid);
    for (const auto& m : sel->migs) names.push_back(node->gpus[m.gpu].mig_devices[m.mig].uuid);
    std::vector<std::string> caps(request->capabilities.begin(), request->capabilities.end());
    const auto t_done = std::chrono::steady_clock::now();
    auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
    Modified m;
    m.text = std::move(*out);
    m.nvml_ms = ms(t_edit - t_nvml);
    m.edit_ms = ms(t_done - t_edit);
    m.summary = fmt::format("injected {} (requested by {}: {}; capabilities {}): {} device nodes, {} mounts, {} hooks{}{}",
                            fmt::join(names, ","), to_string(request->source), fmt::join(request->devices, ","),
                            fmt::join(caps, ","), edits->value("deviceNodes", nlohmann::ordered_json::array()).size(),
                            edits->value("mounts", nlohmann::ordered_json::array()).size(),
                            hooks, hooks == steps ? std::string() : fmt::format(" ({} steps chained)", steps),
                            removed.empty() ? std::string() : "; " + removed_note);
    return std::optional<Modified>{std::move(m)};
}

namespace {

bool executable_file(const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

bool same_file(const std::string& a, const std::string& b) {
    struct stat sa {}, sb {};
    return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace

Result<std::string> find_low_level_runtime(const RuntimeConfig& config, std::string_view path_env, const std::string& self) {
    std::vector<std::string> tried;
    for (const auto& candidate : config.low_level_runtime) {
        std::vector<std::string> paths;
        if (candidate.find('/') != std::string::npos) {
            paths.push_back(candidate);
        } else {
            for (auto dir : strings::split(path_env.empty() ? "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" : path_env, ':'))
                if (!dir.empty()) paths.push_back(fmt::format("{}/{}", dir, candidate));
        }
        for (const auto& p : paths) {
            if (!executable_file(p)) {
                tried.push_back(p);
                continue;
            }
            if (!self.empty() && same_file(p, self)) {
                tried.push_back(p + " (kgpu itself)");
                continue;
            }
            return p;
        }
    }
    return fail(Code::not_found, "no low-level OCI runtime found (low-level-runtime = [{}] in {}); tried {}",
                fmt::join(config.low_level_runtime, ", "), config.source.empty() ? "the built-in defaults" : config.source,
                fmt::join(tried, ", "));
}

std::string resolve_hook_path(const RuntimeConfig& config, const std::string& self) {
    if (!config.hook_path.empty()) return config.hook_path;
    const fs::path sibling = fs::path(self).parent_path() / "nvidia-cdi-hook";
    std::error_code ec;
    if (!self.empty() && fs::exists(sibling, ec)) return sibling.string();
    return self;
}

namespace {

// Where the wrapper's own lines go: the configured log file (text), runc's --log file (in its
// format, so containerd's "OCI runtime create failed: <msg>" quotes our error), and for errors
// the original stderr.
class Logger {
public:
    Logger(const RuntimeConfig& config, const RuncArgs& args) : args_(args) {
        if (!config.log_file.empty()) file_ = ::open(config.log_file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        log::parse_level(config.log_level, level_);
    }
    ~Logger() {
        if (file_ >= 0) ::close(file_);
    }
    Logger(const Logger&) = delete;
    Logger& operator=(const Logger&) = delete;

    int file_fd() const { return file_; }

    void write(log::Level l, std::string_view msg) {
        if (l < level_) return;
        static constexpr std::string_view names[] = {"debug", "info", "warning", "error", "off"};
        const auto now = std::chrono::time_point_cast<std::chrono::milliseconds>(std::chrono::system_clock::now());
        const std::string_view name = names[static_cast<int>(l)];
        if (file_ >= 0)
            append(file_, fmt::format("{:%Y-%m-%dT%H:%M:%S}Z {} kgpu-container-runtime[{}] {}: {}\n", now, name, ::getpid(),
                                      args_.command.empty() ? "-" : args_.command, msg));
        if (!args_.log_file.empty()) {
            const std::string ts = fmt::format("{:%Y-%m-%dT%H:%M:%S}Z", now);
            const auto quoted = nlohmann::json(std::string(msg)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
            const std::string line = args_.log_format == "text"
                                         ? fmt::format("time=\"{}\" level={} msg={}\n", ts, name, quoted)
                                         : fmt::format("{{\"level\":\"{}\",\"msg\":{},\"time\":\"{}\"}}\n", name, quoted, ts);
            int fd = ::open(args_.log_file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
            if (fd >= 0) {
                append(fd, line);
                ::close(fd);
            }
        }
        if (l == log::Level::error) append(STDERR_FILENO, fmt::format("kgpu-container-runtime: {}\n", msg));
    }

private:
    static void append(int fd, std::string_view s) {
        while (!s.empty()) {
            ssize_t n = ::write(fd, s.data(), s.size());
            if (n <= 0) return;
            s.remove_prefix(static_cast<size_t>(n));
        }
    }
    const RuncArgs& args_;
    int file_ = -1;
    log::Level level_ = log::Level::info;
};

// While alive, fd 2 (where kgpu::log writes) goes to `fd` (or /dev/null): during `create` the
// runtime's stderr is the container's, and the edit's warnings belong in the runtime's log.
class StderrTo {
public:
    explicit StderrTo(int fd) {
        saved_ = ::dup(STDERR_FILENO);
        int target = fd >= 0 ? fd : ::open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (target >= 0) ::dup2(target, STDERR_FILENO);
        if (fd < 0 && target >= 0) ::close(target);
    }
    ~StderrTo() {
        if (saved_ >= 0) {
            ::dup2(saved_, STDERR_FILENO);
            ::close(saved_);
        }
    }
    StderrTo(const StderrTo&) = delete;
    StderrTo& operator=(const StderrTo&) = delete;

private:
    int saved_ = -1;
};

std::string self_exe() {
    std::error_code ec;
    auto p = fs::read_symlink("/proc/self/exe", ec);
    return ec ? std::string() : p.string();
}

int edit_bundle(const RuncArgs& a, const RuntimeConfig& config, const std::string& self, const std::string& refuse_gpus,
                Logger& log) {
    std::error_code cwd_error;
    const fs::path bundle = a.bundle.empty() ? fs::current_path(cwd_error) : fs::path(a.bundle);
    if (cwd_error) {
        log.write(log::Level::error, fmt::format("no --bundle, and the working directory cannot be read: {}", cwd_error.message()));
        return 1;
    }
    const fs::path path = bundle / "config.json";
    auto text = files::read(path);
    if (!text) {
        log.write(log::Level::error, text.error().message);
        return 1;
    }
    ModifyOptions mo;
    mo.hook_path = resolve_hook_path(config, self);
    mo.chain_hooks = !self.empty() && same_file(mo.hook_path, self);
    mo.refuse_gpus = refuse_gpus;
    std::vector<std::string> notes;
    Result<std::optional<Modified>> modified = fail(Code::internal, "not run");
    std::string inventory_from;
    {
        StderrTo redirect(log.file_fd());
        auto nodes = cached_node_source(config, nvml_node_source(config));
        modified = modify_spec(*text, config, mo, *nodes, notes);
        inventory_from = nodes->how();
    }  // NVML shut down before the exec
    for (const auto& n : notes) log.write(log::Level::warn, n);
    if (!modified) {
        log.write(log::Level::error, fmt::format("kgpu: {}", modified.error().message));
        return 1;
    }
    if (!*modified) {
        log.write(log::Level::debug, fmt::format("{}: no GPU requested; the spec is left untouched", path.string()));
        return 0;
    }
    struct stat st {};
    unsigned mode = ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0644;
    if (auto w = files::write_atomic(path, (*modified)->text, mode); !w) {
        log.write(log::Level::error, fmt::format("kgpu: {}", w.error().message));
        return 1;
    }
    log.write(log::Level::info, fmt::format("{}: {} (inventory {:.1f} ms from {}, edit {:.1f} ms)", path.string(),
                                            (*modified)->summary, (*modified)->nvml_ms, inventory_from, (*modified)->edit_ms));
    return 0;
}

}  // namespace

int container_runtime_main(const std::vector<std::string>& args, std::string_view version) {
    const RuncArgs a = parse_runc_args(args);
    const std::string self = self_exe();
    const char* env_config = std::getenv(std::string(kConfigEnv).c_str());
    // The install's record lies next to the binary it installed (/proc/self/exe has the links
    // kgpu-container-runtime -> kgpu resolved).
    auto source = config_source(env_config ? env_config : "", self.empty() ? std::string() : fs::path(self).parent_path().string());
    Result<RuntimeConfig> loaded = source ? load_config(*source) : Result<RuntimeConfig>(std::unexpected(source.error()));
    RuntimeConfig config = loaded ? *loaded : RuntimeConfig{};
    Logger log(config, a);
    // Which file decides, first: a create is only as safe as the settings it was read with.
    const log::Level about = a.modifies ? log::Level::info : log::Level::debug;
    std::string refuse_gpus;
    if (loaded && !config.source.empty()) {
        log.write(about, fmt::format("config {} (chosen by {})", config.source, source->chosen_by));
    } else if (loaded) {
        log.write(about, fmt::format("config: no file at {} ({}): NVIDIA's defaults apply (any unprivileged container may "
                                     "select GPUs with NVIDIA_VISIBLE_DEVICES)",
                                     source->path, source->chosen_by));
    } else if (source && !source->record.empty() && loaded.error().code == Code::not_found) {
        // The config install wrote is gone: NVIDIA's permissive defaults must not silently take
        // its place. Containers that ask for GPUs are refused (read with the widest settings, so
        // none slips through); the others, and every other command, run.
        refuse_gpus = fmt::format("{}: a container that asks for GPUs is not started without the security settings "
                                  "that file holds; restore it or run `kgpu runtime install` again",
                                  loaded.error().message);
        log.write(a.modifies ? log::Level::warn : log::Level::debug, fmt::format("kgpu: {}", refuse_gpus));
        config.accept_envvar_when_unprivileged = true;
        config.accept_volume_mounts = true;
    } else {
        // A broken config must not stop `delete` or `kill` of containers that already run.
        log.write(a.modifies ? log::Level::error : log::Level::warn, fmt::format("kgpu: {}", loaded.error().message));
        if (a.modifies) return 1;
    }
    const char* path_env = std::getenv("PATH");
    auto runtime = find_low_level_runtime(config, path_env ? path_env : "", self);
    if (!runtime) {
        log.write(log::Level::error, fmt::format("kgpu: {}", runtime.error().message));
        return 1;
    }
    if (a.modifies) {
        if (int rc = edit_bundle(a, config, self, refuse_gpus, log); rc != 0) return rc;
    }
    if (a.version) {
        std::string line = fmt::format("kgpu container runtime {}\n", version);
        (void)!::write(STDOUT_FILENO, line.data(), line.size());
    }
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(runtime->c_str()));
    for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    ::execv(runtime->c_str(), argv.data());
    log.write(log::Level::error, fmt::format("kgpu: cannot exec {}: {}", *runtime, std::strerror(errno)));
    return 127;
}

}  // namespace kgpu::toolkit
