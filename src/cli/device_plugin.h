// `kgpu device-plugin`: NVIDIA's flags, env vars and config file (precedence flag > env > file),
// plus --device-plugin-path, --kubelet-socket, --nvml-library, --cdi-spec-dir,
// --health-recovery-period, --proc-root, --shared-devices-allocation-policy and
// --apply-resource-naming (alias --apply-resource-patterns).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "deviceplugin/paused.h"

namespace kgpu::cli {

// Raw flag text; validated and converted in run_device_plugin so every error names its flag.
struct DevicePluginFlags {
    std::optional<std::string> mig_strategy, fail_on_init_error, nvidia_driver_root, nvidia_dev_root,
        pass_device_specs, device_id_strategy, cdi_annotation_prefix, kubelet_socket, config_file,
        device_plugin_path, nvml_library, cdi_spec_dir, health_recovery_period, proc_root,
        shared_devices_allocation_policy, mps_root, gdrcopy_enabled, gds_enabled, mofed_enabled,
        device_discovery_strategy, imex_channel_ids, imex_required, nvidia_cdi_hook_path, container_driver_root,
        apply_resource_naming, kubeconfig, node_name, node_health_events, node_health_annotation,
        config_file_srcdir, default_config, node_label, fallback_strategies, kube_api_status_file;
    std::vector<std::string> device_list_strategy;
    std::vector<std::string> cdi_feature_flags, cdi_disable_hooks;  // NVIDIA v0.20's, for the plugin's CDI spec
    std::string mps_control_binary;  // --mps-control-binary, KGPU_MPS_CONTROL
    std::string mig_paused_gpus_file = deviceplugin::kDefaultPausedGpusFile;  // --mig-paused-gpus-file, KGPU_MIG_PAUSED_GPUS_FILE
    bool check_config = false;  // print the effective config and exit
};

CLI::App* add_device_plugin_command(CLI::App& app, DevicePluginFlags& flags);

// Exit code: 0 clean stop (or --check-config ok), 1 runtime failure (NVML with
// --fail-on-init-error=true), 2 bad flag, env var or config file.
int run_device_plugin(const DevicePluginFlags& flags);

}  // namespace kgpu::cli
