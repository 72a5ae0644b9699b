// `kgpu mig apply | assert | export`: MIG layouts as declarative config, in mig-parted's file
// format and with its flags (`nvidia-mig-parted apply -f config.yaml -c all-1g.10gb`).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "cli/nvml_options.h"

namespace kgpu::cli {

struct MigOptions {
    NvmlOptions nvml;
    std::string config_file;      // -f / MIG_PARTED_CONFIG_FILE
    std::string selected_config;  // -c / MIG_PARTED_SELECTED_CONFIG
    bool mode_only = false;       // -m / MIG_PARTED_MODE_CHANGE_ONLY
    bool skip_reset = false;      // -s / MIG_PARTED_SKIP_RESET (kgpu never resets a GPU itself)
    bool force = false;           // --force: also GPUs with processes on them
    std::string output_format = "yaml";  // export -o
    std::string config_label = "current"; // export -l
};

// Exit codes of `kgpu mig apply` and `assert`.
inline constexpr int kMigOk = 0;
inline constexpr int kMigFailed = 1;       // bad config, does not fit, busy GPU, NVML error, assert mismatch
inline constexpr int kMigNeedsReset = 3;   // a mode change is pending until the GPU is reset
inline constexpr int kMigNeedsReboot = 4;  // ... and this host cannot reset it (a passed-through GPU)

void add_mig_command(CLI::App& app, MigOptions& opts);
int run_mig(const CLI::App& mig_cmd, const MigOptions& opts);

}  // namespace kgpu::cli
