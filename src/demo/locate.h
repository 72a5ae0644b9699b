// Where the demo finds what it runs: its own binary, the simulated driver library and the node
// fixtures, relative to the binary so `kgpu demo` works from any working directory.
//
//   build tree:   <dir of kgpu>/sim/libnvidia-ml.so.1      <dir of kgpu>/sim/nodes/<name>.yaml
//   install tree: <prefix>/lib/kgpu/libnvidia-ml.so.1       <prefix>/share/kgpu/nodes/<name>.yaml
//                 (the binary in <prefix>/bin)
//   last resort for fixtures: the source tree recorded at configure time, <source>/sim/nodes/.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace kgpu::demo {

// The running binary (/proc/self/exe). Errors: io when the link cannot be read.
Result<std::filesystem::path> self_exe();

struct Located {
    std::filesystem::path path;
    std::vector<std::string> tried;  // every candidate looked at, in order
};

// The simulator library: `flag` when given (must exist), else the build and install locations
// next to `exe`. Errors: not_found, the message listing every path tried.
Result<Located> find_sim_library(const std::filesystem::path& exe, const std::optional<std::string>& flag);

// The node fixture. `flag` is a path, or a fixture name ("t4x4" or "t4x4.yaml") looked up in the
// fixture directories; without it, dgx-h100.yaml. Errors: not_found listing every path tried.
Result<Located> find_node(const std::filesystem::path& exe, const std::optional<std::string>& flag);

// The fixture directories, in search order.
std::vector<std::filesystem::path> fixture_dirs(const std::filesystem::path& exe);

}  // namespace kgpu::demo
