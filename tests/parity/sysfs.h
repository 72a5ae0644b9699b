// A PCI sysfs tree for one simulated node, as NVIDIA's go-nvlib (nvpci) and kgpu read it: per
// GPU of the fixture, `vendor`, `device`, `class`, `numa_node`, `resource` and the configuration
// space; and a host bridge of another vendor. NVIDIA's binaries read /sys itself, so they see it
// bind-mounted over /sys (parity::in_namespace); kgpu reads it through --sysfs-root.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "support/pci_config.h"
#include "support/process.h"

namespace kgpu::parity {

// What the GPUs' PCI functions look like: compute (3D controller), graphics (VGA controller),
// or vGPU guests (3D controllers carrying NVIDIA's vGPU capability with a host driver record).
enum class PciKind { compute, graphics, vgpu };

inline void write_sysfs(const kgpu::test::TempDir& dir, const std::string& fixture_path, PciKind kind = PciKind::compute) {
    const YAML::Node root = YAML::LoadFile(fixture_path);
    for (const auto& g : root["gpus"]) {
        if (g["lost"] && g["lost"].as<bool>()) continue;
        // "00000000:07:00.0" (NVML) -> "0000:07:00.0" (sysfs).
        std::string name = g["pci_bus_id"].as<std::string>().substr(4);
        for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        const std::string d = "bus/pci/devices/" + name + "/";
        const auto device_id = g["pci_device_id"] ? g["pci_device_id"].as<std::uint32_t>() >> 16 : 0x20b2u;
        const std::uint32_t cls = kind == PciKind::graphics ? 0x030000 : 0x030200;
        dir.write(d + "vendor", "0x10de\n");
        dir.write(d + "device", fmt::format("0x{:04x}\n", device_id));
        dir.write(d + "class", fmt::format("0x{:06x}\n", cls));
        dir.write(d + "numa_node", fmt::format("{}\n", g["numa_node"] ? g["numa_node"].as<int>() : -1));
        dir.write(d + "resource", "0x00000000fa000000 0x00000000faffffff 0x0000000000040200\n"
                                  "0x0000000000000000 0x0000000000000000 0x0000000000000000\n");
        kgpu::test::PciConfig config = kind == PciKind::vgpu ? kgpu::test::nvidia_vgpu_config("550.54.16", "r550_00")
                                                             : kgpu::test::nvidia_gpu_config();
        config.set(0x02, static_cast<std::uint8_t>(device_id)).set(0x03, static_cast<std::uint8_t>(device_id >> 8));
        if (kind == PciKind::graphics) config.set(0x0a, 0x00);
        dir.write(d + "config", config.bytes());
    }
    dir.write("bus/pci/devices/0000:00:00.0/vendor", "0x8086\n");  // a host bridge
    dir.write("bus/pci/devices/0000:00:00.0/class", "0x060000\n");
}

}  // namespace kgpu::parity
