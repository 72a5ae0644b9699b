// PCI configuration spaces for tests, built byte by byte from the documented layouts: the PCI
// type-0 header and capability list (PCI Local Bus Specification) and NVIDIA's vGPU
// vendor-specific capability as gpu-feature-discovery reads it (internal/vgpu of
// NVIDIA/k8s-device-plugin v0.20): after the capability's id, next pointer and length bytes, the
// signature "VF", then records [id][length of the record][data], the host driver record (id 0)
// holding 10 bytes of version and 10 of branch.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kgpu::test {

class PciConfig {
public:
    // A type-0 header of `size` bytes (256: what a privileged read of sysfs `config` returns for
    // a conventional function; 64: what an unprivileged one returns).
    PciConfig(std::uint16_t vendor, std::uint16_t device, std::uint32_t class_code, size_t size = 256)
        : bytes_(size, '\0') {
        put16(0x00, vendor);
        put16(0x02, device);
        put16(0x04, 0x0006);  // command: memory space, bus master
        set(0x08, 0xa1);      // revision
        set(0x09, static_cast<std::uint8_t>(class_code));  // programming interface
        set(0x0a, static_cast<std::uint8_t>(class_code >> 8));   // subclass
        set(0x0b, static_cast<std::uint8_t>(class_code >> 16));  // base class
    }

    // Places a capability at `offset` (id, next pointer, then `data`) and links it last in the
    // list; sets the status register's capability-list bit.
    PciConfig& capability(std::uint8_t offset, std::uint8_t id, std::string_view data) {
        set(0x06, static_cast<std::uint8_t>(byte(0x06) | 0x10));
        if (last_ == 0) set(0x34, offset);
        else set(last_ + 1, offset);
        set(offset, id);
        set(offset + 1, 0);
        for (size_t i = 0; i < data.size(); ++i) set(offset + 2 + i, static_cast<std::uint8_t>(data[i]));
        last_ = offset;
        return *this;
    }

    std::uint8_t byte(size_t at) const { return static_cast<std::uint8_t>(bytes_.at(at)); }
    PciConfig& set(size_t at, std::uint8_t v) {
        bytes_.at(at) = static_cast<char>(v);
        return *this;
    }
    const std::string& bytes() const { return bytes_; }

private:
    void put16(size_t at, std::uint16_t v) {
        set(at, static_cast<std::uint8_t>(v));
        set(at + 1, static_cast<std::uint8_t>(v >> 8));
    }

    std::string bytes_;
    size_t last_ = 0;
};

// `text` in a field of `width` bytes, NUL-padded.
inline std::string padded(std::string_view text, size_t width) {
    std::string f(text.substr(0, width));
    f.resize(width, '\0');
    return f;
}

// The data of a vendor-specific capability after its id and next pointer: the capability's
// length, then `body`.
inline std::string vendor_specific(std::string_view body) {
    std::string d(1, static_cast<char>(3 + body.size()));
    d += body;
    return d;
}

// A vGPU capability's body: "VF", the `before` records (each [id][length][data]), then the host
// driver record.
inline std::string vgpu_body(std::string_view version, std::string_view branch,
                             const std::vector<std::pair<std::uint8_t, std::string>>& before = {}) {
    std::string b = "VF";
    for (const auto& [id, data] : before) {
        b.push_back(static_cast<char>(id));
        b.push_back(static_cast<char>(2 + data.size()));
        b += data;
    }
    b.push_back('\0');                       // record id 0: host driver version
    b.push_back(static_cast<char>(2 + 20));  // the record's length
    b += padded(version, 10) + padded(branch, 10);
    return b;
}

// An NVIDIA 3D controller with the capabilities a GPU lists (power management at 0x60, MSI at
// 0x68, PCI Express at 0x78), and, for a vGPU, NVIDIA's vendor-specific capability at 0xc8.
inline PciConfig nvidia_gpu_config(size_t size = 256) {
    PciConfig c(0x10de, 0x1eb8, 0x030200, size);
    if (size < 256) return c;  // an unprivileged read: the header only
    c.capability(0x60, 0x01, std::string("\x03\x06", 2) + std::string(4, '\0'));  // PM: version 3
    c.capability(0x68, 0x05, std::string(12, '\0'));                                 // MSI, 64-bit
    c.capability(0x78, 0x10, std::string("\x02\x00", 2) + std::string(56, '\0'));  // PCIe v2 endpoint
    return c;
}
inline PciConfig nvidia_vgpu_config(std::string_view version, std::string_view branch) {
    PciConfig c = nvidia_gpu_config();
    c.capability(0xc8, 0x09, vendor_specific(vgpu_body(version, branch)));
    return c;
}

}  // namespace kgpu::test
