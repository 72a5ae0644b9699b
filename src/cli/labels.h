// `kgpu labels`: node labels compatible with gpu-feature-discovery, written as an NFD feature
// file (docs/labels.md). GFD's flags and environment variables keep their names and meaning.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/nvml_options.h"
#include "deviceplugin/config.h"
#include "deviceplugin/config_source.h"
#include "kube/client.h"
#include "labels/labels.h"

namespace kgpu::cli {

// What the command line said; unset values come from the environment, then the config file,
// then the defaults (resolve_labels_settings). Booleans are text ("true", "false", …).
struct LabelsOptions {
    NvmlOptions nvml;
    // GFD's own settings (flags.gfd): output_file, oneshot, no_timestamp, sleep_interval,
    // machine_type_file (deviceplugin/options.h, KGPU_GFD_OPTIONS).
#define KGPU_GFD_TEXT(field, ...) std::optional<std::string> field;
    KGPU_GFD_OPTIONS(KGPU_GFD_TEXT)
#undef KGPU_GFD_TEXT
    // --mig-strategy, --fail-on-init-error, --use-node-feature-api, --device-discovery-strategy,
    // --driver-root-ctr-path: the device plugin's settings table (deviceplugin/options.h, takers gfd).
    deviceplugin::OptionText options;
    std::optional<std::string> config_file;        // GFD_CONFIG_FILE, CONFIG_FILE
    std::optional<std::string> write_node_labels;          // KGPU_WRITE_NODE_LABELS
    // Per-node configs by node label, as the device plugin's (CONFIG_FILE_SRCDIR, DEFAULT_CONFIG,
    // NODE_LABEL, FALLBACK_STRATEGIES).
    std::optional<std::string> config_file_srcdir, default_config, node_label, fallback_strategies;
    // GFD v0.17+'s Kubernetes client and node flags (for its NodeFeature objects) and
    // --driver-root-ctr-path: accepted and checked. --kubeconfig and --node-name (NODE_NAME) are
    // used with --write-node-labels; otherwise a warning says they have no effect.
    std::optional<std::string> kubeconfig, kube_api_qps, kube_api_burst, namespace_, node_name, pod_name;
    std::optional<std::string> kube_api_status_file;  // KGPU_KUBE_API_STATUS_FILE
    std::string sysfs_root = "/sys";
};

// The settings one run uses.
struct LabelsSettings {
    // KGPU_GFD_OPTIONS' settings, with their defaults.
    bool oneshot = false;
    bool no_timestamp = false;
    std::optional<std::chrono::milliseconds> sleep_interval = std::chrono::seconds(60);  // nullopt: infinite
    std::string output_file = "/etc/kubernetes/node-feature-discovery/features.d/kgpu";  // "" or "-": stdout
    std::string machine_type_file;                  // "" : unknown machine (resolving makes it the DMI file)
    bool fail_on_init_error = true;
    bool use_node_feature_api = false;
    std::optional<labels::MigStrategy> mig_strategy;  // flag or env; else the config file's
    std::string config_file;                        // "": none
    bool feature_file = true;                       // write output_file (off with write_node_labels, unless given)
    bool write_node_labels = false;                 // patch the Node's labels through the API server
    std::optional<std::string> kubeconfig;          // with write_node_labels: else KUBECONFIG, else in-cluster
    std::string node_name;                          // with write_node_labels or a config source: --node-name, NODE_NAME
    // With a source directory, each pass labels with the config the node label names
    // (deviceplugin/config_source.h), read from the API server when the node name and a
    // configuration are there; config_file is then the chosen one.
    deviceplugin::ConfigSource config_source;
    kube::RateLimit kube_limit;                     // --kube-api-qps, --kube-api-burst (GFD's defaults 5, 10)
    std::vector<std::string> warnings;              // accepted settings kgpu does not use, and why
    // The settings a flag or variable gave ("oneshot", "sleep_interval", ...): the config file's
    // flags (flags.failOnInitError, flags.useNodeFeatureAPI, flags.gfd.*) apply to the others,
    // as GFD's NewConfig has a set flag win over the file.
    std::set<std::string> given;
    // These settings before any config file's (resolve_labels_settings sets it).
    std::shared_ptr<const LabelsSettings> without_file;
};

void add_labels_command(CLI::App& app, LabelsOptions& opts);

// Flags over environment over defaults. `getenv` is std::getenv in production; unset or empty
// variables are not set. Errors: invalid_argument naming the flag or variable and the value.
Result<LabelsSettings> resolve_labels_settings(const LabelsOptions& opts,
                                               const std::function<const char*(const char*)>& getenv);

// The label options `s.config_file` gives (MIG strategy, sharing), the flag's or variable's MIG
// strategy over the file's; the file's GFD flags go into `s` where no flag or variable set them.
// Read at start and at each reload (SIGHUP, a config label that names another file).
Result<labels::Options> load_label_options(LabelsSettings& s);

// Exit code: 0 ok (or stopped by SIGTERM/SIGINT/SIGQUIT), 1 a failure with --oneshot, or NVML
// failing to start with --fail-on-init-error (in the loop later failures are logged and
// retried), 2 bad option or config values.
int run_labels(const LabelsOptions& opts);

// GFD's --sleep-interval: Go's duration syntax ("60s", "1m30s", "1.5h", "500ms"), a plain number
// of seconds, or "infinite" (nullopt: label once, then wait for a signal). Errors: invalid_argument
// naming the value; durations under 1ms.
Result<std::optional<std::chrono::milliseconds>> parse_interval(std::string_view text);

}  // namespace kgpu::cli
