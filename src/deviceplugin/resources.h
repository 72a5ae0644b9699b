// What the plugin advertises: resources (one gRPC server and socket each) and their devices,
// built from the inventory model and the configuration only (no NVML, no files).
//
// MIG strategies, as NVIDIA's plugin names and behaves (facts/device-plugin-anchor.md):
//  - none:   every GPU is nvidia.com/gpu, MIG mode or not;
//  - single: every MIG device is nvidia.com/gpu. The node must be uniform: MIG on every GPU and
//            one profile everywhere, else an error (Code::not_supported). A node without any
//            MIG-enabled GPU serves its whole GPUs, as NVIDIA's plugin does;
//  - mixed:  one resource per MIG profile, nvidia.com/mig-<profile> with '+' mapped to '.'
//            (1g.10gb+me -> nvidia.com/mig-1g.10gb.me); GPUs without MIG stay nvidia.com/gpu.
// A GPU with MIG enabled but no MIG devices serves nothing under single and mixed; a warning
// says so.
//
// Naming patterns (config resources.gpus / resources.mig) apply only with
// applyResourceNaming (--apply-resource-naming; NVIDIA v0.14-v0.20 ignore them): a whole GPU
// is served under the first gpus pattern matching its product name, a MIG device under the first
// mig pattern matching its profile; devices no pattern matches keep the names above.
//
// Device IDs are UUIDs (GPU-… / MIG-…) under every deviceIDStrategy, as NVIDIA's plugin
// advertises them; the strategy changes only what Allocate hands the container.
//
// Time-slicing (config sharing.timeSlicing) or MPS (sharing.mps, the same keys; the resource is
// marked `mps`) then replaces the selected devices of a resource by
// `replicas` replicas each, with IDs "<id>::<n>", under the resource's name, its rename, or
// "<name>.shared" with renameByDefault. Unlike NVIDIA's plugin, `devices` is honoured: devices
// not selected stay whole under the original name.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "deviceplugin/config.h"
#include "inventory/node.h"

namespace kgpu::deviceplugin {

// A MIG device behind an advertised device.
struct MigInstance {
    unsigned index = 0;                // slot on the parent GPU (the j of "i:j")
    unsigned gpu_instance_id = 0;
    unsigned compute_instance_id = 0;
    std::string profile;               // "1g.10gb"
    // The minors of /dev/nvidia-caps/nvidia-cap<N> for the GI and CI access capabilities, filled
    // by find_mig_caps (plugin start); caps_error says why they are missing.
    std::optional<unsigned> gi_cap_minor, ci_cap_minor;
    std::string caps_error;
    bool operator==(const MigInstance&) const = default;
};

// One advertised device: a whole GPU, a MIG device, or a replica of either.
struct Device {
    std::string id;          // the device plugin ID: the UUID ("GPU-…", "MIG-…"), plus "::<n>" for a replica
    unsigned gpu_index = 0;  // NVML index of the (parent) GPU; also the row/column in inventory::Topology
    std::string uuid;        // "GPU-..." or "MIG-..." of the physical device
    unsigned minor = 0;      // N of /dev/nvidiaN (of the parent GPU for MIG devices)
    std::optional<int> numa; // NUMA node for ListAndWatch's TopologyInfo; absent when unknown
    bool lost = false;       // discovery found the GPU lost: advertised, health reports it Unhealthy
    std::optional<MigInstance> mig;  // set for MIG devices
    std::string physical_id;         // the ID without the replica suffix (= id when not a replica)
    std::optional<unsigned> replica; // n of "::<n>"
    bool operator==(const Device&) const = default;
};

struct Resource {
    std::string name;             // "nvidia.com/gpu"
    std::vector<Device> devices;  // ascending gpu_index, then MIG index, then replica
    unsigned replicas = 1;        // > 1: time-sliced, each physical device listed that many times
    bool fail_requests_greater_than_one = false;  // time-sliced with failRequestsGreaterThanOne
    // Shared through MPS (sharing.mps): its replicas are clients of one MPS control daemon, whose
    // pipe directory Allocate hands out, and its health follows that daemon's (deviceplugin/mps.h).
    bool mps = false;

    // The device with this ID, or nullptr. Uses the index built by reindex() when it is current.
    const Device* find(std::string_view id) const;
    // Builds the ID index (call after filling devices; build_resources does).
    void reindex();
    bool shared() const { return replicas > 1; }
    bool has_mig() const;
    bool operator==(const Resource& o) const {
        return name == o.name && devices == o.devices && replicas == o.replicas &&
               fail_requests_greater_than_one == o.fail_requests_greater_than_one && mps == o.mps;
    }

    // ID -> position, built by reindex(); find() falls back to a scan when it is stale.
    std::unordered_map<std::string, size_t> id_index;
};

inline constexpr std::string_view kGpuResourceName = "nvidia.com/gpu";

// "nvidia.com/mig-" + profile with '+' replaced by '.'.
std::string mig_resource_name(std::string_view profile);

// NVIDIA's resource pattern match: '*' matches any run of characters, everything else itself,
// and the whole text must match ("*A100*" matches "NVIDIA A100-SXM4-80GB").
bool pattern_matches(std::string_view pattern, std::string_view text);

// The resources for `node` under `config`, sorted by name, each with at least one device (a
// resource without devices is not served, as NVIDIA's plugin does); empty on a node without GPUs.
// Sentences for the operator (MIG enabled without devices, a sharing entry that matches nothing)
// are appended to *warnings when given.
// Errors:
//  - Code::not_supported: migStrategy single on a node that mixes MIG and non-MIG GPUs or MIG
//    profiles (the message lists them and suggests mixed);
//  - Code::parse, "<file>:<line>: key 'sharing.timeSlicing.resources[i]...': ..." (or sharing.mps): a device the
//    resource does not have (unknown, or served under another name), a device selected twice
//    (by two entries, or by index and UUID), a count larger than the resource's devices, two
//    resources ending up with one name.
Result<std::vector<Resource>> build_resources(const inventory::Node& node, const Config& config,
                                              std::vector<std::string>* warnings = nullptr);

// The start-up dump of what is served, for the operator: a header with the MIG strategy, the
// device ID and list strategies and the sharing in force, then one line per resource with its
// device count and which devices back it (GPU indices, MIG "<gpu>:<slot>" with profile; replicas
// as "<n> GPUs x <r> replicas"). Ends with a newline; "serving no resource" when empty.
std::string describe_resources(const std::vector<Resource>& resources, const Config& config);

// The socket file name for a resource: "kgpu-" + name with '/' and '.' replaced by '-' + ".sock"
// ("nvidia.com/gpu" -> "kgpu-nvidia-com-gpu.sock").
std::string socket_name(std::string_view resource_name);

}  // namespace kgpu::deviceplugin
