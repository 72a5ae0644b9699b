// The MIG capability device nodes a container needs to use a MIG device: besides the parent's
// /dev/nvidia<minor>, /dev/nvidia-caps/nvidia-cap<N> for the GPU instance's and the compute
// instance's `access` capability (facts/nvml.md "Host files").
//
// The minors are read, under a configurable proc root (default /proc; tests lay files out in a
// temp dir), from the per-instance access files NVIDIA's plugin reads:
//   <proc>/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>/access        "DeviceFileMinor: <N>"
//   <proc>/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>/ci<C>/access
// and, when those are absent, from the driver's table <proc>/driver/nvidia-caps/mig-minors
// ("gpu<minor>/gi<G>/access <N>" and "gpu<minor>/gi<G>/ci<C>/access <N>").
#pragma once

#include <filesystem>
#include <vector>

#include "common/error.h"
#include "deviceplugin/resources.h"

namespace kgpu::deviceplugin {

struct CapMinors {
    unsigned gi = 0;  // nvidia-cap<gi> for the GPU instance
    unsigned ci = 0;  // nvidia-cap<ci> for the compute instance
};

// The two minors of one MIG device. Errors: not_found naming every file tried; parse naming the
// file whose content is not "DeviceFileMinor: <N>".
Result<CapMinors> find_mig_caps(const std::filesystem::path& proc_root, unsigned gpu_minor, unsigned gpu_instance,
                                unsigned compute_instance);

// Fills MigInstance::{gi,ci}_cap_minor (or caps_error) of every MIG device in `resources`.
// Returns one sentence per distinct failure, for a warning at start.
std::vector<std::string> fill_mig_caps(std::vector<Resource>& resources, const std::filesystem::path& proc_root);

}  // namespace kgpu::deviceplugin
