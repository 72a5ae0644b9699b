#include "cli/app.h"

#include <algorithm>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cdi/hooks.h"
#include "cli/cdi.h"
#include "cli/container_runtime.h"
#include "cli/hook.h"
#include "cli/install.h"
#include "cli/smi.h"
#include "cli/labels.h"
#include "cli/runtime.h"
#include "cli/device_plugin.h"
#include "cli/doctor.h"
#include "cli/exporter.h"
#include "cli/demo.h"
#include "cli/info.h"
#include "cli/mps_control_daemon.h"
#include "common/log.h"

#ifndef KGPU_VERSION
#define KGPU_VERSION "0.0.0"
#endif

namespace kgpu::cli {

namespace {

std::string_view base_name(const char* argv0) {
    std::string_view s = argv0 ? argv0 : "";
    if (auto slash = s.rfind('/'); slash != std::string_view::npos) s.remove_prefix(slash + 1);
    return s;
}

// The hooks' names: no kgpu subcommand and no runc command is spelled like one of them.
bool is_hook_name(std::string_view s) {
    return s == cdi::kChmod || std::ranges::find(cdi::kDefaultHooks, s) != cdi::kDefaultHooks.end();
}

}  // namespace

int run(int argc, char** argv) {
    // Commands that take another program's command line are dispatched before the flag parser
    // (and before it is built: a container start waits for them).
    const std::string_view invoked_as = base_name(argc > 0 ? argv[0] : nullptr);
    // A hook as specs spell it for any binary not named nvidia-ctk or kgpu (nvidia-ctk's rule,
    // cdi/hooks.h): [<file name>, <hook>, ...]. It runs the hook whatever the file is called: a
    // copy named kgpu-container-runtime, which would otherwise take the hook for a runc command.
    if (argc > 1 && is_hook_name(argv[1]))
        return run_hook_argv(invoked_as == "nvidia-cdi-hook" ? "nvidia-cdi-hook" : "kgpu hook", {argv + 1, argv + argc});
    if (invoked_as == "kgpu-container-runtime") return run_container_runtime({argv + 1, argv + argc});
    if (argc > 1 && std::string_view(argv[1]) == "container-runtime" &&
        !(argc == 3 && (std::string_view(argv[2]) == "--help" || std::string_view(argv[2]) == "-h")))
        return run_container_runtime({argv + 2, argv + argc});
    if (invoked_as == "nvidia-smi") return run_smi_argv({argv + 1, argv + argc});
    if (invoked_as == "nvidia-cdi-hook") return run_hook_argv("nvidia-cdi-hook", {argv + 1, argv + argc});
    if (argc > 1 && std::string_view(argv[1]) == "hook") return run_hook_argv("kgpu hook", {argv + 2, argv + argc});

    CLI::App app{"kgpu: the node side of NVIDIA GPUs in Kubernetes"};
    app.require_subcommand(1);
    app.fallthrough();  // global options (--log-level) may also follow the subcommand
    app.set_version_flag("--version", KGPU_VERSION);
    std::string log_level = "info";
    app.add_option("--log-level", log_level, "debug, info, warn, error or off")->envname("KGPU_LOG_LEVEL");

    InfoOptions info;
    add_info_command(app, info);
    CdiOptions cdi;
    CLI::App* cdi_cmd = add_cdi_command(app, cdi);
    RuntimeOptions runtime_opts;
    CLI::App* runtime_cmd = add_runtime_command(app, runtime_opts);
    InstallCliOptions install_opts;
    add_install_command(*runtime_cmd, install_opts);
    add_kgpu_runtime_flag(*runtime_cmd, runtime_opts.runtime_path);
    LabelsOptions labels_opts;
    add_labels_command(app, labels_opts);
    DevicePluginFlags device_plugin;
    add_device_plugin_command(app, device_plugin);
    DoctorCliOptions doctor;
    add_doctor_command(app, doctor);
    ExporterFlags exporter_flags;
    add_exporter_command(app, exporter_flags);
    DemoCliOptions demo_opts;
    add_demo_command(app, demo_opts);
    MpsControlDaemonFlags mps_flags;
    CLI::App* mount_shm_cmd = add_mps_control_daemon_command(app, mps_flags);
    CLI::App* container_runtime_cmd = add_container_runtime_command(app);
    HookOptions hook_opts;  // `kgpu hook` runs before this parser (run_hook_argv); here for --help
    CLI::App* hook_cmd = add_hook_command(app, hook_opts);
    SmiOptions smi_opts;
    add_smi_command(app, smi_opts);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        int code = app.exit(e);  // prints help / version / the error
        return code == 0 ? 0 : 2;
    }
    log::Level level;
    if (!log::parse_level(log_level, level)) {
        std::cerr << "kgpu: --log-level: expected debug, info, warn, error or off, got '" << log_level << "'\n";
        return 2;
    }
    log::set_level(level);

    if (app.got_subcommand("info")) return run_info(info);
    if (app.got_subcommand("device-plugin")) return run_device_plugin(device_plugin);
    if (app.got_subcommand("doctor")) return run_doctor(doctor);
    if (app.got_subcommand("exporter")) return run_exporter(exporter_flags);
    if (app.got_subcommand("demo")) return run_demo(demo_opts);
    if (cdi_cmd->got_subcommand("generate")) return run_cdi_generate(cdi);
    if (runtime_cmd->got_subcommand("configure")) return run_runtime_configure(runtime_opts);
    if (runtime_cmd->got_subcommand("install")) return run_install(install_opts);
    if (app.got_subcommand("labels")) return run_labels(labels_opts);
    if (mount_shm_cmd->parsed()) return run_mps_mount_shm(mps_flags);
    if (app.got_subcommand("mps-control-daemon")) return run_mps_control_daemon(mps_flags);
    if (app.got_subcommand("smi")) return run_smi(smi_opts);
    // Reached only behind a global flag (`kgpu --log-level debug hook ...`): the fast paths above
    // take the plain spellings.
    if (app.got_subcommand("hook")) return run_hook(*hook_cmd, hook_opts);
    if (app.got_subcommand("container-runtime")) return run_container_runtime(container_runtime_cmd->remaining());
    return 2;
}

}  // namespace kgpu::cli
