// NVIDIA's functions on the host's PCI bus, read from sysfs rather than NVML, so the answer is
// there when the driver does not load. The one scan of <sysfs-root>/bus/pci/devices that
// `kgpu labels` (nvidia.com/gpu.present, the vGPU labels) and `kgpu doctor` (hardware.pci) read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace kgpu::inventory {

inline constexpr std::uint16_t kNvidiaPciVendor = 0x10de;

struct PciFunction {
    std::string address;           // the sysfs name, "0000:3b:00.0"
    std::uint32_t class_code = 0;  // sysfs `class`: 0x030200 3D controller, 0x030000 VGA, 0x068000 NVSwitch
    std::filesystem::path dir;     // <sysfs-root>/bus/pci/devices/<address>
};

// sysfs's class text ("0x030200", surrounding blanks allowed); nullopt when it is not hex.
std::optional<std::uint32_t> parse_pci_class(std::string_view text);

// Every function of vendor 0x10de under <sysfs_root>/bus/pci/devices, sorted by address. Each
// function's `vendor` is read, and an NVIDIA function's `class`. Errors (io or parse), each naming
// the file: the directory cannot be listed, a `vendor` or an NVIDIA function's `class` cannot be
// read or is not hex.
Result<std::vector<PciFunction>> nvidia_pci_functions(const std::filesystem::path& sysfs_root);

// A display controller (base class 0x03): what `kgpu doctor` reports as an NVIDIA GPU on the bus.
bool is_display_class(std::uint32_t class_code);

// What the GPU Operator counts as a GPU when it sets nvidia.com/gpu.present: a function that
// Node Feature Discovery labels pci-0300_10de or pci-0302_10de (VGA or 3D controller; NVIDIA
// gpu-operator controllers/state_manager.go, gpuNodeLabels). NVSwitches (0x0680) and other
// bridges are not GPUs.
bool is_gpu_class(std::uint32_t class_code);

}  // namespace kgpu::inventory
