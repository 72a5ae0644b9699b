// NVIDIA vGPUs seen from the guest: gpu-feature-discovery's vGPU detection (internal/vgpu of
// NVIDIA/k8s-device-plugin v0.20), read from the PCI configuration space in sysfs, not NVML.
//
// A vGPU is a PCI function of vendor 0x10de whose first vendor-specific capability (id 0x09)
// carries the signature "VF" in its bytes 3-4. After the signature come records, from byte 5:
// [id][length of the whole record][data…]; the record with id 0 holds the vGPU manager's (host)
// driver version in 10 bytes and its branch in the next 10, NUL-padded.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "inventory/pci.h"

namespace kgpu::inventory {

// What the vGPU manager on the hypervisor host tells the guest.
struct VgpuHostDriver {
    std::string version;  // "550.54.16"
    std::string branch;   // "r550_00"
};

struct VgpuDevice {
    std::string address;  // the sysfs name, "0000:3b:00.0"
    // The host driver record of the capability; nullopt when it has none (GFD then fails the
    // labeling: "cannot find driver version record").
    std::optional<VgpuHostDriver> host_driver;
};

// The first vendor-specific capability of a PCI configuration space: its bytes from the
// capability id to its length byte's count. nullopt when the status register has no capability
// list or the list (followed until it ends, loops or meets id 0xff) has no vendor-specific entry.
// Errors: `config` shorter than 256 bytes (what an unprivileged read of sysfs returns: 64), or a
// vendor-specific capability that runs past the first 256 bytes, where the capability list lives
// (a PCIe function's 4096-byte space included). `what` names the device in the message.
Result<std::optional<std::string>> vendor_capability(std::string_view config, std::string_view what);

// Whether a vendor-specific capability is a vGPU's ("VF" at bytes 3 and 4).
bool is_vgpu_capability(std::string_view capability);

// The host driver record (id 0) of a vGPU capability, found by following the record lengths from
// byte 5; nullopt when there is none (the lengths lead past the capability, a zero length, or
// fewer than 20 bytes of data).
std::optional<VgpuHostDriver> vgpu_host_driver(std::string_view capability);

// The vGPUs among NVIDIA's PCI functions (nvidia_pci_functions, which reads `vendor` and `class`),
// by address: each function's `config` is read. Errors, as GFD's (which then writes no vGPU
// labels): a config file unreadable, a config space under 256 bytes (kgpu needs CAP_SYS_ADMIN,
// i.e. a privileged container, to read all of it), a malformed capability; each names the file.
Result<std::vector<VgpuDevice>> find_vgpu_devices(const std::vector<PciFunction>& nvidia_functions);

}  // namespace kgpu::inventory
