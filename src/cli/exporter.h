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

// dcgm-exporter's flags for DCGM itself or for what kgpu does not serve (pkg/cmd/app.go of
// 4.5.3-4.8.2), each declared once: ExporterFlags' member and dcgm-exporter's default, its flag
// spellings and variable, the help, and the warning logged when it is not at that default.
//   X(member, type, default, flags, env, help, warning, shows, why)
//   help     the flag's help after "dcgm-exporter's; ignored with a warning: "
//   warning  the flag the warning names; consecutive rows naming the same one warn once, together
//   shows    whether the warning names this row's value after the flag
//   why      the reason the warning gives (a group's first row's)
// run_exporter checks the values dcgm-exporter checks (device lists, whole numbers, DCGM's log
// levels) before it warns.
#define KGPU_EXPORTER_IGNORED_FLAGS(X)                                                                                 \
    X(cpu_devices, std::string, "f", "-p,--cpu-devices", "DCGM_EXPORTER_CPU_DEVICES_STR",                              \
      "kgpu serves no CPU metrics", "--cpu-devices", true, "kgpu serves no CPU metrics")                               \
    X(switch_devices, std::string, "f", "-s,--switch-devices", "DCGM_EXPORTER_OTHER_DEVICES_STR",                      \
      "kgpu serves no NVSwitch metrics", "--switch-devices", true, "kgpu serves no NVSwitch metrics")                  \
    X(remote_hostengine_info, std::string, "localhost:5555", "-r,--remote-hostengine-info",                            \
      "DCGM_REMOTE_HOSTENGINE_INFO", "kgpu reads NVML itself, with no DCGM host engine", "--remote-hostengine-info",   \
      true, "kgpu reads NVML itself and has no DCGM host engine")                                                      \
    X(fake_gpus, bool, false, "--fake-gpus", "DCGM_EXPORTER_USE_FAKE_GPUS",                                            \
      "use the simulator (--nvml-library) instead", "--fake-gpus", false,                                              \
      "kgpu has no fake GPUs; point --nvml-library at its simulator instead")                                          \
    X(web_systemd_socket, bool, false, "--web-systemd-socket", "DCGM_EXPORTER_SYSTEMD_SOCKET",                         \
      "no systemd socket activation; kgpu listens on --address", "--web-systemd-socket", false,                        \
      "kgpu has no systemd socket activation; it binds --address itself")                                              \
    X(xid_count_window_size, std::string, "300000", "-x,--xid-count-window-size",                                      \
      "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE", "milliseconds of DCGM_EXP_XID_ERRORS_COUNT, which kgpu does not serve",   \
      "--xid-count-window-size", true,                                                                                 \
      "kgpu does not serve DCGM_EXP_XID_ERRORS_COUNT (kgpu_gpu_xid_events_total counts XIDs)")                         \
    X(clock_events_count_window_size, std::string, "300000", "--clock-events-count-window-size",                       \
      "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE",                                                                  \
      "milliseconds of DCGM_EXP_CLOCK_EVENTS_COUNT, which kgpu does not serve", "--clock-events-count-window-size",    \
      true, "kgpu does not serve DCGM_EXP_CLOCK_EVENTS_COUNT")                                                         \
    X(enable_dcgm_log, bool, false, "--enable-dcgm-log", "DCGM_EXPORTER_ENABLE_DCGM_LOG", "no DCGM library to log",    \
      "--enable-dcgm-log", false, "kgpu reads NVML itself and has no DCGM host engine")                                \
    X(dcgm_log_level, std::string, "NONE", "--dcgm-log-level", "DCGM_EXPORTER_DCGM_LOG_LEVEL",                         \
      "NONE, FATAL, ERROR, WARN, INFO, DEBUG or VERB (no DCGM library to log)", "--dcgm-log-level", true,              \
      "kgpu reads NVML itself and has no DCGM host engine")                                                            \
    X(hpc_job_mapping_dir, std::string, "", "--hpc-job-mapping-dir", "DCGM_HPC_JOB_MAPPING_DIR", "no HPC job labels",  \
      "--hpc-job-mapping-dir", true, "kgpu adds no HPC job labels")                                                    \
    X(dump_enabled, bool, false, "--dump-enabled", "DCGM_EXPORTER_DUMP_ENABLED", "no debug dumps", "--dump-*", false,  \
      "kgpu writes no debug dumps (--log-level debug logs more)")                                                      \
    X(dump_directory, std::string, "/tmp/dcgm-exporter-debug", "--dump-directory", "DCGM_EXPORTER_DUMP_DIRECTORY",     \
      "no debug dumps", "--dump-*", false, "")                                                                         \
    X(dump_retention, std::string, "24", "--dump-retention", "DCGM_EXPORTER_DUMP_RETENTION", "hours; no debug dumps",  \
      "--dump-*", false, "")                                                                                           \
    X(dump_compression, bool, true, "--dump-compression", "DCGM_EXPORTER_DUMP_COMPRESSION", "no debug dumps",          \
      "--dump-*", false, "")                                                                                           \
    X(kubernetes_enable_dra, bool, false, "--kubernetes-enable-dra", "KUBERNETES_ENABLE_DRA",                          \
      "kgpu attributes GPUs to pods through the device plugin's PodResources only", "--kubernetes-enable-dra", false,  \
      "kgpu attributes GPUs to pods through PodResources' device plugin devices")                                      \
    X(disable_startup_validate, bool, false, "--disable-startup-validate", "DISABLE_STARTUP_VALIDATE",                 \
      "kgpu has no DCGM prerequisites to check", "--disable-startup-validate", false,                                  \
      "kgpu has no DCGM prerequisites to check")                                                                       \
    X(enable_gpu_bind_unbind_watch, bool, false, "--enable-gpu-bind-unbind-watch",                                     \
      "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH",                                                                    \
      "DCGM's bind/unbind events (kgpu re-reads the node when a GPU is lost or answers again)",                        \
      "--enable-gpu-bind-unbind-watch", false,                                                                         \
      "DCGM's bind/unbind events; kgpu re-reads the node when a GPU is lost or answers again")                         \
    X(gpu_bind_unbind_poll_interval, std::string, "1s", "--gpu-bind-unbind-poll-interval",                             \
      "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL", "DCGM's bind/unbind events", "--enable-gpu-bind-unbind-watch",    \
      true, "")                                                                                                        \
    X(enable_pprof, bool, false, "--enable-pprof", "DCGM_EXPORTER_ENABLE_PPROF",                                       \
      "Go's profiler; kgpu is not a Go program", "--enable-pprof", false, "Go's profiler; kgpu is not a Go program")

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
#define KGPU_EXPORTER_FIELD(member, type, default_value, ...) type member = default_value;
    KGPU_EXPORTER_IGNORED_FLAGS(KGPU_EXPORTER_FIELD)
#undef KGPU_EXPORTER_FIELD
    bool print_metrics_markdown = false;  // hidden: docs/metrics.md
    bool print_default_counters = false;  // dcgm-exporter's default counters as a counters CSV
    NvmlOptions nvml;
};

CLI::App* add_exporter_command(CLI::App& app, ExporterFlags& flags);

// Exit code: 0 clean stop after SIGTERM/SIGINT, 1 NVML or the address failed, 2 bad flag.
int run_exporter(const ExporterFlags& flags);

}  // namespace kgpu::cli
