#pragma once

#include <filesystem>

#include "common/error.h"
#include "inventory/node.h"
#include "nvml/device.h"

namespace kgpu::inventory {

struct DiscoveryOptions {
    // Where /sys is (tests and containers that mount the host's sysfs elsewhere).
    std::filesystem::path sysfs_root = "/sys";
    // Whether to read the pairwise topology (NVLink, PCIe). Cheap, but O(n^2) calls.
    bool topology = true;
};

// One pass over NVML (plus sysfs for NUMA nodes and PCI class codes). Per-GPU failures do not
// fail discovery: the GPU is listed with lost/error set and a warning is added. Errors: only when
// the node-wide calls fail (driver version, device count).
Result<Node> discover(const nvml::Session& session, const DiscoveryOptions& options = {});

}  // namespace kgpu::inventory
