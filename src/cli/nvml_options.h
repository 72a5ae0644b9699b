// Options every NVML-using subcommand shares, and the one way they open NVML.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "common/error.h"
#include "nvml/device.h"
#include "nvml/library.h"

namespace kgpu::cli {

struct NvmlOptions {
    std::string nvml_library;          // --nvml-library
    std::string driver_root = "/";     // --nvidia-driver-root / --driver-root / NVIDIA_DRIVER_ROOT
};

void add_nvml_options(CLI::App& app, NvmlOptions& opts);

// Loads the library and initialises NVML. Errors name the paths tried (or the init failure and
// its likely cause) and suggest `kgpu doctor`.
Result<nvml::Session> open_nvml(const NvmlOptions& opts);

}  // namespace kgpu::cli
