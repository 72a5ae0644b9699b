// `kgpu mig-manager`: the node's MIG layout follows its nvidia.com/mig.config label (issue #28
// part 3; src/mig/manager.h), with the GPU Operator mig-manager's flags and env vars.
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/nvml_options.h"

namespace kgpu::cli {

struct MigManagerFlags {
    NvmlOptions nvml;
    std::optional<std::string> kubeconfig;
    std::string node_name;            // -n, NODE_NAME
    std::string config_file;          // -f, CONFIG_FILE (else DEFAULT_CONFIG_FILE)
    std::string host_root = "/host";  // -m, HOST_ROOT_MOUNT: where the host's / is, for the reboot
    std::string with_reboot;          // -r, WITH_REBOOT
    std::optional<std::string> paused_gpus_file;  // --paused-gpus-file, KGPU_MIG_PAUSED_GPUS_FILE ("": none)
    std::string process_timeout = "5m";  // --process-timeout, KGPU_MIG_PROCESS_TIMEOUT
    std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
    std::string reboot_command;       // --reboot-command, KGPU_MIG_REBOOT_COMMAND (default: chroot <host root> reboot)
    std::string ignored;              // NVIDIA's flags kgpu does not need
};

void add_mig_manager_command(CLI::App& app, MigManagerFlags& flags);
int run_mig_manager(const MigManagerFlags& flags);

}  // namespace kgpu::cli
