// `kgpu cdi generate`: writes a CDI spec for the node's GPUs (docs/cdi-generate.md).
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
    std::string device_class = "gpu";
    std::vector<std::string> name_strategies = {"index", "uuid"};
    std::string dev_root;                               // empty: the driver root
    std::string proc_root = "/proc";
    std::string sysfs_root = "/sys";
    std::string hook_path = "/usr/bin/nvidia-cdi-hook";
    bool no_hooks = false;
};

// Adds `cdi` with its `generate` subcommand; returns the `cdi` command (dispatch checks
// `generate` on it).
CLI::App* add_cdi_command(CLI::App& app, CdiOptions& opts);

// Exit code: 0 ok, 1 NVML/discovery/file failure, 2 bad option values.
int run_cdi_generate(const CdiOptions& opts);

}  // namespace kgpu::cli
