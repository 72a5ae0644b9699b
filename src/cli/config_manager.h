// `kgpu config-manager`: NVIDIA's config-manager sidecar (cmd/config-manager), with its flags and
// environment variables, for DaemonSets shaped like NVIDIA's chart (an init container with
// --oneshot, a sidecar that links the chosen config and sends the plugin SIGHUP). kgpu's own
// device plugin and labels need no sidecar (CONFIG_FILE_SRCDIR); this is for the NVIDIA shape.
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace kgpu::cli {

struct ConfigManagerFlags {
    std::optional<std::string> oneshot, kubeconfig, node_name, node_label, config_file_srcdir, config_file_dst, kube_api_status_file,
        default_config, fallback_strategies, send_signal, signal, process_to_signal;
    std::string proc_root = "/proc";
};

void add_config_manager_command(CLI::App& app, ConfigManagerFlags& flags);

// Exit code: 0 after --oneshot or SIGTERM/SIGINT, 1 when the API server cannot be used or (with
// --oneshot) nothing could be applied, 2 for a bad flag or variable.
int run_config_manager(const ConfigManagerFlags& flags);

}  // namespace kgpu::cli
