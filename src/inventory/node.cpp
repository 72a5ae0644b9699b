#include "inventory/node.h"

#include <cmath>

#include <fmt/format.h>

namespace kgpu::inventory {

std::string_view to_string(MigMode m) {
    switch (m) {
        case MigMode::unsupported: return "unsupported";
        case MigMode::disabled: return "disabled";
        case MigMode::enabled: return "enabled";
    }
    return "unsupported";
}

std::string_view to_string(NumaSource s) {
    switch (s) {
        case NumaSource::sysfs: return "sysfs";
        case NumaSource::nvml: return "nvml";
        case NumaSource::none: return "none";
    }
    return "none";
}

std::string_view topo_label(PcieLevel level) {
    switch (level) {
        case PcieLevel::internal:
        case PcieLevel::single: return "PIX";
        case PcieLevel::multiple: return "PXB";
        case PcieLevel::hostbridge: return "PHB";
        case PcieLevel::node: return "NODE";
        case PcieLevel::system: return "SYS";
        case PcieLevel::unknown: return "?";
    }
    return "?";
}

std::string Topology::label(size_t a, size_t b) const {
    if (a == b) return "X";
    const Link& l = at(a, b);
    if (l.nvlinks > 0) return fmt::format("NV{}", l.nvlinks);
    return std::string(topo_label(l.pcie));
}

std::string Node::cuda_version_string() const {
    if (cuda_driver_version <= 0) return "";
    return fmt::format("{}.{}", cuda_driver_version / 1000, (cuda_driver_version % 1000) / 10);
}

std::string architecture_name(unsigned a) {
    switch (a) {
        case 2: return "kepler";
        case 3: return "maxwell";
        case 4: return "pascal";
        case 5: return "volta";
        case 6: return "turing";
        case 7: return "ampere";
        case 8: return "ada";
        case 9: return "hopper";
        case 10: return "blackwell";
        default: return "unknown";
    }
}

std::string mig_profile_name(unsigned slices, std::uint64_t mig_mib, std::uint64_t gpu_mib) {
    if (gpu_mib == 0) return fmt::format("{}g.{}gb", slices, (mig_mib + 1023) / 1024);
    double fraction = static_cast<double>(mig_mib) / static_cast<double>(gpu_mib);
    fraction = std::ceil(fraction * 8.0) / 8.0;
    const double gpu_gb = static_cast<double>((gpu_mib + 1023) / 1024);
    return fmt::format("{}g.{}gb", slices, static_cast<std::uint64_t>(std::lround(fraction * gpu_gb)));
}

}  // namespace kgpu::inventory
