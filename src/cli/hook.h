// `kgpu hook <name>`: the createContainer hooks of CDI specs (src/toolkit/hooks.h). Also run when
// the binary is invoked as `nvidia-cdi-hook` (the spelling NVIDIA's specs use), so a spec written
// for NVIDIA's hook works with kgpu's and the other way round.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace kgpu::cli {

struct HookOptions {
    std::string container_spec;            // --container-spec: the OCI state file; "" = stdin
    std::vector<std::string> folders;      // update-ldcache --folder
    std::string ldconfig_path = "/sbin/ldconfig";
    std::vector<std::string> links;        // create-symlinks --link
    std::string host_driver_version;       // enable-cuda-compat
    std::string host_cuda_version;
    std::string compat_dir = "/usr/local/cuda/compat";
    std::string params_path = "/proc/driver/nvidia/params";  // disable-device-node-modification (hidden)
    std::vector<std::string> paths;        // chmod --path
    std::string mode;                      // chmod --mode (octal)
    bool debug = false, quiet = false;     // nvidia-cdi-hook's global flags
};

// Adds `hook` and its subcommands to `app` (for --help and dispatch); returns the `hook` command.
CLI::App* add_hook_command(CLI::App& app, HookOptions& opts);

// Runs the chosen hook. Exit code 0 ok, 1 the hook failed (the message names the hook).
int run_hook(CLI::App& hook_cmd, const HookOptions& opts);

// The fast path for a container start: parses and runs `kgpu hook ...` (args after "hook") or
// `nvidia-cdi-hook ...` without building the other subcommands.
int run_hook_argv(const std::string& program, const std::vector<std::string>& args);

}  // namespace kgpu::cli
