// `kgpu container-runtime` (also run as `kgpu-container-runtime`): the OCI runtime wrapper
// (src/toolkit/runtime.h, docs/container-runtime.md). It takes runc's command line, so it is
// dispatched before the flag parser; CLI11 only knows it for `--help`.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace kgpu::cli {

// Returns the command (its remaining() arguments are runc's when parsed behind a global flag).
CLI::App* add_container_runtime_command(CLI::App& app);

// `args`: runc's arguments. Execs the low-level runtime; returns only on failure.
int run_container_runtime(const std::vector<std::string>& args);

}  // namespace kgpu::cli
