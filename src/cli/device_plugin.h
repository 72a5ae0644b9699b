// `kgpu device-plugin`: NVIDIA's flags, env vars and config file (precedence flag > env > file),
// the settings table's (deviceplugin/options.h) and the process's own (health recovery period,
// IMEX, GPU health on the Node, per-node configs by label).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "deviceplugin/config.h"
#include "deviceplugin/paused.h"

namespace kgpu::cli {

// Raw flag text; validated and converted in run_device_plugin so every error names its flag.
struct DevicePluginFlags {
    deviceplugin::OptionText options;  // the settings table's flags (deviceplugin/options.h)
    std::optional<std::string> config_file, health_recovery_period, imex_channel_ids, imex_required, kubeconfig,
        node_name, node_health_events, node_health_annotation, config_file_srcdir, default_config, node_label,
        fallback_strategies, kube_api_status_file;
    std::string mps_control_binary;  // --mps-control-binary, KGPU_MPS_CONTROL
    std::string mig_paused_gpus_file = deviceplugin::kDefaultPausedGpusFile;  // --mig-paused-gpus-file, KGPU_MIG_PAUSED_GPUS_FILE
    bool check_config = false;  // print the effective config and exit
};

CLI::App* add_device_plugin_command(CLI::App& app, DevicePluginFlags& flags);

// Registers the settings table's flags (deviceplugin/options.h) that `taker` takes on `cmd`:
// plugin (kgpu device-plugin), gfd (kgpu labels) or mps (kgpu mps-control-daemon).
void add_setting_flags(CLI::App& cmd, deviceplugin::OptionText& text, std::string_view taker);

// Exit code: 0 clean stop (or --check-config ok), 1 runtime failure (NVML with
// --fail-on-init-error=true), 2 bad flag, env var or config file.
int run_device_plugin(const DevicePluginFlags& flags);

}  // namespace kgpu::cli
