// `kgpu exporter`: dcgm-exporter's flags and env vars where they overlap (--address,
// --collect-interval, --collectors, --kubernetes, --kubernetes-virtual-gpus,
// --kubernetes-enable-pod-uid, --kubernetes-enable-pod-labels, --pod-resources-kubelet-socket,
// --no-hostname, --replace-blanks-in-model-name, --nvidia-resource-names), plus --hostname-label, --proc-root, --container-runtime-endpoint,
// --http-idle-timeout, --http-request-timeout, --http-max-connections[-per-client],
// --web-config-file and --configmap-data (dcgm-exporter's; the latter only explained),
// --max-pods-per-gpu, --print-default-counters and the shared NVML options. Precedence: flag > env var > default.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/nvml_options.h"

namespace kgpu::cli {

// Raw flag text; validated in run_exporter so every error names its flag.
struct ExporterFlags {
    std::string address = ":9400";
    std::string collect_interval = "30000";
    bool kubernetes = false;
    std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
    bool no_hostname = false;
    std::string hostname_label = "Hostname";
    std::string proc_root = "/proc";
    std::string mps_root = "/run/nvidia/mps";  // --mps-root, MPS_ROOT: kgpu_mps_* from its status files
    std::string container_runtime_endpoint = "unix:///run/containerd/containerd.sock";
    std::vector<std::string> resource_names;
    std::string kubernetes_gpu_id_type;  // accepted for dcgm-exporter compatibility
    std::string collectors;              // dcgm-exporter's counters CSV; empty: every metric
    std::string configmap_data = "none";  // dcgm-exporter's -m NAMESPACE:NAME: not read (a warning says why)
    bool replace_blanks_in_model_name = false;
    bool kubernetes_virtual_gpus = false;
    bool kubernetes_enable_pod_uid = false;
    bool kubernetes_enable_pod_labels = false;
    std::string http_idle_timeout = "10";
    std::string http_request_timeout = "10";
    std::string http_max_connections = "1000";
    std::string http_max_connections_per_client = "256";
    std::string web_config_file;          // exporter-toolkit web config: TLS, basic auth
    std::string max_pods_per_gpu = "64";  // containers attributed per GPU (--kubernetes)
    bool print_metrics_markdown = false;  // hidden: docs/metrics.md
    bool print_default_counters = false;  // dcgm-exporter's default counters as a counters CSV
    NvmlOptions nvml;
};

CLI::App* add_exporter_command(CLI::App& app, ExporterFlags& flags);

// Exit code: 0 clean stop after SIGTERM/SIGINT, 1 NVML or the address failed, 2 bad flag.
int run_exporter(const ExporterFlags& flags);

}  // namespace kgpu::cli
