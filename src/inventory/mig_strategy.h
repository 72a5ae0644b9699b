// How a node's MIG devices become resources and labels: NVIDIA's `flags.migStrategy` (none,
// single, mixed), which the device plugin, GFD (`kgpu labels`) and the MPS daemon read from the
// same flag, variable or config key (deviceplugin/options.h). One enum for all of them.
#pragma once

#include <string_view>

#include "common/error.h"

namespace kgpu::inventory {

enum class MigStrategy { none, single, mixed };

// "none", "single", "mixed": the flag's and the file's spelling.
std::string_view to_string(MigStrategy s);
// Errors: invalid_argument "invalid MIG strategy 'x' (expected none, single or mixed)"; callers
// add which flag, variable or key it was.
Result<MigStrategy> parse_mig_strategy(std::string_view text);

}  // namespace kgpu::inventory
