#include "common/pci.h"

#include <charconv>
#include <cstdint>

#include <fmt/format.h>

namespace kgpu::pci {

namespace {

// `text` as hex, all of it, at most `max`; false when it is not.
bool hex(std::string_view text, std::uint64_t max, std::uint64_t& out) {
    if (text.empty() || text.size() > 16) return false;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out, 16);
    return ec == std::errc{} && p == text.data() + text.size() && out <= max;
}

}  // namespace

std::string sysfs_address(std::string_view id) {
    const auto c1 = id.find(':');
    if (c1 == std::string_view::npos) return {};
    const auto c2 = id.find(':', c1 + 1);
    if (c2 == std::string_view::npos || id.find(':', c2 + 1) != std::string_view::npos) return {};
    const auto dot = id.find('.', c2 + 1);
    if (dot == std::string_view::npos) return {};
    std::uint64_t domain = 0, bus = 0, device = 0, function = 0;
    // Linux's PCI domains are 32-bit; buses 8-bit; devices 5-bit; functions 3-bit (8 with ARI,
    // which sysfs still writes as device.function).
    if (!hex(id.substr(0, c1), 0xffffffff, domain) || !hex(id.substr(c1 + 1, c2 - c1 - 1), 0xff, bus) ||
        !hex(id.substr(c2 + 1, dot - c2 - 1), 0x1f, device) || !hex(id.substr(dot + 1), 0x7, function))
        return {};
    return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", domain, bus, device, function);
}

}  // namespace kgpu::pci
