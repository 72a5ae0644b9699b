// What containerd will run, read from its config the way containerd reads it: the main file and
// every file its `imports` name, for `kgpu doctor` (is a GPU runtime or CDI there?). The writer,
// `kgpu runtime configure`, is containerd.h.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"

namespace kgpu::runtime {

// What containerd's config says about NVIDIA (facts/container-runtime-and-cdi.md).
struct ContainerdSettings {
    int version = 1;                     // 1 (no `version` key), 2 or 3
    std::string plugin;                  // the CRI plugin table the settings live in
    bool nvidia_runtime = false;         // a runtime named nvidia, or whose BinaryName is nvidia's
    std::string nvidia_runtime_name;     // its name
    std::string nvidia_binary;           // its options.BinaryName
    std::string default_runtime;         // default_runtime_name ("" = runc)
    bool cdi_enabled = false;
    bool cdi_explicit = false;           // enable_cdi was set (else containerd's default applies)
    std::vector<std::string> files;      // the config and every import read
};
// Parses `config` (a host path, read under `root`) and the files its `imports` name (globs with
// `*` in the last component). Errors: not_found, parse (with file:line:column).
Result<ContainerdSettings> read_containerd_settings(const std::filesystem::path& root, const std::filesystem::path& config);

}  // namespace kgpu::runtime
