// Device plugin IDs -> GPUs (attribution.h: resolve_device_id, is_gpu_resource).
#include <algorithm>
#include <charconv>

#include "exporter/attribution.h"

namespace kgpu::exporter {
namespace {

// A non-empty run of decimal digits that fits `unsigned`; nothing else (no sign, no blanks).
std::optional<unsigned> parse_index(std::string_view s) {
    if (s.empty() || !std::ranges::all_of(s, [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
    unsigned v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
    return v;
}

// NVML prints UUIDs in lower case; compare without case so an ID typed by hand still matches.
bool same_uuid(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::ranges::equal(a, b, [](char x, char y) {
               auto lo = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
               return lo(x) == lo(y);
           });
}

const inventory::Gpu* gpu_by_index(const inventory::Node& node, unsigned index) {
    for (const auto& g : node.gpus)
        if (g.index == index) return &g;
    return nullptr;
}

std::optional<DeviceTarget> resolve_base(std::string_view id, const inventory::Node& node) {
    if (id.starts_with("GPU-")) {
        for (const auto& g : node.gpus)
            if (same_uuid(g.uuid, id)) return DeviceTarget{g.index, std::nullopt};
        return std::nullopt;
    }
    if (id.starts_with("MIG-GPU-")) {
        // The pre-R470 MIG form "MIG-GPU-<parent uuid>/<gi>/<ci>".
        auto rest = id.substr(4);
        auto s1 = rest.find('/');
        if (s1 == std::string_view::npos) return std::nullopt;
        auto s2 = rest.find('/', s1 + 1);
        if (s2 == std::string_view::npos) return std::nullopt;
        auto gi = parse_index(rest.substr(s1 + 1, s2 - s1 - 1));
        if (!gi || !parse_index(rest.substr(s2 + 1))) return std::nullopt;
        for (const auto& g : node.gpus) {
            if (!same_uuid(g.uuid, rest.substr(0, s1))) continue;
            for (const auto& m : g.mig_devices)
                if (m.gpu_instance_id == *gi) return DeviceTarget{g.index, m.gpu_instance_id};
        }
        return std::nullopt;
    }
    if (id.starts_with("MIG-")) {
        for (const auto& g : node.gpus)
            for (const auto& m : g.mig_devices)
                if (same_uuid(m.uuid, id)) return DeviceTarget{g.index, m.gpu_instance_id};
        return std::nullopt;
    }
    if (auto colon = id.find(':'); colon != std::string_view::npos) {
        auto gi = parse_index(id.substr(0, colon));
        auto mi = parse_index(id.substr(colon + 1));
        if (!gi || !mi) return std::nullopt;
        const auto* g = gpu_by_index(node, *gi);
        if (!g) return std::nullopt;
        for (const auto& m : g->mig_devices)
            if (m.index == *mi) return DeviceTarget{g->index, m.gpu_instance_id};
        return std::nullopt;
    }
    if (auto i = parse_index(id)) {
        if (const auto* g = gpu_by_index(node, *i)) return DeviceTarget{g->index, std::nullopt};
    }
    return std::nullopt;
}

}  // namespace

std::optional<DeviceTarget> resolve_device_id(std::string_view id, const inventory::Node& node) {
    // Replicas (time-slicing, MPS): "<id>::<n>". The replica number must be a number; the base
    // is resolved like any other ID.
    if (auto sep = id.find("::"); sep != std::string_view::npos) {
        if (!parse_index(id.substr(sep + 2))) return std::nullopt;
        id = id.substr(0, sep);
    }
    if (id.empty()) return std::nullopt;
    return resolve_base(id, node);
}

std::string replica_of(std::string_view id) {
    if (auto sep = id.find("::"); sep != std::string_view::npos && parse_index(id.substr(sep + 2)))
        return std::string(id.substr(sep + 2));
    // GKE's device plugin: "nvidia0/vgpu2".
    if (auto sep = id.find("/vgpu"); sep != std::string_view::npos && parse_index(id.substr(sep + 5)))
        return std::string(id.substr(sep + 5));
    return "";
}

bool is_gpu_resource(std::string_view resource_name, std::span<const std::string> extra) {
    // nvidia.com/mig-<profile> (mixed strategy) and nvidia.com/mig-<profile>.shared (time-sliced
    // MIG with renameByDefault) both start with "nvidia.com/mig-".
    if (resource_name == "nvidia.com/gpu" || resource_name == "nvidia.com/gpu.shared" ||
        (resource_name.starts_with("nvidia.com/mig-") && resource_name.size() > 15))
        return true;
    // "<prefix>/*": every resource of that domain (the MIG manager's "nvidia.com/*", whatever the
    // config renamed its resources to).
    return std::ranges::any_of(extra, [&](const std::string& e) {
        if (e.size() > 2 && e.ends_with("/*"))
            return resource_name.size() > e.size() - 1 && resource_name.starts_with(std::string_view(e).substr(0, e.size() - 1));
        return !e.empty() && e == resource_name;
    });
}

}  // namespace kgpu::exporter
