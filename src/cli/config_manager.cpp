// `kgpu config-manager` (config_manager.h).
#include "cli/config_manager.h"

#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/process.h"
#include "common/strings.h"
#include "deviceplugin/config.h"
#include "deviceplugin/config_source.h"
#include "kube/api_stats.h"
#include "kube/client.h"
#include "kube/node_watch.h"

namespace kgpu::cli {

namespace dp = kgpu::deviceplugin;

void add_config_manager_command(CLI::App& app, ConfigManagerFlags& f) {
    auto* cmd = app.add_subcommand("config-manager",
                                   "NVIDIA's config-manager sidecar: link the config the node label names and signal the "
                                   "device plugin (kgpu's own plugin needs no sidecar: CONFIG_FILE_SRCDIR)");
    cmd->add_option("--oneshot", f.oneshot, "Apply the config once and exit (default false) [env ONESHOT]")
        ->expected(0, 1)
        ->default_str("true");
    cmd->add_option("--kubeconfig", f.kubeconfig, "The kubeconfig (default: in-cluster) [env KUBECONFIG]");
    cmd->add_option("--node-name", f.node_name, "The node whose label is watched (required) [env NODE_NAME]");
    cmd->add_option("--node-label", f.node_label,
                    "The label that names the config (default nvidia.com/device-plugin.config) [env NODE_LABEL]");
    cmd->add_option("--config-file-srcdir", f.config_file_srcdir,
                    "The directory of named configs (required) [env CONFIG_FILE_SRCDIR]");
    cmd->add_option("--config-file-dst", f.config_file_dst,
                    "The config file the device plugin reads: made a link to the chosen config, or to /dev/null "
                    "for the empty one (required) [env CONFIG_FILE_DST]");
    cmd->add_option("--default-config", f.default_config, "The config when the label is absent [env DEFAULT_CONFIG]");
    cmd->add_option("--fallback-strategies", f.fallback_strategies,
                    "named, single, empty, in order, when neither applies [env FALLBACK_STRATEGIES]");
    cmd->add_option("--send-signal", f.send_signal,
                    "Signal --process-to-signal after a change (default true) [env SEND_SIGNAL]")
        ->expected(0, 1)
        ->default_str("true");
    cmd->add_option("--signal", f.signal, "The signal number (default 1, SIGHUP) [env SIGNAL]");
    cmd->add_option("--process-to-signal", f.process_to_signal,
                    "The process to signal, by its command's first word or base name, or `kgpu device-plugin` "
                    "(default nvidia-device-plugin) [env PROCESS_TO_SIGNAL]");
    cmd->add_option("--kube-api-status-file", f.kube_api_status_file, kube::kStatusFileHelp);
    cmd->add_option("--proc-root", f.proc_root, "Where the processes are listed (the pod shares its process namespace)")
        ->capture_default_str();
}

namespace {

std::optional<std::string> setting(const std::optional<std::string>& flag, const char* env) {
    if (flag) return flag;
    if (const char* v = std::getenv(env); v && *v) return std::string(v);
    return std::nullopt;
}

struct Settings {
    bool oneshot = false, send_signal = true;
    int signal = SIGHUP;
    std::string node_name, dst, process = "nvidia-device-plugin";
    std::optional<std::string> kubeconfig;
    dp::ConfigSource source;
};

Result<Settings> resolve(const ConfigManagerFlags& f) {
    Settings s;
    auto flag_bool = [&](const std::optional<std::string>& v, const char* env, const char* name, bool& out) -> Status {
        auto text = setting(v, env);
        if (!text) return {};
        auto b = dp::parse_bool(*text);
        if (!b) return fail(Code::invalid_argument, "{} / {}: {}", name, env, b.error().message);
        out = *b;
        return {};
    };
    if (auto st = flag_bool(f.oneshot, "ONESHOT", "--oneshot", s.oneshot); !st) return std::unexpected(st.error());
    if (auto st = flag_bool(f.send_signal, "SEND_SIGNAL", "--send-signal", s.send_signal); !st) return std::unexpected(st.error());
    if (auto v = setting(f.signal, "SIGNAL")) {
        char* end = nullptr;
        const long n = std::strtol(v->c_str(), &end, 10);
        if (end == v->c_str() || *end || n < 1 || n > 64)
            return fail(Code::invalid_argument, "--signal / SIGNAL '{}': expected a signal number (1 is SIGHUP)", *v);
        s.signal = static_cast<int>(n);
    }
    if (auto v = setting(f.process_to_signal, "PROCESS_TO_SIGNAL")) s.process = *v;
    s.kubeconfig = f.kubeconfig;  // KUBECONFIG is read by kube::resolve_config
    s.node_name = setting(f.node_name, "NODE_NAME").value_or("");
    if (auto v = setting(f.node_label, "NODE_LABEL")) s.source.node_label = *v;
    s.source.srcdir = setting(f.config_file_srcdir, "CONFIG_FILE_SRCDIR").value_or("");
    s.dst = setting(f.config_file_dst, "CONFIG_FILE_DST").value_or("");
    if (auto v = setting(f.default_config, "DEFAULT_CONFIG")) s.source.default_config = *v;
    // NVIDIA's config-manager has no default list: without FALLBACK_STRATEGIES none is tried.
    s.source.fallbacks.clear();
    if (auto v = setting(f.fallback_strategies, "FALLBACK_STRATEGIES"))
        for (auto part : strings::split(*v, ','))
            if (!strings::trim(part).empty()) s.source.fallbacks.emplace_back(strings::trim(part));
    // NVIDIA's checks, in its order and words.
    if (s.node_name.empty()) return fail(Code::invalid_argument, "invalid <node-name>: must not be empty string (--node-name, NODE_NAME)");
    if (s.source.node_label.empty()) return fail(Code::invalid_argument, "invalid <node-label>: must not be empty string");
    if (s.source.srcdir.empty())
        return fail(Code::invalid_argument, "invalid <config-file-srcdir>: must not be empty string (--config-file-srcdir, CONFIG_FILE_SRCDIR)");
    if (s.dst.empty())
        return fail(Code::invalid_argument, "invalid <config-file-dst>: must not be empty string (--config-file-dst, CONFIG_FILE_DST)");
    if (auto st = dp::check_fallbacks(s.source.fallbacks); !st) return std::unexpected(st.error());
    if (auto st = kube::check_node_name(s.node_name); !st) return std::unexpected(st.error());
    return s;
}

// Links the config `label` names; signals the plugin when the link changed. Errors are the ones
// NVIDIA's config-manager stops on (nothing to apply, the link cannot be made).
Status apply(const Settings& s, const std::string& label, const std::string& proc_root) {
    auto names = dp::config_names(s.source.srcdir);
    if (!names) return std::unexpected(names.error());
    auto choice = dp::choose_config(s.source, *names, label);
    if (!choice) return std::unexpected(choice.error());
    for (const auto& w : choice->warnings) log::warn("config-manager: {}", w);
    const std::string target = choice->path.empty() ? "/dev/null" : choice->path;
    auto changed = dp::point_config_link(s.dst, target);
    if (!changed) return std::unexpected(changed.error());
    if (!*changed) {
        log::info("config-manager: {} already is config '{}': nothing to do", s.dst, choice->name);
        return {};
    }
    log::info("config-manager: {} -> {} (config '{}': {})", s.dst, target, choice->name, choice->why);
    if (!s.send_signal) return {};
    const auto pids = dp::find_processes(proc_root, s.process, static_cast<int>(::getpid()));
    if (pids.empty()) {
        log::error("config-manager: no process '{}' to signal under {} (does the pod share its process namespace?)",
                   s.process, proc_root);
        return {};
    }
    for (int pid : pids) {
        if (::kill(pid, s.signal) != 0)
            log::error("config-manager: signal {} to pid {}: {}", s.signal, pid, std::strerror(errno));
        else
            log::info("config-manager: sent signal {} to '{}' (pid {})", s.signal, s.process, pid);
    }
    return {};
}

// apply(), its failure printed: the exit code of a one-off run.
int apply_once(const Settings& s, const std::string& label, const std::string& proc_root) {
    if (auto a = apply(s, label, proc_root); !a) {
        std::cerr << "kgpu config-manager: " << a.error().message << "\n";
        return 1;
    }
    return 0;
}

// The node label's latest value, as the watch of the node reports it (from its thread).
class LabelMailbox {
public:
    explicit LabelMailbox(std::string label) : label_(std::move(label)) {}

