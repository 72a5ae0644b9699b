// `kgpu mps-control-daemon`: NVIDIA's mps-control-daemon from kgpu's image. One MPS control
// daemon per resource the device plugin's config shares with MPS (sharing.mps), started with the
// limits NVIDIA's daemon sets and kept alive (src/mps/supervisor.h); `mount-shm` mounts the tmpfs
// the daemons and their clients share as /dev/shm (the DaemonSet's init container runs it).
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/nvml_options.h"
#include "deviceplugin/config.h"
#include "mps/mps.h"

namespace kgpu::cli {

struct MpsControlDaemonFlags {
    NvmlOptions nvml;
    std::optional<std::string> config_file;   // --config-file, CONFIG_FILE
    deviceplugin::OptionText options;         // --mig-strategy (the settings table's; env MIG_STRATEGY)
    std::string mps_root = std::string(mps::kDefaultRoot);  // --mps-root, MPS_ROOT
    std::string control_binary;               // --mps-control-binary, KGPU_MPS_CONTROL
    std::string meminfo = "/proc/meminfo";    // mount-shm --meminfo
};

// Adds `mps-control-daemon` and its `mount-shm` subcommand; returns mount-shm's App so the
// dispatcher can tell them apart.
CLI::App* add_mps_control_daemon_command(CLI::App& app, MpsControlDaemonFlags& flags);

// Runs until SIGTERM/SIGINT/SIGQUIT; SIGHUP re-reads the configuration and restarts the daemons.
// Exit code: 0 after a clean stop, 1 when NVML, the control binary or the MPS root is not there,
// 2 for bad flags or a configuration MPS cannot serve (MIG devices, too many replicas).
int run_mps_control_daemon(const MpsControlDaemonFlags& flags);

// Exit code: 0 mounted, 1 failed (the message says why).
int run_mps_mount_shm(const MpsControlDaemonFlags& flags);

}  // namespace kgpu::cli
