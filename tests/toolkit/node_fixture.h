// An in-memory node for the toolkit's unit tests: 4 GPUs like dgx-h100's first four, GPU 1 with
// two MIG devices, GPU 2 lost.
#pragma once

#include <fmt/format.h>

#include "inventory/node.h"

namespace kgpu::test {

inline inventory::Node toolkit_node() {
    inventory::Node n;
    n.driver_version = "550.54.15";
    n.cuda_driver_version = 12040;
    const char* uuids[] = {"GPU-64bbca15-1776-feaf-35c7-c0761cd05691", "GPU-637037f8-6fd4-94c6-0069-1f774d6980ed",
                           "GPU-ec48557d-3c6d-e79c-626c-33bb6b58ac19", "GPU-2fbe396f-df9c-d5a1-4b31-c1658bb71f80"};
    const char* buses[] = {"00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0"};
    for (unsigned i = 0; i < 4; ++i) {
        inventory::Gpu g;
        g.index = i;
        g.minor = i;
        g.uuid = uuids[i];
        g.name = "NVIDIA H100 80GB HBM3";
        g.pci_bus_id = buses[i];
        g.cc_major = 9;
        g.cc_minor = 0;
        g.memory_total_mib = 81559;
        n.gpus.push_back(g);
    }
    n.gpus[1].mig_mode = inventory::MigMode::enabled;
    for (unsigned j = 0; j < 2; ++j) {
        inventory::MigDevice m;
        m.index = j;
        m.uuid = fmt::format("MIG-00000000-0000-0000-0000-00000000000{}", j);
        m.profile = "3g.40gb";
        m.gpu_instance_id = 1 + j;
        m.compute_instance_id = 0;
        n.gpus[1].mig_devices.push_back(m);
    }
    n.gpus[2].lost = true;
    n.gpus[2].error = "GPU is lost";
    return n;
}

}  // namespace kgpu::test
