// The node the attribution targets map device IDs onto: built by hand (no NVML) like the
// simulator's a100-mig.yaml fixture, whose UUIDs the seeds use: GPU 0 with two MIG devices,
// GPU 1 whole, GPU 3 with one MIG device (index 2 is absent: indices are NVML's, not positions).
#pragma once

#include "inventory/node.h"

namespace kgpu::fuzz {

inline const inventory::Node& attribution_node() {
    static const inventory::Node node = [] {
        inventory::Node n;
        n.driver_version = "550.54.15";
        auto gpu = [&](unsigned index, const char* uuid) -> inventory::Gpu& {
            inventory::Gpu g;
            g.index = index;
            g.minor = index;
            g.uuid = uuid;
            g.name = "NVIDIA A100-SXM4-80GB";
            n.gpus.push_back(g);
            return n.gpus.back();
        };
        auto mig = [](inventory::Gpu& g, unsigned slot, unsigned gi, const char* uuid) {
            g.mig_mode = inventory::MigMode::enabled;
            inventory::MigDevice m;
            m.index = slot;
            m.gpu_instance_id = gi;
            m.uuid = uuid;
            m.profile = "1g.10gb";
            g.mig_devices.push_back(m);
        };
        auto& g0 = gpu(0, "GPU-5ad70d24-867c-2e2a-7049-b5408d9d30fb");
        mig(g0, 0, 7, "MIG-4b69808b-66a3-1662-f86c-3b76eedd0860");
        mig(g0, 1, 8, "MIG-298553be-e751-bc4a-7107-0b52d4004e20");
        gpu(1, "GPU-51f34de5-fb30-d2be-2d0f-a742c74f58f8");
        auto& g3 = gpu(3, "GPU-03bd6612-b354-b775-7d54-189b181b2d28");
        mig(g3, 2, 13, "MIG-6fdb8a69-cebe-b4c1-ea4b-353499403a8a");
        return n;
    }();
    return node;
}

// Whether `t` names a GPU (and MIG instance) that exists on `n`.
inline bool names_a_device(const inventory::Node& n, unsigned gpu_index, const std::optional<unsigned>& gi) {
    for (const auto& g : n.gpus) {
        if (g.index != gpu_index) continue;
        if (!gi) return true;
        for (const auto& m : g.mig_devices)
            if (m.gpu_instance_id == *gi) return true;
    }
    return false;
}

}  // namespace kgpu::fuzz
