// An inventory::Node discovered from a simulator fixture (sim/nodes/<name>), through the real
// dlopen of the simulator, as the exporter sees it.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "inventory/discovery.h"
#include "nvml/library.h"

namespace kgpu::test {

inline inventory::Node sim_node(const std::string& fixture) {
    const std::string path = std::string(KGPU_SOURCE_DIR) + "/sim/nodes/" + fixture;
    ::setenv("KGPU_SIM_NODE", path.c_str(), 1);
    ::unsetenv("KGPU_SIM_EVENTS");
    auto session = nvml::open_session({KGPU_SIM_LIBRARY, "/"});
    EXPECT_TRUE(session) << session.error().message;
    if (!session) return {};
    auto node = inventory::discover(*session, {"/nonexistent-sysfs", false});
    EXPECT_TRUE(node) << node.error().message;
    return node ? *node : inventory::Node{};
}

// The fixtures the attribution tests share, discovered once per test binary.
inline const inventory::Node& a100_mig() {
    static const inventory::Node node = sim_node("a100-mig.yaml");
    return node;
}
inline const inventory::Node& dgx_h100() {
    static const inventory::Node node = sim_node("dgx-h100.yaml");
    return node;
}

}  // namespace kgpu::test
