// `kgpu runtime install` (src/toolkit/install.h), and the `--kgpu-runtime` flag of
// `kgpu runtime configure`. Both hang off the `runtime` command that cli/runtime.cpp builds.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "toolkit/install.h"

namespace kgpu::cli {

struct InstallCliOptions {
    toolkit::InstallOptions install;
    std::string restart_mode = "signal";
    bool no_dev_char_links = false;
    bool no_verify = false;
    double restart_timeout_s = 60;
};

// Adds `install` under `runtime_cmd`.
void add_install_command(CLI::App& runtime_cmd, InstallCliOptions& opts);

// Adds `--kgpu-runtime` to `runtime configure`: BinaryName = the runtime `kgpu runtime install`
// puts in /usr/local/kgpu (the default stays NVIDIA's nvidia-container-runtime, for drop-in use).
void add_kgpu_runtime_flag(CLI::App& runtime_cmd, std::string& runtime_path);

// Exit code: 0 ok (also when nothing needed changing), 1 a step failed (the message names it),
// 2 bad option values.
int run_install(InstallCliOptions& opts);

}  // namespace kgpu::cli
