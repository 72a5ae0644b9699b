#include "inventory/vgpu.h"

#include <algorithm>
#include <array>
#include <cstdint>

#include "common/files.h"
#include "common/strings.h"

namespace kgpu::inventory {

namespace {

// PCI configuration space (PCI Local Bus Specification, "Configuration Space Header").
constexpr size_t kStatus = 0x06;              // status register, low byte
constexpr std::uint8_t kStatusCapList = 0x10;  // "capabilities list" bit
constexpr size_t kCapPointer = 0x34;          // offset of the first capability
constexpr std::uint8_t kCapVendorSpecific = 0x09;
constexpr std::uint8_t kCapChainBroken = 0xff;
constexpr size_t kFullConfig = 256;

// The vGPU capability (GFD's internal/vgpu): records from byte 5, the host driver record's data
// (after its id and length bytes) is 10 bytes of version and 10 of branch.
constexpr size_t kFirstRecord = 5;
constexpr size_t kFieldLength = 10;

std::uint8_t byte_at(std::string_view s, size_t i) { return static_cast<std::uint8_t>(s[i]); }

std::string trim_nul(std::string_view s) {
    while (!s.empty() && s.front() == '\0') s.remove_prefix(1);
    while (!s.empty() && s.back() == '\0') s.remove_suffix(1);
    return std::string(s);
}

}  // namespace

Result<std::optional<std::string>> vendor_capability(std::string_view config, std::string_view what) {
    if (config.size() < kFullConfig)
        return fail(Code::no_permission,
                    "{}: {} bytes of PCI configuration space, expected at least {} (reading all of it needs "
                    "CAP_SYS_ADMIN: run kgpu labels privileged)",
                    what, config.size(), kFullConfig);
    if ((byte_at(config, kStatus) & kStatusCapList) == 0) return std::nullopt;
    std::array<bool, 256> visited{};
    // Offsets are one byte, as the list's pointers are (the next pointer and length of a
    // capability at 0xfe or 0xff wrap to the start, as in GFD); the first 256 bytes are there.
    std::uint8_t pos = byte_at(config, kCapPointer);
    while (pos != 0 && !visited[pos]) {
        const std::uint8_t id = byte_at(config, pos);
        const std::uint8_t next = byte_at(config, static_cast<std::uint8_t>(pos + 1));
        const std::uint8_t length = byte_at(config, static_cast<std::uint8_t>(pos + 2));
        if (id == kCapChainBroken) break;
        if (id == kCapVendorSpecific) {
            // The list lives in the first 256 bytes; a capability running past them (into a
            // PCIe function's extended space, or with a header that wraps) is malformed (GFD's
            // one-byte offsets wrap there and it panics).
            if (size_t(pos) + length > kFullConfig)
                return fail(Code::parse,
                            "{}: the vendor-specific capability at 0x{:02x} has {} bytes, past the {}-byte "
                            "configuration header",
                            what, pos, length, kFullConfig);
            return std::string(config.substr(pos, length));
        }
        visited[pos] = true;
        pos = next;
    }
    return std::nullopt;
}

bool is_vgpu_capability(std::string_view capability) {
    return capability.size() >= 5 && capability[3] == 'V' && capability[4] == 'F';
}

std::optional<VgpuHostDriver> vgpu_host_driver(std::string_view cap) {
    size_t pos = kFirstRecord;
    if (pos >= cap.size()) return std::nullopt;
    while (byte_at(cap, pos) != 0) {
        if (pos + 1 >= cap.size()) return std::nullopt;
        const std::uint8_t length = byte_at(cap, pos + 1);
        if (length == 0) return std::nullopt;  // would never advance (GFD loops forever on it)
        pos += length;
        if (pos >= cap.size()) return std::nullopt;
    }
    const size_t data = pos + 2;
    if (data + 2 * kFieldLength > cap.size()) return std::nullopt;
    return VgpuHostDriver{trim_nul(cap.substr(data, kFieldLength)), trim_nul(cap.substr(data + kFieldLength, kFieldLength))};
}

Result<std::vector<VgpuDevice>> find_vgpu_devices(const std::vector<PciFunction>& nvidia_functions) {
    std::vector<VgpuDevice> out;
    for (const auto& f : nvidia_functions) {
        auto config = files::read(f.dir / "config");
        if (!config) return std::unexpected(config.error().context("PCI configuration space"));
        auto cap = vendor_capability(*config, (f.dir / "config").string());
        if (!cap) return std::unexpected(cap.error());
        if (!*cap || !is_vgpu_capability(**cap)) continue;
        out.push_back(VgpuDevice{f.address, vgpu_host_driver(**cap)});
    }
    return out;
}

}  // namespace kgpu::inventory
