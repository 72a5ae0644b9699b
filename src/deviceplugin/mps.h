// The device plugin's side of MPS sharing (config sharing.mps; docs/device-plugin.md "MPS"):
// which control daemons a node needs. The daemons themselves are src/mps; `kgpu
// mps-control-daemon` runs them from the same configuration the plugin reads.
#pragma once

#include <vector>

#include "common/error.h"
#include "deviceplugin/resources.h"
#include "inventory/node.h"
#include "mps/mps.h"

namespace kgpu::deviceplugin {

// One control daemon per shared resource (replicas > 1) of `resources`, with each physical GPU
// once and the number of its replicas; resources that are not shared get none (as NVIDIA's
// manager skips them). GPU memory and compute capability come from `node`. MIG devices are
// marked (validate() refuses them). Specs are not validated here.
std::vector<mps::DaemonSpec> mps_daemon_specs(const std::vector<Resource>& resources, const inventory::Node& node);

// Whether `config` shares devices with MPS (a sharing.mps section with a replicated resource).
bool shares_with_mps(const Config& config);

}  // namespace kgpu::deviceplugin
