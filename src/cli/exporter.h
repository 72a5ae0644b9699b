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
#include "exporter/exporter.h"

namespace kgpu::cli {

// The exporter's flags. String, boolean and list flags are read straight into `options` (what
// run_exporter hands exporter/), so their defaults are declared once, there; numeric flags are
// kept as text (checked by run_exporter, each naming its flag) with the typed option's default.
struct ExporterFlags {
    exporter::ExporterOptions options;
    // The numeric flags' text, one per row of the table in exporter.cpp (--collect-interval,
    // --http-idle-timeout, ...), set to the defaults when the command is added.
    std::vector<std::string> numbers;
    bool no_hostname = false;
    std::string kubernetes_gpu_id_type;  // accepted for dcgm-exporter compatibility
    std::string collectors;              // dcgm-exporter's counters CSV; empty: every metric
    std::string configmap_data = "none";  // dcgm-exporter's -m NAMESPACE:NAME: not read (a warning says why)
    // dcgm-exporter's, acted on.
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
