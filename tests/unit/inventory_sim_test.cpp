// Inventory from every fixture, through the real dlopen of the simulator, with exact values.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "inventory/discovery.h"
#include "nvml/library.h"

using namespace kgpu;
using inventory::MigMode;
using inventory::PcieLevel;

namespace {

inventory::Node discover_fixture(const std::string& name) {
    const std::string path = std::string(KGPU_SOURCE_DIR) + "/sim/nodes/" + name;
    ::setenv("KGPU_SIM_NODE", path.c_str(), 1);
    ::unsetenv("KGPU_SIM_EVENTS");
    auto lib = nvml::Library::load({KGPU_SIM_LIBRARY, "/"});
    EXPECT_TRUE(lib) << lib.error().message;
    auto session = nvml::Session::open(*lib);
    EXPECT_TRUE(session) << session.error().message;
    auto node = inventory::discover(*session, {"/nonexistent-sysfs", true});
    EXPECT_TRUE(node) << node.error().message;
    // Discovery is repeatable: a second pass over the same session sees the same node.
    auto again = inventory::discover(*session, {"/nonexistent-sysfs", true});
    EXPECT_TRUE(again);
    if (node && again) {
        EXPECT_EQ(again->gpus.size(), node->gpus.size());
        for (size_t i = 0; i < node->gpus.size(); ++i) EXPECT_EQ(again->gpus[i].uuid, node->gpus[i].uuid);
    }
    return node ? *node : inventory::Node{};
}

TEST(InventorySim, DgxH100) {
    auto n = discover_fixture("dgx-h100.yaml");
    EXPECT_EQ(n.driver_version, "550.54.15");
    EXPECT_EQ(n.cuda_driver_version, 12040);
    ASSERT_EQ(n.gpus.size(), 8u);
    const char* buses[] = {"18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"};
    for (unsigned i = 0; i < 8; ++i) {
        const auto& g = n.gpus[i];
        SCOPED_TRACE(i);
        EXPECT_EQ(g.index, i);
        EXPECT_EQ(g.minor, i);
        EXPECT_EQ(g.name, "NVIDIA H100 80GB HBM3");
        EXPECT_EQ(g.pci_bus_id, fmt::format("00000000:{}:00.0", buses[i]));
        EXPECT_EQ(g.pci_device_id, 0x233010DEu);
        EXPECT_EQ(g.memory_total_mib, 81559u);
        EXPECT_EQ(g.cc_major, 9);
        EXPECT_EQ(g.cc_minor, 0);
        EXPECT_EQ(g.architecture, "hopper");
        EXPECT_EQ(g.power_limit_w, 700u);
        EXPECT_EQ(g.numa_node, i < 4 ? 0 : 1);
        EXPECT_EQ(g.numa_source, inventory::NumaSource::nvml);
        EXPECT_TRUE(g.uuid.starts_with("GPU-"));
        EXPECT_EQ(g.uuid.size(), 40u);
        EXPECT_FALSE(g.lost);
        for (unsigned j = 0; j < 8; ++j) {
            if (j == i) continue;
            EXPECT_EQ(n.topology.at(i, j).nvlinks, 18u);
        }
    }
    EXPECT_EQ(n.topology.at(0, 1).pcie, PcieLevel::multiple);
    EXPECT_EQ(n.topology.at(2, 3).pcie, PcieLevel::multiple);
    EXPECT_EQ(n.topology.at(0, 3).pcie, PcieLevel::node);
    EXPECT_EQ(n.topology.at(3, 4).pcie, PcieLevel::system);
    EXPECT_EQ(n.topology.at(6, 7).pcie, PcieLevel::multiple);
    EXPECT_TRUE(n.warnings.empty());
}

TEST(InventorySim, PcieNvlinkPairs) {
    auto n = discover_fixture("pcie-nvlink-pairs.yaml");
    ASSERT_EQ(n.gpus.size(), 4u);
    for (const auto& g : n.gpus) {
        EXPECT_EQ(g.name, "NVIDIA A100 80GB PCIe");
        EXPECT_EQ(g.memory_total_mib, 81920u);
        EXPECT_EQ(g.architecture, "ampere");
        EXPECT_EQ(g.power_limit_w, 300u);
    }
    EXPECT_EQ(n.gpus[1].numa_node, 0);
    EXPECT_EQ(n.gpus[2].numa_node, 1);
    EXPECT_EQ(n.topology.at(0, 1).nvlinks, 12u);
    EXPECT_EQ(n.topology.at(3, 2).nvlinks, 12u);
    EXPECT_EQ(n.topology.at(0, 3).nvlinks, 0u);
    EXPECT_EQ(n.topology.at(0, 1).pcie, PcieLevel::single);
    EXPECT_EQ(n.topology.at(2, 3).pcie, PcieLevel::single);
    EXPECT_EQ(n.topology.at(1, 2).pcie, PcieLevel::system);
}

TEST(InventorySim, T4x4) {
    auto n = discover_fixture("t4x4.yaml");
    ASSERT_EQ(n.gpus.size(), 4u);
    for (const auto& g : n.gpus) {
        EXPECT_EQ(g.name, "Tesla T4");
        EXPECT_EQ(g.memory_total_mib, 15360u);
        EXPECT_EQ(g.cc_major, 7);
        EXPECT_EQ(g.cc_minor, 5);
        EXPECT_EQ(g.architecture, "turing");
        EXPECT_EQ(g.power_limit_w, 70u);
        EXPECT_EQ(g.mig_mode, MigMode::unsupported);
    }
    for (unsigned a = 0; a < 4; ++a) {
        for (unsigned b = 0; b < 4; ++b) EXPECT_EQ(n.topology.at(a, b).nvlinks, 0u);
    }
    EXPECT_EQ(n.topology.at(0, 1).pcie, PcieLevel::single);
    EXPECT_EQ(n.topology.at(2, 3).pcie, PcieLevel::single);
    EXPECT_EQ(n.topology.at(0, 2).pcie, PcieLevel::system);
    EXPECT_EQ(n.topology.label(1, 3), "SYS");
}

TEST(InventorySim, A100Mig) {
    auto n = discover_fixture("a100-mig.yaml");
    ASSERT_EQ(n.gpus.size(), 4u);
    const auto& g0 = n.gpus[0];
    EXPECT_EQ(g0.name, "NVIDIA A100-SXM4-80GB");
    EXPECT_EQ(g0.mig_mode, MigMode::enabled);
    ASSERT_EQ(g0.mig_devices.size(), 7u);
    for (unsigned i = 0; i < 7; ++i) {
        const auto& m = g0.mig_devices[i];
        EXPECT_EQ(m.index, i);
        EXPECT_EQ(m.profile, "1g.10gb");
        EXPECT_EQ(m.gpu_instance_id, 7 + i);
        EXPECT_EQ(m.compute_instance_id, 0u);
        EXPECT_EQ(m.memory_mib, 9728u);
        EXPECT_EQ(m.sm_count, 14u);
        EXPECT_EQ(m.slices, 1u);
        EXPECT_TRUE(m.uuid.starts_with("MIG-"));
    }
    const auto& g1 = n.gpus[1];
    ASSERT_EQ(g1.mig_devices.size(), 4u);
    EXPECT_EQ(g1.mig_devices[0].profile, "3g.40gb");
    EXPECT_EQ(g1.mig_devices[0].memory_mib, 40192u);
    EXPECT_EQ(g1.mig_devices[0].sm_count, 42u);
    EXPECT_EQ(g1.mig_devices[1].profile, "2g.20gb");
    EXPECT_EQ(g1.mig_devices[1].sm_count, 28u);
    EXPECT_EQ(g1.mig_devices[2].profile, "1g.10gb");
    EXPECT_EQ(g1.mig_devices[3].profile, "1g.10gb");
    EXPECT_NE(g1.mig_devices[2].uuid, g1.mig_devices[3].uuid);
    EXPECT_NE(g1.mig_devices[2].gpu_instance_id, g1.mig_devices[3].gpu_instance_id);
    for (unsigned i : {2u, 3u}) {
        EXPECT_EQ(n.gpus[i].mig_mode, MigMode::disabled);
        EXPECT_TRUE(n.gpus[i].mig_devices.empty());
    }
    EXPECT_EQ(n.topology.at(0, 3).nvlinks, 12u);
}

TEST(InventorySim, Empty) {
    auto n = discover_fixture("empty.yaml");
    EXPECT_TRUE(n.gpus.empty());
    EXPECT_EQ(n.topology.size(), 0u);
    EXPECT_FALSE(n.driver_version.empty());
}

}  // namespace
