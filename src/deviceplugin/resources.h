// What the plugin advertises: resources (one gRPC server and socket each) and their devices,
// built from the inventory model only.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "deviceplugin/config.h"
#include "inventory/node.h"

namespace kgpu::deviceplugin {

// One advertised device (a whole GPU in this issue).
struct Device {
    std::string id;          // the device plugin ID: the GPU UUID, or its index with deviceIDStrategy index
    unsigned gpu_index = 0;  // NVML index; also the row/column in inventory::Topology
    std::string uuid;        // "GPU-..."
    unsigned minor = 0;      // N of /dev/nvidiaN
    std::optional<int> numa; // NUMA node for ListAndWatch's TopologyInfo; absent when unknown
    bool lost = false;       // discovery found the GPU lost: advertised, health reports it Unhealthy
};

struct Resource {
    std::string name;             // "nvidia.com/gpu"
    std::vector<Device> devices;  // ascending gpu_index

    // The device with this ID, or nullptr.
    const Device* find(std::string_view id) const;
};

inline constexpr std::string_view kGpuResourceName = "nvidia.com/gpu";

// The resources for `node` under `config`, each with at least one device (a resource without
// devices is not served, as NVIDIA's plugin does); an empty vector on a node without GPUs.
// Whole GPUs only (this issue): with migStrategy none every GPU is advertised as nvidia.com/gpu,
// MIG mode or not, lost or not. With single or mixed, GPUs with MIG enabled are left out (their
// MIG devices come with the MIG issue) and a sentence is added to *warnings when given; GPUs
// without MIG are advertised as nvidia.com/gpu.
std::vector<Resource> build_resources(const inventory::Node& node, const Config& config,
                                      std::vector<std::string>* warnings = nullptr);

// The socket file name for a resource: "kgpu-" + name with '/' and '.' replaced by '-' + ".sock"
// ("nvidia.com/gpu" -> "kgpu-nvidia-com-gpu.sock").
std::string socket_name(std::string_view resource_name);

}  // namespace kgpu::deviceplugin
