#include "inventory/pci.h"

#include <algorithm>
#include <charconv>

#include "common/files.h"
#include "common/strings.h"

namespace kgpu::inventory {

namespace {

std::optional<std::uint32_t> parse_hex(std::string_view text) {
    std::string_view v = strings::trim(text);
    if (v.starts_with("0x") || v.starts_with("0X")) v.remove_prefix(2);
    std::uint32_t out = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out, 16);
    if (v.empty() || ec != std::errc() || p != v.data() + v.size()) return std::nullopt;
    return out;
}

}  // namespace

std::optional<std::uint32_t> parse_pci_class(std::string_view text) { return parse_hex(text); }

Result<std::vector<PciFunction>> nvidia_pci_functions(const std::filesystem::path& sysfs_root) {
    const auto dir = sysfs_root / "bus/pci/devices";
    std::error_code ec;
    std::vector<std::filesystem::path> devices;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        devices.push_back(it->path());
    if (ec) return fail(Code::io, "cannot list the PCI devices in {}: {}", dir.string(), ec.message());
    std::sort(devices.begin(), devices.end());

    std::vector<PciFunction> out;
    for (const auto& d : devices) {
        auto vendor = files::read_line(d / "vendor");
        if (!vendor) return std::unexpected(vendor.error().context("PCI device vendor"));
        auto id = parse_hex(*vendor);
        if (!id) return fail(Code::parse, "{}: '{}' is not a PCI vendor id", (d / "vendor").string(), *vendor);
        if (*id != kNvidiaPciVendor) continue;
        auto text = files::read_line(d / "class");
        if (!text) return std::unexpected(text.error().context("PCI device class"));
        auto cls = parse_pci_class(*text);
        if (!cls) return fail(Code::parse, "{}: '{}' is not a PCI class code", (d / "class").string(), *text);
        out.push_back(PciFunction{d.filename().string(), *cls, d});
    }
    return out;
}

bool is_display_class(std::uint32_t class_code) { return (class_code >> 16) == 0x03; }

bool is_gpu_class(std::uint32_t class_code) {
    const std::uint32_t base_sub = class_code >> 8;
    return base_sub == 0x0300 || base_sub == 0x0302;
}

}  // namespace kgpu::inventory
