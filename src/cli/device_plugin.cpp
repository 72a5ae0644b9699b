#include "cli/device_plugin.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <type_traits>

#include <fmt/format.h>

#include "common/duration.h"
#include "common/strings.h"
#include "deviceplugin/plugin.h"
#include "kube/api_stats.h"

namespace kgpu::cli {

namespace dp = kgpu::deviceplugin;

void add_setting_flags(CLI::App& cmd, dp::OptionText& text, std::string_view taker) {
    const dp::Config defaults;
    dp::for_each_option([&](const dp::OptionNames& names, auto codec, auto field, auto, auto text_field, auto) {
        using Codec = decltype(codec);
        using Type = typename Codec::type;
        if (names.flags.empty() || !names.taken_by(taker)) return;
        constexpr bool boolean = std::is_same_v<Type, bool> || std::is_same_v<Type, std::optional<bool>>;
        std::string shown_default = dp::option::shown(defaults.*field);
        if constexpr (std::is_same_v<Type, std::optional<bool>>) shown_default = "false";
        auto* opt = cmd.add_option(std::string(names.flags), text.*text_field,
                                   dp::option_help(names, shown_default, boolean, taker));
        if constexpr (Codec::list) opt->delimiter(',');
        if constexpr (boolean) opt->expected(0, 1)->default_str("true");
    });
}

CLI::App* add_device_plugin_command(CLI::App& app, DevicePluginFlags& f) {
    auto* cmd = app.add_subcommand("device-plugin", "Serve nvidia.com/gpu to the kubelet (device plugin API v1beta1)");
    add_setting_flags(*cmd, f.options, "plugin");
    cmd->add_option("--config-file", f.config_file, "YAML config (version: v1) [env CONFIG_FILE]");
    cmd->add_option("--health-recovery-period", f.health_recovery_period,
                    "Quiet period before a device recovers from a recoverable XID: 1s, 30s, 5m (default 5m)");
    cmd->add_option("--mps-control-binary", f.mps_control_binary,
                    "The nvidia-cuda-mps-control that asks the MPS daemons whether they answer (default: searched in "
                    "usr/bin, usr/sbin, bin, sbin under the driver root)")
        ->envname("KGPU_MPS_CONTROL");
    cmd->add_option("--imex-channel-ids", f.imex_channel_ids,
                    "IMEX channels to hand every container: empty or 0 [env IMEX_CHANNEL_IDS]");
    cmd->add_option("--imex-required", f.imex_required,
                    "Fail the start when a requested IMEX channel is missing (default false; the bare flag means "
                    "true) [env IMEX_REQUIRED]")
        ->expected(0, 1)
        ->default_str("true");
    cmd->add_option("--mig-paused-gpus-file", f.mig_paused_gpus_file,
                    "GPUs paused for a MIG change: every device of a GPU whose UUID this file lists is Unhealthy "
                    "until it no longer does (written by kgpu mig-manager; \"\" to ignore it)")
        ->envname("KGPU_MIG_PAUSED_GPUS_FILE")
        ->capture_default_str();
    cmd->add_option("--node-name", f.node_name,
                    "This node's name, for GPU health on the Node (Events, annotation) [env NODE_NAME]");
    cmd->add_option("--kubeconfig", f.kubeconfig,
                    "The kubeconfig for GPU health on the Node (default $KUBECONFIG, else the pod's service account)");
    cmd->add_option("--node-health-events", f.node_health_events,
                    "Post an Event on the Node when a GPU turns Unhealthy or recovers (reason GPUUnhealthy / "
                    "GPUHealthy; needs --node-name and create/patch on events; default true) [env KGPU_NODE_HEALTH_EVENTS]")
        ->expected(0, 1)
        ->default_str("true");
    cmd->add_option("--node-health-annotation", f.node_health_annotation,
                    "Keep each GPU's health in the Node's kgpu/gpu-health annotation (JSON; needs --node-name and "
                    "patch on nodes; default false; the bare flag means true) [env KGPU_NODE_HEALTH_ANNOTATION]")
        ->expected(0, 1)
        ->default_str("true");
    cmd->add_option("--kube-api-status-file", f.kube_api_status_file, kube::kStatusFileHelp);
    cmd->add_option("--config-file-srcdir", f.config_file_srcdir,
                    "A directory of named config files (a ConfigMap mounted): the node label --node-label names the "
                    "one to use, followed live (needs --node-name; replaces --config-file) [env CONFIG_FILE_SRCDIR]");
    cmd->add_option("--default-config", f.default_config,
                    "With --config-file-srcdir: the config used when the node has no label [env DEFAULT_CONFIG]");
    cmd->add_option("--node-label", f.node_label,
                    "With --config-file-srcdir: the node label that names the config (default "
                    "nvidia.com/device-plugin.config) [env NODE_LABEL]");
    cmd->add_option("--fallback-strategies", f.fallback_strategies,
                    "With --config-file-srcdir: what applies when neither the label nor the default names a config, "
                    "in order: named (a config called default), single (the only one), empty (built-in defaults); "
                    "default named,single [env FALLBACK_STRATEGIES]");
    cmd->add_flag("--check-config", f.check_config, "Print the effective configuration and exit");
    return cmd;
}

namespace {

template <class T>
bool set_flag(std::optional<T>& out, const std::optional<std::string>& text, const char* flag,
              Result<T> (*parse)(std::string_view)) {
    if (!text) return true;
    auto v = parse(*text);
    if (!v) {
        std::cerr << "kgpu device-plugin: " << flag << ": " << v.error().message << "\n";
        return false;
    }
    out = *v;
    return true;
}

}  // namespace

namespace {

// run_device_plugin's steps after the config: each returns 0 to go on, or the exit code (its
// message already on stderr).

// GPU health on the Node: process options (a SIGHUP does not change them).
int node_reporting_options(const DevicePluginFlags& f, dp::PluginOptions& opts) {
    auto node_bool = [&](const std::optional<std::string>& flag, const char* name, const char* env, bool& out) {
        std::optional<std::string> text = flag;
        std::string where = name;
        if (!text)
            if (const char* v = std::getenv(env); v && *v) {
                text = v;
                where = fmt::format("environment variable {}", env);
            }
        if (!text) return true;
        auto v = dp::parse_bool(*text);
        if (!v) {
            std::cerr << "kgpu device-plugin: " << where << ": " << v.error().message << "\n";
            return false;
        }
        out = *v;
        return true;
    };
    if (!node_bool(f.node_health_events, "--node-health-events", "KGPU_NODE_HEALTH_EVENTS", opts.node_events) ||
        !node_bool(f.node_health_annotation, "--node-health-annotation", "KGPU_NODE_HEALTH_ANNOTATION", opts.node_annotation))
        return 2;
    if (f.node_name) {
        opts.node_name = *f.node_name;
    } else if (const char* v = std::getenv("NODE_NAME")) {
        opts.node_name = v;
    }
    opts.kubeconfig = f.kubeconfig;
    return 0;
}

// Per-node configs (NVIDIA config-manager's variables, read by the plugin itself): with a config
// directory `srcdir`, the plugin chooses the file by the node label.
int config_source_options(const DevicePluginFlags& f, const std::optional<std::string>& srcdir,
                          const std::string& config_file, dp::PluginOptions& opts) {
    auto setting = [&](const std::optional<std::string>& flag, const char* env) -> std::optional<std::string> {
        if (flag) return flag;
        if (const char* v = std::getenv(env); v && *v) return std::string(v);
        return std::nullopt;
    };
    if (!srcdir) {
        for (const auto& [v, name] : {std::pair{&f.default_config, "--default-config"}, {&f.node_label, "--node-label"},
                                      {&f.fallback_strategies, "--fallback-strategies"}})
            if (*v) std::cerr << "kgpu device-plugin: " << name << " has no effect without --config-file-srcdir\n";
        return 0;
    }
    dp::ConfigSource& src = opts.config_source;
    src.srcdir = *srcdir;
    if (auto v = setting(f.default_config, "DEFAULT_CONFIG")) src.default_config = *v;
    if (auto v = setting(f.node_label, "NODE_LABEL")) src.node_label = *v;
    if (auto v = setting(f.fallback_strategies, "FALLBACK_STRATEGIES")) {
        src.fallbacks.clear();
        for (auto part : strings::split(*v, ','))
            if (!strings::trim(part).empty()) src.fallbacks.emplace_back(strings::trim(part));
    }
    if (src.node_label.empty()) {
        std::cerr << "kgpu device-plugin: --node-label/NODE_LABEL: expected a label key, got an empty one\n";
        return 2;
    }
    if (auto st = dp::check_fallbacks(src.fallbacks); !st) {
        std::cerr << "kgpu device-plugin: " << st.error().message << "\n";
        return 2;
    }
    // A config file inside the directory is its default (the manifests' config.yaml); another
    // one is not used.
    const auto file = std::filesystem::path(config_file).lexically_normal();
    if (!config_file.empty() && src.default_config.empty() &&
        file.parent_path() == std::filesystem::path(src.srcdir + "/").lexically_normal().parent_path()) {
        src.default_config = file.filename().string();
    } else if (!config_file.empty()) {
        std::cerr << "kgpu device-plugin: --config-file/CONFIG_FILE " << config_file
                  << " is not used: the config comes from " << src.srcdir << " by the node label " << src.node_label
                  << "\n";
    }
    return 0;
}

// Periods the tests shorten (not flags: an operator has no reason to change them), in ms.
int test_periods(dp::PluginOptions& opts) {
    for (const auto& [var, period] : {std::pair{"KGPU_INIT_RETRY_MS", &opts.init_retry},
                                      {"KGPU_PROBE_INTERVAL_MS", &opts.probe_interval},
                                      {"KGPU_SETTLE_MS", &opts.settle},
                                      {"KGPU_FOREIGN_PROBE_MS", &opts.foreign_probe},
                                      {"KGPU_FOREIGN_GRACE_MS", &opts.foreign_grace},
                                      {"KGPU_RECOVERY_PERIOD_MS", &opts.recovery_period}}) {
        const char* text = std::getenv(var);
        if (!text) continue;
        unsigned ms = 0;
        const std::string_view t(text);
        if (auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), ms); ec != std::errc() || end != t.data() + t.size() || ms == 0) {
            std::cerr << "kgpu device-plugin: " << var << "='" << t << "': expected a number of milliseconds above 0\n";
            return 2;
        }
        *period = std::chrono::milliseconds(ms);
    }
    return 0;
}

}  // namespace

