// `kgpu runtime configure`: adds the NVIDIA runtime (and optionally CDI) to containerd's config
// (docs/runtime-configure.md).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace kgpu::cli {

struct RuntimeOptions {
    std::string runtime = "containerd";
    std::string config = "/etc/containerd/config.toml";
    std::string runtime_name = "nvidia";
    std::string runtime_path = "/usr/bin/nvidia-container-runtime";
    bool set_as_default = false;
    bool enable_cdi = false;
    std::string drop_in;      // empty: edit --config in place
    bool dry_run = false;
};

// Adds `runtime` with its `configure` subcommand; returns the `runtime` command.
CLI::App* add_runtime_command(CLI::App& app, RuntimeOptions& opts);

// Exit code: 0 ok (also when already configured), 1 the config cannot be read, parsed, edited or
// written (it is then left untouched), 2 bad option values.
int run_runtime_configure(const RuntimeOptions& opts);

}  // namespace kgpu::cli
