// `kgpu info`: inventory and topology matrix (like `nvidia-smi -L` + `nvidia-smi topo -m`).
#pragma once

#include <iosfwd>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/nvml_options.h"
#include "inventory/node.h"

namespace kgpu::cli {

struct InfoOptions {
    NvmlOptions nvml;
    bool json = false;
    std::string sysfs_root = "/sys";
};

void add_info_command(CLI::App& app, InfoOptions& opts);

// Exit code: 0 ok (also for a node with zero GPUs), 1 when NVML cannot be loaded or initialised.
int run_info(const InfoOptions& opts);

// The readable report (exposed for tests).
void print_info_text(const inventory::Node& node, std::ostream& out);

}  // namespace kgpu::cli
