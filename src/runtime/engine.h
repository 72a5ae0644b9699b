// What the container engines (containerd, CRI-O, Docker) share in `kgpu runtime configure`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kgpu::runtime {

// The runtimes whose settings the NVIDIA runtime copies, in order (nvidia-ctk's
// GetLowLevelRuntimes): the engine's default runtime unless it is empty or an nvidia* runtime
// (copying the NVIDIA runtime onto itself would lose the low-level runtime), then runc, crun.
inline std::vector<std::string> low_level_runtimes(std::string_view default_runtime) {
    std::vector<std::string> out;
    if (!default_runtime.empty() && !default_runtime.starts_with("nvidia")) out.emplace_back(default_runtime);
    out.emplace_back("runc");
    out.emplace_back("crun");
    return out;
}

}  // namespace kgpu::runtime
