// Requested device names -> the node's GPUs and MIG devices. The spellings are those of
// NVIDIA_VISIBLE_DEVICES (facts/container-runtime-and-cdi.md) and of the CDI names `kgpu cdi
// generate` writes (src/cdi/naming.h), so whatever the device plugin hands out under any
// device-list strategy resolves here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "inventory/node.h"

namespace kgpu::toolkit {

struct Selection {
    bool all = false;                 // "all": every GPU and MIG device
    bool none = false;                // "none": the driver's files and control nodes, no GPU
    std::vector<unsigned> gpus;       // positions in Node::gpus, request order, each once
    struct Mig {
        unsigned gpu;                 // position in Node::gpus
        unsigned mig;                 // position in Gpu::mig_devices
    };
    std::vector<Mig> migs;
    std::vector<std::string> notes;   // names left to others (CDI kinds that are not ours)

    bool empty() const { return !all && !none && gpus.empty() && migs.empty(); }
};

// Resolves `names`. Accepted: "all", "none", a GPU index ("3"), a GPU UUID or a unique prefix of
// one ("GPU-…", any case), a MIG UUID ("MIG-…"), "<gpu>:<mig>", a PCI bus id ("0000:3b:00.0" or
// NVML's "00000000:3B:00.0"), and fully qualified CDI names "<kind>=<name>" where name is any of
// the above or type-index ("gpu3", "mig3:1"), of `kind` or of the device plugin's kind
// (k8s.device-plugin.nvidia.com/gpu, cdi/naming.h). Names of another CDI kind are skipped with a
// note (containerd injects those itself). Errors (not_found / invalid_argument): a name that matches
// no device, or an ambiguous UUID prefix, or a lost GPU, each naming the name and what exists.
Result<Selection> resolve_devices(const inventory::Node& node, const std::vector<std::string>& names,
                                  std::string_view kind);

}  // namespace kgpu::toolkit
