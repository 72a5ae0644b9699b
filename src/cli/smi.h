// `kgpu smi` (also run as `nvidia-smi`): nvidia-smi's default table and `-L`
// (src/toolkit/smi.h). A simulated driver root carries the kgpu binary as its nvidia-smi, so
// `kubectl exec <pod> -- nvidia-smi` shows what the pod was given.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/nvml_options.h"

namespace kgpu::cli {

struct SmiOptions {
    NvmlOptions nvml;
    bool list = false;              // -L, --list-gpus
    std::vector<std::string> ids;   // -i, --id: indices or UUIDs (comma list)
};

CLI::App* add_smi_command(CLI::App& app, SmiOptions& opts);

// What to say for an argument `kgpu smi` does not take (`--query-gpu=name`, `-q`, `topo -m`):
// the argument CLI11 rejected (`parse_error`), then the modes there are and where the rest is.
std::string smi_usage_error(std::string_view program, std::string_view parse_error);

// Exit codes as nvidia-smi's: 0 ok, 6 no GPU matches --id, 9 NVML could not be initialised, 2 usage.
int run_smi(const SmiOptions& opts);

// `nvidia-smi <args>`: parses with only this command's flags.
int run_smi_argv(const std::vector<std::string>& args);

}  // namespace kgpu::cli
