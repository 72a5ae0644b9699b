#include "cli/mps_control_daemon.h"

#include "cli/device_plugin.h"

#include <signal.h>

#include <cstdlib>
#include <iostream>
#include <optional>

#include "common/log.h"
#include "common/process.h"
#include "deviceplugin/config.h"
#include "deviceplugin/mps.h"
#include "deviceplugin/resources.h"
#include "inventory/discovery.h"
#include "mps/shm.h"
#include "mps/supervisor.h"

namespace kgpu::cli {

namespace dp = kgpu::deviceplugin;

CLI::App* add_mps_control_daemon_command(CLI::App& app, MpsControlDaemonFlags& f) {
    auto* cmd = app.add_subcommand("mps-control-daemon",
                                   "Run one MPS control daemon per resource shared with MPS (sharing.mps), as NVIDIA's "
                                   "mps-control-daemon, restarting any that dies");
    add_nvml_options(*cmd, f.nvml);
    cmd->add_option("--config-file", f.config_file,
                    "The device plugin's YAML config (its sharing.mps section says what to share) [env CONFIG_FILE]");
    add_setting_flags(*cmd, f.options, "mps");  // --mig-strategy, as NVIDIA's daemon
    cmd->add_option("--mps-root", f.mps_root,
                    "Where the per-resource pipe and log directories, .started/.ready and shm are (the host directory, "
                    "mounted at the same path)")
        ->envname("MPS_ROOT")
        ->capture_default_str();
    cmd->add_option("--mps-control-binary", f.control_binary,
                    "The nvidia-cuda-mps-control to run (default: searched in usr/bin, usr/sbin, bin, sbin under the "
                    "driver root)")
        ->envname("KGPU_MPS_CONTROL");
    auto* shm = cmd->add_subcommand("mount-shm",
                                    "Mount the tmpfs the MPS daemons and their clients share as /dev/shm at <mps root>/shm "
                                    "(the DaemonSet's init container; needs CAP_SYS_ADMIN)");
    shm->add_option("--mps-root", f.mps_root, "The MPS root; the tmpfs goes to <mps root>/shm")
        ->envname("MPS_ROOT")
        ->capture_default_str();
    return shm;
}

namespace {

// Compute mode through NVML, by UUID (the index when the driver has no UUID lookup).
class NvmlComputeModes : public mps::ComputeModes {
public:
    explicit NvmlComputeModes(const nvml::Session& session) : session_(session) {}
    Status set(const mps::SharedGpu& gpu, nvml::ComputeMode mode) override {
        auto dev = session_.device_by_uuid(gpu.uuid);
        if (!dev) dev = session_.device_by_index(gpu.index);
        if (!dev) return std::unexpected(dev.error());
        return dev->set_compute_mode(mode);
    }

private:
    const nvml::Session& session_;
};

struct Plan {
    dp::Config config;
    std::vector<mps::DaemonSpec> specs;
};

// The configuration as the device plugin resolves it (file < env < flags) and the daemons it
// asks for on this node. Returns the exit code on failure.
std::expected<Plan, int> make_plan(const MpsControlDaemonFlags& f, const nvml::Session& session) {
    auto env = dp::from_env([](const char* name) { return std::getenv(name); });
    if (!env) {
        std::cerr << "kgpu mps-control-daemon: " << env.error().message << "\n";
        return std::unexpected(2);
    }
    dp::Overrides flags;
    if (auto st = dp::parse_option_text(f.options, flags); !st) {
        std::cerr << "kgpu mps-control-daemon: " << st.error().message << "\n";
        return std::unexpected(2);
    }
    const std::string config_file = f.config_file.value_or(env->config_file.value_or(""));
    dp::Config base;
    if (!config_file.empty()) {
        auto file = dp::load_config_file(config_file);
        if (!file) {
            std::cerr << "kgpu mps-control-daemon: " << file.error().message << "\n";
            return std::unexpected(2);
        }
        base = std::move(*file);
    }
    auto config = dp::resolve(std::move(base), *env, flags);
    if (!config) {
        std::cerr << "kgpu mps-control-daemon: " << config.error().message << "\n";
        return std::unexpected(2);
    }
    for (const auto& k : config->unknown_keys) log::warn("{}", dp::unknown_key_warning(k));
    Plan plan{std::move(*config), {}};
    if (!dp::shares_with_mps(plan.config)) {
        log::info("MPS: the configuration shares nothing with MPS{}", config_file.empty() ? " (no config file)" : "");
        return plan;
    }
    auto node = inventory::discover(session);
    if (!node) {
        std::cerr << "kgpu mps-control-daemon: " << node.error().message << "\n";
        return std::unexpected(1);
    }
    std::vector<std::string> warnings;
    auto resources = dp::build_resources(*node, plan.config, &warnings);
    if (!resources) {
        std::cerr << "kgpu mps-control-daemon: " << resources.error().message << "\n";
        return std::unexpected(2);
    }
    for (const auto& w : warnings) log::warn("MPS: {}", w);
    plan.specs = dp::mps_daemon_specs(*resources, *node);
    for (const auto& s : plan.specs) {
        if (auto st = mps::validate(s); !st) {
            std::cerr << "kgpu mps-control-daemon: invalid MPS configuration: " << st.error().message << "\n";
            return std::unexpected(2);
        }
        std::string limits;
        for (const auto& l : mps::pinned_memory_limits(s)) limits += fmt::format(" {}:{}", l.index, l.value());
        log::info("MPS {}: {} GPUs, {} replicas each, active thread percentage {}, pinned memory limits{}", s.resource,
                  s.gpus.size(), s.gpus.front().replicas, mps::active_thread_percentage(s), limits);
    }
    return plan;
}

}  // namespace

int run_mps_control_daemon(const MpsControlDaemonFlags& f) {
    if (f.mps_root.empty()) {
        std::cerr << "kgpu mps-control-daemon: --mps-root: must not be empty\n";
        return 2;
    }
    // Blocked before any thread starts (NVML's library may start its own), so every thread
    // inherits the mask and only mps::run's signalfd sees these signals.
    process::block_signals({SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGCHLD});
    auto session = open_nvml(f.nvml);
    if (!session) {
        std::cerr << "kgpu mps-control-daemon: " << session.error().message << "\n";
        return 1;
    }
    NvmlComputeModes modes(*session);
    std::optional<Plan> next;  // a reload's plan, made and checked while the old daemons ran
    for (;;) {
        auto plan = next ? std::expected<Plan, int>(std::move(*next)) : make_plan(f, *session);
        next.reset();
        if (!plan) return plan.error();
        mps::SupervisorOptions opts;
        opts.root.dir = f.mps_root;
        if (!plan->specs.empty()) {
            auto binary = mps::find_control_binary(f.control_binary, f.nvml.driver_root);
            if (!binary) {
                std::cerr << "kgpu mps-control-daemon: " << binary.error().message << "\n";
                return 1;
            }
            opts.control_binary = *binary;
            log::info("MPS: control binary {}, root {}", opts.control_binary, opts.root.dir.string());
        }
        mps::Supervisor supervisor(std::move(plan->specs), opts, modes);
        // A SIGHUP's new configuration (a config-manager relinking it, an edit) is read before
        // anything stops: one that does not load keeps the running daemons.
        auto reload = mps::run(supervisor, opts.watch_interval, [&] {
            auto p = make_plan(f, *session);
            if (!p) return false;
            next = std::move(*p);
            return true;
        });
        if (!reload) {
            std::cerr << "kgpu mps-control-daemon: " << reload.error().message << "\n";
            return 1;
        }
        if (!*reload) return 0;
        log::info("MPS: re-reading the configuration");
    }
}

int run_mps_mount_shm(const MpsControlDaemonFlags& f) {
    if (f.mps_root.empty()) {
        std::cerr << "kgpu mps-control-daemon mount-shm: --mps-root: must not be empty\n";
        return 2;
    }
    mps::Root root{f.mps_root};
    if (auto st = mps::mount_shm(root.shm_dir()); !st) {
        std::cerr << "kgpu mps-control-daemon mount-shm: " << st.error().message << "\n";
        return 1;
    }
    return 0;
}

}  // namespace kgpu::cli
