// `kgpu exporter`: dcgm-exporter's flags and env vars where they overlap (--address,
// --collect-interval, --collectors, --kubernetes, --kubernetes-virtual-gpus,
// --kubernetes-enable-pod-uid, --kubernetes-enable-pod-labels, --pod-resources-kubelet-socket,
// --no-hostname, --replace-blanks-in-model-name, --nvidia-resource-names), plus --hostname-label, --proc-root, --container-runtime-endpoint,
// --http-idle-timeout, --http-request-timeout, --http-max-connections[-per-client],
// --web-config-file and --configmap-data (dcgm-exporter's; the latter only explained),
// --max-pods-per-gpu, --print-default-counters and the shared NVML options. Precedence: flag > env var > default.
// Every other flag of dcgm-exporter 4.5.3-4.8.2 (pkg/cmd/app.go) is accepted with its aliases and
// env vars (a drop-in for its DaemonSets and Helm values): --kubernetes-pod-label-allowlist-regex,
// --debug, --log-format, -d/--devices (f, g, g:<ids>, i), -o/--use-old-namespace act; the others
// concern DCGM itself or what kgpu does not serve and log one warning each when not at their
// default (docs/exporter.md "dcgm-exporter's flags" lists them).
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
    std::string kube_api_status_dir;           // --kube-api-status-dir: kgpu_kube_api_* from its status files
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
    // dcgm-exporter's, acted on.
    std::vector<std::string> pod_label_allowlist;  // RE2 patterns for pod label names
    bool debug = false;                            // log level debug
    std::string log_format = "text";               // text or json (log/slog's JSON keys)
    std::string devices = "f";                     // f, g, g:<ids>, i (i:<ids> is refused)
    bool use_old_namespace = false;                // label `uuid` instead of `UUID`
    // dcgm-exporter's, validated like it does, then ignored with a warning when not the default.
    std::string cpu_devices = "f";
    std::string switch_devices = "f";
    std::string remote_hostengine_info = "localhost:5555";
    bool fake_gpus = false;
    bool web_systemd_socket = false;
    std::string xid_count_window_size = "300000";
    std::string clock_events_count_window_size = "300000";
    bool enable_dcgm_log = false;
    std::string dcgm_log_level = "NONE";
    std::string hpc_job_mapping_dir;
    bool dump_enabled = false;
    std::string dump_directory = "/tmp/dcgm-exporter-debug";
    std::string dump_retention = "24";
    bool dump_compression = true;
    bool kubernetes_enable_dra = false;
    bool disable_startup_validate = false;
    bool enable_gpu_bind_unbind_watch = false;
    std::string gpu_bind_unbind_poll_interval = "1s";
    bool enable_pprof = false;
    bool print_metrics_markdown = false;  // hidden: docs/metrics.md
    bool print_default_counters = false;  // dcgm-exporter's default counters as a counters CSV
    NvmlOptions nvml;
};

CLI::App* add_exporter_command(CLI::App& app, ExporterFlags& flags);

// Exit code: 0 clean stop after SIGTERM/SIGINT, 1 NVML or the address failed, 2 bad flag.
int run_exporter(const ExporterFlags& flags);

}  // namespace kgpu::cli
