// `kgpu runtime configure`: adds the NVIDIA runtime (and optionally CDI) to containerd's, CRI-O's
// or Docker's config with nvidia-ctk v1.20's flags, defaults and results
// (docs/runtime-configure.md).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace kgpu::cli {

struct RuntimeOptions {
    std::string runtime = "containerd";       // containerd | crio | docker
    std::string config;                       // empty: the runtime's default file
    std::string drop_in;                      // "" = edit --config in place (when drop_in_given)
    bool drop_in_given = false;               // unset: the runtime's default drop-in
    std::string executable_path;              // the engine's binary (config dump, --config-source command)
    std::string config_mode;                  // "", config-file, config; oci-hook / hook (deprecated)
    std::string config_source = "file";       // file | command
    std::string oci_hook_path;                // --config-mode=oci-hook: the hook file (empty: stdout)
    std::string runtime_name = "nvidia";
    std::string runtime_path = "nvidia-container-runtime";  // /usr/bin/... for containerd and CRI-O
    std::string runtime_hook_path = "/usr/bin/nvidia-container-runtime-hook";
    bool set_as_default = false;
    bool enable_cdi = false;
    bool dry_run = false;
};

// Adds `runtime` with its `configure` subcommand; returns the `runtime` command.
CLI::App* add_runtime_command(CLI::App& app, RuntimeOptions& opts);

// Exit code: 0 ok (also when already configured), 1 a config cannot be read, parsed, edited,
// checked or written (every file is then left untouched), 2 bad option values.
int run_runtime_configure(RuntimeOptions opts);

}  // namespace kgpu::cli
