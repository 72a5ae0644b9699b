// `kgpu labels`: node labels compatible with gpu-feature-discovery, written as an NFD feature
// file (docs/labels.md).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "cli/nvml_options.h"

namespace kgpu::cli {

struct LabelsOptions {
    NvmlOptions nvml;
    std::string output_file = "/etc/kubernetes/node-feature-discovery/features.d/kgpu";  // "-": stdout
    bool oneshot = false;
    std::string sleep_interval = "60s";
    std::string mig_strategy;      // empty: the config file's flags.migStrategy, else none
    std::string config_file;
    std::string sysfs_root = "/sys";
};

void add_labels_command(CLI::App& app, LabelsOptions& opts);

// Exit code: 0 ok, 1 a failure (with --oneshot; in the loop failures are logged and retried),
// 2 bad option or config values.
int run_labels(const LabelsOptions& opts);

// "60s", "5m", "1h", "90" (seconds) -> seconds. Errors name the value.
Result<unsigned> parse_interval(std::string_view text);

}  // namespace kgpu::cli
