// Devices besides the GPUs that NVIDIA's plugin (v0.15+) hands every container: IMEX channels
// (imex.channelIDs) and the GPUDirect sets gdsEnabled / mofedEnabled / gdrcopyEnabled.
// allocate() names them; this prepares what those names refer to.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "deviceplugin/config.h"

namespace kgpu::deviceplugin {

// At start and after every reload:
//  - IMEX: each channel of imex.channelIDs should exist under the dev root as
//    /dev/nvidia-caps-imex-channels/channel<N>. A missing one is an error when imex.required
//    (as NVIDIA's plugin fails to start), else a warning (Allocate leaves it out).
//  - With a CDI device-list strategy, writes a CDI spec (JSON, NVIDIA's plugin's file name:
//    cdi_spec_file_name) into cdiSpecDir for each extra kind that is in use and present on the
//    node, so the names allocate() hands out resolve:
//      k8s.device-plugin.nvidia.com/imex-channel  device "<N>" per present channel (its node);
//      k8s.device-plugin.nvidia.com/gdrcopy       device "all": /dev/gdrdrv;
//      k8s.device-plugin.nvidia.com/gds           device "all": /dev/nvidia-fs*, plus /run/udev and
//                                                 /etc/cufile.json (under the driver root) mounted
//                                                 read-only when present;
//      k8s.device-plugin.nvidia.com/mofed         device "all": /dev/infiniband/uverbs*, rdma_cm
//    (what nvidia-container-toolkit's gated CDI modes hold). An enabled set with none of its
//    nodes present gets no spec (CDI refuses a device without edits) and a warning.
//  - A spec for a kind no longer in use is removed, but only one kgpu owns: one this process
//    wrote (recorded in `owned`), or, while a CDI strategy is in use, the file an earlier kgpu
//    wrote under its old name (legacy_cdi_spec_file_name, nvidia.com names that collide with
//    node-wide specs) when it starts with kKgpuSpecMarker. A spec under NVIDIA's name that this
//    process did not write (NVIDIA's plugin's, or an earlier run's) stays: JSON has no room for
//    a marker, and Allocate names an extra only while it is enabled. Without a CDI strategy
//    nothing in cdiSpecDir is read or removed unless this process wrote it: a node's
//    /var/run/cdi holds other tools' files, and the default envvar strategy has no business there.
// Returns one sentence per thing worth a warning. Errors: not_found for a required IMEX channel
// (naming the path); io when a spec cannot be written.
//
// The paths of the extra specs this process has written and not removed since.
using OwnedSpecs = std::set<std::string>;
// The first line of every extra spec kgpu wrote under its old file names (YAML).
inline constexpr std::string_view kKgpuSpecMarker = "# Written by kgpu device-plugin";
Result<std::vector<std::string>> prepare_container_extras(const Config& config, OwnedSpecs& owned);

}  // namespace kgpu::deviceplugin
