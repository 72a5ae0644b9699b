// The simulator's node fixture (sim/nodes/*.yaml, named by KGPU_SIM_NODE). Every test and the
// demo load it; a bad one must be reported (file:line: key: expected), never crash the library
// that stands in for the driver.
#include "fuzz.h"
#include "model.h"

KGPU_FUZZ_TARGET(sim_fixture) {
    const auto path = kgpu::fuzz::write_scratch("node.yaml", kgpu::fuzz::text(data, size));
    auto node = kgpu_sim::loadNode(path);
    if (!node) return 0;
    for (const auto& g : node->gpus) KGPU_FUZZ_CHECK(g.migDevices.size() <= 64, g.uuid);
    return 0;
}
