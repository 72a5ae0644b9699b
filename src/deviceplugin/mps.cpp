#include "deviceplugin/mps.h"

#include <map>

namespace kgpu::deviceplugin {

std::vector<mps::DaemonSpec> mps_daemon_specs(const std::vector<Resource>& resources, const inventory::Node& node) {
    std::vector<mps::DaemonSpec> out;
    for (const auto& r : resources) {
        if (!r.shared()) continue;
        mps::DaemonSpec spec{r.name, {}};
        std::map<std::string, size_t> by_physical;  // physical device id -> position in spec.gpus
        for (const auto& d : r.devices) {
            auto [it, fresh] = by_physical.try_emplace(d.physical_id, spec.gpus.size());
            if (!fresh) {
                ++spec.gpus[it->second].replicas;
                continue;
            }
            mps::SharedGpu g;
            g.index = d.gpu_index;
            g.uuid = d.uuid;
            g.replicas = 1;
            g.mig = d.mig.has_value();
            if (d.gpu_index < node.gpus.size()) {
                const auto& gpu = node.gpus[d.gpu_index];
                g.memory_mib = gpu.memory_total_mib;
                g.cc_major = gpu.cc_major;
                g.cc_minor = gpu.cc_minor;
                if (d.mig)
                    for (const auto& m : gpu.mig_devices)
                        if (m.uuid == d.uuid) g.memory_mib = m.memory_mib;
            }
            spec.gpus.push_back(std::move(g));
        }
        out.push_back(std::move(spec));
    }
    return out;
}

bool shares_with_mps(const Config&) {
    // parse_config refuses sharing.mps for now: no configuration shares with MPS yet.
    return false;
}

}  // namespace kgpu::deviceplugin
