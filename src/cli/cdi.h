// `kgpu cdi generate`: writes a CDI spec for the node's GPUs with nvidia-ctk v1.20's flags and
// content (docs/cdi-generate.md).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/nvml_options.h"

namespace kgpu::cli {

struct CdiOptions {
    NvmlOptions nvml;
    std::string format;                                 // yaml | json; empty: from --output's extension, else yaml
    std::string output;                                 // empty: stdout
    std::string vendor = "nvidia.com";
    std::string device_class;                           // empty: gpu (imex-channel in imex mode)
    std::vector<std::string> name_strategies = {"index", "uuid"};
    std::string dev_root;                               // empty: the driver root
    std::string proc_root = "/proc";
    std::string sysfs_root = "/sys";
    std::string hook_path;                              // empty: nvidia-cdi-hook in PATH, else /usr/bin/nvidia-cdi-hook
    std::vector<std::string> disabled_hooks;
    std::vector<std::string> enabled_hooks;
    std::string ldconfig_path;
    bool no_hooks = false;                              // = --disable-hook all
    bool no_all_device = false;
    std::string mode = "auto";                          // auto | nvml | imex
    std::vector<std::string> device_ids = {"all"};
    std::vector<std::string> library_search_paths;
    bool allow_missing_libraries = false;
    std::vector<std::string> config_search_paths;       // graphics configs; empty: /etc, XDG_DATA_DIRS
    std::vector<std::string> feature_flags;             // nvidia-ctk's; ignored with a warning
};

// Adds `cdi` with its `generate` subcommand; returns the `cdi` command (dispatch checks
// `generate` on it).
CLI::App* add_cdi_command(CLI::App& app, CdiOptions& opts);

// Exit code: 0 ok, 1 NVML/discovery/driver files/file failure, 2 bad option values.
int run_cdi_generate(const CdiOptions& opts);

}  // namespace kgpu::cli
