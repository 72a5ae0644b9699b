#include "deviceplugin/resources.h"

#include <algorithm>

#include <fmt/format.h>

namespace kgpu::deviceplugin {

const Device* Resource::find(std::string_view id) const {
    for (const Device& d : devices)
        if (d.id == id) return &d;
    return nullptr;
}

std::vector<Resource> build_resources(const inventory::Node& node, const Config& config,
                                      std::vector<std::string>* warnings) {
    Resource gpus{std::string(kGpuResourceName), {}};
    for (const inventory::Gpu& g : node.gpus) {
        if (config.mig_strategy != MigStrategy::none && g.mig_mode == inventory::MigMode::enabled) {
            if (warnings)
                warnings->push_back(fmt::format(
                    "GPU {} ({}) has MIG enabled: not advertised as a whole GPU with MIG strategy {} "
                    "(MIG devices are not supported yet)",
                    g.index, g.uuid, to_string(config.mig_strategy)));
            continue;
        }
        Device d;
        d.id = config.device_id_strategy == DeviceIdStrategy::index ? std::to_string(g.index) : g.uuid;
        d.gpu_index = g.index;
        d.uuid = g.uuid;
        d.minor = g.minor;
        d.numa = g.numa_node;
        d.lost = g.lost;
        gpus.devices.push_back(std::move(d));
    }
    std::sort(gpus.devices.begin(), gpus.devices.end(),
              [](const Device& a, const Device& b) { return a.gpu_index < b.gpu_index; });
    std::vector<Resource> out;
    if (!gpus.devices.empty()) out.push_back(std::move(gpus));
    return out;
}

std::string socket_name(std::string_view resource_name) {
    std::string s = "kgpu-";
    for (char c : resource_name) s += (c == '/' || c == '.') ? '-' : c;
    return s + ".sock";
}

}  // namespace kgpu::deviceplugin
