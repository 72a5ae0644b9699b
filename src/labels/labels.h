// `kgpu labels`: the node labels gpu-feature-discovery (GFD, NVIDIA/k8s-device-plugin v0.20)
// publishes, computed from the inventory as GFD computes them (internal/lm of that repository),
// written as an NFD feature file ("key=value" lines). docs/labels.md lists every label.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "inventory/mig_strategy.h"
#include "inventory/node.h"
#include "inventory/vgpu.h"

namespace kgpu::labels {

// flags.migStrategy: one enum with the device plugin's (inventory/mig_strategy.h).
using inventory::MigStrategy;
using inventory::to_string;

// How the device plugin shares one resource (its config's sharing.timeSlicing / sharing.mps).
struct SharedResource {
    unsigned replicas = 1;
    bool renamed = false;  // served under another name (rename / renameByDefault): no "-SHARED"
};

// What the device plugin's config says about sharing (same file, same meaning).
struct Sharing {
    // Node-wide, as GFD's SharingStrategy(): "mps" or "time-slicing" when that section has a
    // resource with more than one replica, else "none".
    std::string strategy = "none";
    std::map<std::string, SharedResource> resources;  // by qualified name ("nvidia.com/gpu")
};

struct Options {
    MigStrategy mig_strategy = MigStrategy::none;
    Sharing sharing;
    // The machine-type file's content (DMI product name), or "unknown" when it cannot be read.
    std::string machine = "unknown";
    // nvidia.com/gfd.timestamp (Unix seconds); nullopt with --no-timestamp.
    std::optional<std::int64_t> timestamp;
    // What the vGPU scan found (inventory::find_vgpu_devices); nullopt when the scan failed, and
    // then no nvidia.com/vgpu.* label is written, as GFD's vGPU labeler does.
    std::optional<std::vector<inventory::VgpuDevice>> vgpu;
    // The NVIDIA GPUs on the PCI bus (sysfs addresses of the functions inventory::is_gpu_class
    // accepts), whatever NVML says; nullopt when the scan failed. nvidia.com/gpu.present follows
    // them as the GPU Operator's label does.
    std::optional<std::vector<std::string>> pci_gpus;
};

using Labels = std::map<std::string, std::string>;

struct Generated {
    Labels labels;
    std::vector<std::string> warnings;  // what GFD would warn about (one sentence each)
};

// The labels GFD writes for `node`, plus kgpu's one addition, nvidia.com/gpu.present. Lost GPUs
// are left out. A node without GPUs gets only gfd.timestamp, gpu.present and the vGPU labels.
//
// nvidia.com/gpu.present is the GPU Operator's label: "true" when the PCI bus has an NVIDIA GPU
// (options.pci_gpus; the Operator reads NFD's PCI labels) or NVML reports one, else "false". A
// node whose driver is broken (NVML failing, or reporting no GPU while the bus has some) keeps
// "true", so the operands selected on it stay while the driver is fixed; a warning says so.
//
// GFD's vGPU labeler, on every node: vgpu.present (true when options.vgpu lists a device) and,
// for a vGPU, vgpu.host-driver-version and vgpu.host-driver-branch (of the last one by address,
// as GFD's loop leaves them).
//
// As GFD: gpu.count counts every GPU of the model, MIG-enabled or not, under every strategy;
// MIG-enabled GPUs alone give gpu.replicas=0 (GFD labels them without sharing). `single` on a
// node that cannot serve it (MIG on some GPUs only, an enabled GPU without MIG devices, several
// profiles) gives gpu.product=<model>-MIG-INVALID with count, replicas and memory 0 and an empty
// sharing-strategy, and a warning. With several models, which model GFD's gpu.* labels describe
// follows Go map order; kgpu takes the first GPU's (a whole GPU's model over a MIG-enabled one's,
// as GFD lets whole GPUs override).
//
// Errors: a driver version that is not X.Y or X.Y.Z; MPS sharing on a node with a MIG-enabled
// GPU (GFD fails the same way: MPS cannot share MIG devices); a vGPU without a host driver record
// (GFD: "cannot find driver version record").
Result<Generated> generate(const inventory::Node& node, const Options& options);

// A label value as GFD makes it (characters other than [A-Za-z0-9-_. ] dropped, blank runs
// turned into one '-'), then cut to what Kubernetes accepts when GFD's value would be rejected:
// at most 63 characters, alphanumeric at both ends. "NVIDIA A100 (80GB)" -> "NVIDIA-A100-80GB".
std::string sanitize_value(std::string_view value);

// GFD's family name for a CUDA compute capability ("ampere" for 8.0, "ada-lovelace" for 8.9,
// "hopper" for 9.x, "undefined" for unknown majors).
std::string_view arch_family(int cc_major, int cc_minor);

// "key=value\n" lines, sorted by key.
std::string to_feature_file(const Labels& labels);

}  // namespace kgpu::labels