int run_device_plugin(const DevicePluginFlags& f) {
    dp::Overrides flags;
    if (auto st = dp::parse_option_text(f.options, flags); !st) {
        std::cerr << "kgpu device-plugin: " << st.error().message << "\n";
        return 2;
    }
    bool ok = set_flag(flags.health_recovery_period, f.health_recovery_period, "--health-recovery-period",
                       &parse_duration) &&
              set_flag(flags.imex_channel_ids, f.imex_channel_ids, "--imex-channel-ids", &dp::parse_imex_channel_ids) &&
              set_flag(flags.imex_required, f.imex_required, "--imex-required", &dp::parse_bool);
    if (!ok) return 2;
    flags.config_file = f.config_file;

    auto env = dp::from_env([](const char* name) { return std::getenv(name); });
    if (!env) {
        std::cerr << "kgpu device-plugin: " << env.error().message << "\n";
        return 2;
    }
    const std::string config_file = flags.config_file.value_or(env->config_file.value_or(""));
    // With a config directory the plugin chooses the file itself (at start and when the label changes).
    const char* srcdir_env = std::getenv("CONFIG_FILE_SRCDIR");
    std::optional<std::string> srcdir = f.config_file_srcdir;
    if (!srcdir && srcdir_env && *srcdir_env) srcdir = srcdir_env;
    // Flags over environment: a --config-file flag outside a CONFIG_FILE_SRCDIR that only the
    // environment gives is the config (a command run by hand in the plugin's container).
    if (srcdir && !f.config_file_srcdir && flags.config_file &&
        std::filesystem::path(*flags.config_file).lexically_normal().parent_path() !=
            std::filesystem::path(*srcdir + "/").lexically_normal().parent_path()) {
        std::cerr << "kgpu device-plugin: CONFIG_FILE_SRCDIR " << *srcdir << " is not used: --config-file "
                  << *flags.config_file << " is given\n";
        srcdir.reset();
    }
    const bool by_label = srcdir.has_value();
    dp::Config base;
    if (!config_file.empty() && (!by_label || f.check_config)) {
        auto file = dp::load_config_file(config_file);
        if (!file) {
            std::cerr << "kgpu device-plugin: " << file.error().message << "\n";
            return 2;
        }
        base = std::move(*file);
    }
    auto config = dp::resolve(std::move(base), *env, flags);
    if (!config) {
        std::cerr << "kgpu device-plugin: " << config.error().message << "\n";
        return 2;
    }
    if (f.check_config) {
        // Strict where the plugin is lenient: an unknown key is most likely a misspelling whose
        // setting silently does not apply.
        if (!config->unknown_keys.empty()) {
            for (const auto& k : config->unknown_keys)
                std::cerr << "kgpu device-plugin: " << dp::unknown_key_error(k) << "\n";
            std::cerr << "kgpu device-plugin: " << config->unknown_keys.size()
                      << " unknown key(s): the plugin would ignore them (as NVIDIA's does) and serve\n";
            return 2;
        }
        std::cout << dp::describe(*config);
        for (const auto& w : config->warnings) std::cout << "warning: " << w << "\n";
        return 0;
    }
    dp::PluginOptions opts;
    opts.config = std::move(*config);
    opts.env = std::move(*env);
    opts.flags = std::move(flags);
    opts.config_file = by_label ? std::string() : config_file;
    opts.mps_control_binary = f.mps_control_binary;
    opts.paused_gpus_file = f.mig_paused_gpus_file;
    if (int code = node_reporting_options(f, opts)) return code;
    kube::publish_status_file(f.kube_api_status_file, "device-plugin");
    if (int code = config_source_options(f, srcdir, config_file, opts)) return code;
    if (int code = test_periods(opts)) return code;
    return dp::run_device_plugin(std::move(opts));
}

}  // namespace kgpu::cli
