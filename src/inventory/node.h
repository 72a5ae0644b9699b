// The node model every feature reads (DESIGN.md: "src/inventory is the one model every feature
// reads; nothing else calls NVML for discovery"). Plain values, cheap to copy and compare.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kgpu::inventory {

enum class MigMode { unsupported, disabled, enabled };
std::string_view to_string(MigMode m);

// Where a GPU's NUMA node came from.
enum class NumaSource { sysfs, nvml, none };
std::string_view to_string(NumaSource s);

struct MigDevice {
    unsigned index = 0;                 // slot on the parent GPU (the j of "i:j")
    std::string uuid;                   // "MIG-..."
    std::string profile;                // "1g.10gb"
    unsigned gpu_instance_id = 0;
    unsigned compute_instance_id = 0;
    std::uint64_t memory_mib = 0;
    unsigned sm_count = 0;
    unsigned slices = 0;                // GPU-instance slices ("1g" = 1)
    unsigned compute_slices = 0;        // compute-instance slices (== slices: one CI spans the GI)
    // Engines of the MIG device's compute instance (nvmlDeviceGetAttributes' shared* counts).
    unsigned copy_engines = 0, decoders = 0, encoders = 0, jpeg_decoders = 0, optical_flow_accelerators = 0;
};

struct Gpu {
    unsigned index = 0;
    std::string uuid;
    std::string name;
    std::string serial;
    unsigned minor = 0;                 // N of /dev/nvidiaN
    std::string pci_bus_id;             // "00000000:3B:00.0" (NVML form)
    std::uint32_t pci_device_id = 0;
    // PCI class code from sysfs (`class`: 0x030200 3D controller, 0x030000 VGA); absent when
    // sysfs does not have the device.
    std::optional<std::uint32_t> pci_class;
    std::optional<int> numa_node;       // absent: unknown or a non-NUMA machine
    NumaSource numa_source = NumaSource::none;
    std::uint64_t memory_total_mib = 0;
    int cc_major = 0, cc_minor = 0;     // CUDA compute capability
    std::string architecture;           // "hopper"
    std::optional<unsigned> power_limit_w;
    std::optional<bool> persistence_mode;
    MigMode mig_mode = MigMode::unsupported;
    MigMode mig_pending = MigMode::unsupported;
    std::vector<MigDevice> mig_devices;
    // A GPU that answered GPU_IS_LOST (or another error) during discovery stays listed with
    // what could be read and the error, so the operator sees which one it is.
    bool lost = false;
    std::string error;
};

// nvmlGpuTopologyLevel_t values; unknown when NVML could not answer.
enum class PcieLevel { internal = 0, single = 10, multiple = 20, hostbridge = 30, node = 40, system = 50, unknown = -1 };
// nvidia-smi topo -m spelling: PIX, PXB, PHB, NODE, SYS (internal shows as PIX; unknown as "?").
std::string_view topo_label(PcieLevel level);

struct Link {
    unsigned nvlinks = 0;   // NVLink links between the two GPUs (directly or through NVSwitches)
    PcieLevel pcie = PcieLevel::unknown;
};

class Topology {
public:
    Topology() = default;
    explicit Topology(size_t gpus) : n_(gpus), links_(gpus * gpus) {}
    size_t size() const { return n_; }
    const Link& at(size_t a, size_t b) const { return links_[a * n_ + b]; }
    Link& at(size_t a, size_t b) { return links_[a * n_ + b]; }
    // "X" on the diagonal, "NV<n>" with NVLink, else the PCIe label.
    std::string label(size_t a, size_t b) const;

private:
    size_t n_ = 0;
    std::vector<Link> links_;  // n_ x n_, symmetric
};

struct Node {
    std::string driver_version;        // "550.54.15"
    std::string nvml_version;          // "12.550.54.15" (may be empty)
    int cuda_driver_version = 0;       // 12040
    std::vector<Gpu> gpus;             // by NVML index
    Topology topology;                 // indexed like gpus
    std::vector<std::string> warnings; // what discovery could not read, one sentence each

    // "12.4" from 12040.
    std::string cuda_version_string() const;
};

// "hopper" for NVML_DEVICE_ARCH_HOPPER; "unknown" otherwise.
std::string architecture_name(unsigned nvml_arch);

// MIG profile name from slices and memory, following NVIDIA's rounding: the instance's share of
// the GPU's memory is rounded up to eighths, then times the GPU's memory in whole GB.
// mig_profile_name(1, 9728, 81920) == "1g.10gb".
std::string mig_profile_name(unsigned slices, std::uint64_t mig_memory_mib, std::uint64_t gpu_memory_mib);

}  // namespace kgpu::inventory