    void on_node(const nlohmann::json& node) {
        // No Node (deleted, or a wrong NODE_NAME): nothing to apply, as NVIDIA's waits.
        const auto value = kube::label_of(node, label_);
        if (!value) return;
        std::lock_guard lk(mu_);
        if (seen_ == *value) return;
        seen_ = *value;
        fresh_ = true;
        cv_.notify_all();
    }

    std::optional<std::string> latest() {
        std::lock_guard lk(mu_);
        return seen_;
    }

    // The value when it changed since the last call, waiting up to `wait` for a change.
    std::optional<std::string> next(std::chrono::milliseconds wait) {
        std::unique_lock lk(mu_);
        cv_.wait_for(lk, wait, [&] { return fresh_; });
        if (!fresh_) return std::nullopt;
        fresh_ = false;
        return seen_;
    }

private:
    const std::string label_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::optional<std::string> seen_;
    bool fresh_ = false;
};

}  // namespace

int run_config_manager(const ConfigManagerFlags& f) {
    auto settings = resolve(f);
    if (!settings) {
        std::cerr << "kgpu config-manager: " << settings.error().message << "\n";
        return 2;
    }
    const Settings& s = *settings;
    // As `labels --oneshot`: a one-off run (an init container, or `kubectl exec` beside the
    // sidecar) writes a status file only when told by the flag, not from the pod's variable,
    // where it would replace the sidecar's counts.
    if (!s.oneshot || f.kube_api_status_file) kube::publish_status_file(f.kube_api_status_file, "config-manager");
    if (s.oneshot) {
        // One config (kgpu's manifests ship config.yaml alone): no label can pick another, so the
        // init container needs no API server, as the device plugin reads no label then.
        auto names = dp::config_names(s.source.srcdir);
        if (names && names->size() < 2) {
            log::info("config-manager: {} holds {} config{}: the label cannot pick another; not asking the API server",
                      s.source.srcdir, names->size(), names->size() == 1 ? "" : "s");
            return apply_once(s, "", f.proc_root);
        }
    }
    auto config = kube::resolve_config(s.kubeconfig);
    if (!config) {
        std::cerr << "kgpu config-manager: " << config.error().message << "\n";
        return 1;
    }
    auto api = std::make_shared<kube::Client>(std::move(*config), std::chrono::seconds(10));

    const sigset_t mask = process::block_signals({SIGTERM, SIGINT});

    LabelMailbox mailbox(s.source.node_label);
    auto watch = kube::watch_node(api, s.node_name, [&](const nlohmann::json& node) { mailbox.on_node(node); });
    log::info("config-manager: watching node {}'s label {} through {}", s.node_name, s.source.node_label,
              api->config().server);
    if (s.oneshot) {
        // One list, as NVIDIA's init container: the label as it is now.
        auto st = watch->list();
        const std::optional<std::string> label = mailbox.latest();
        if (!label) {
            std::cerr << "kgpu config-manager: node " << s.node_name << ": "
                      << (st ? std::string("no such node") : st.error().message) << "\n";
            return 1;
        }
        return apply_once(s, *label, f.proc_root);
    }
    watch->start();
    for (;;) {
        if (const auto label = mailbox.next(std::chrono::milliseconds(200))) {
            log::info("config-manager: label {}={}", s.source.node_label, label->empty() ? "(absent)" : *label);
            if (auto a = apply(s, *label, f.proc_root); !a) log::error("config-manager: {}; waiting for the next change", a.error().message);
        }
        timespec zero{0, 0};
        if (const int sig = sigtimedwait(&mask, nullptr, &zero); sig > 0) {
            log::info("config-manager: {}: stopping", strsignal(sig));
            watch->stop();
            return 0;
        }
    }
}

}  // namespace kgpu::cli
