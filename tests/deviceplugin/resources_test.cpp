#include "deviceplugin/resources.h"
#include "support/expect.h"

#include <gtest/gtest.h>
#include <fmt/format.h>

namespace kgpu::deviceplugin {
namespace {

using kgpu::test::must;

inventory::Node node_with(unsigned n) {
    inventory::Node node;
    for (unsigned i = 0; i < n; ++i) {
        inventory::Gpu g;
        g.index = i;
        g.uuid = fmt::format("GPU-{:08x}-0000-0000-0000-000000000000", 0xa0 + i);
        g.minor = 10 + i;
        if (i % 2 == 0) g.numa_node = static_cast<int>(i / 2);
        node.gpus.push_back(g);
    }
    node.topology = inventory::Topology(n);
    return node;
}

TEST(DevicePluginResources, WholeGpusByUuid) {
    auto node = node_with(3);
    node.gpus[1].lost = true;
    auto rs = must(build_resources(node, Config{}));
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].name, "nvidia.com/gpu");
    ASSERT_EQ(rs[0].devices.size(), 3u);
    for (unsigned i = 0; i < 3; ++i) {
        const Device& d = rs[0].devices[i];
        EXPECT_EQ(d.id, node.gpus[i].uuid);
        EXPECT_EQ(d.uuid, node.gpus[i].uuid);
        EXPECT_EQ(d.gpu_index, i);
        EXPECT_EQ(d.minor, 10 + i);
        EXPECT_EQ(d.numa, node.gpus[i].numa_node);
    }
    EXPECT_TRUE(rs[0].devices[1].lost);  // lost GPUs are still listed
    EXPECT_EQ(rs[0].find(node.gpus[2].uuid), &rs[0].devices[2]);
    EXPECT_EQ(rs[0].find("GPU-nope"), nullptr);
}

// NVIDIA's plugin advertises UUIDs under --device-id-strategy index too (indices only go to the
// container): the kubelet's checkpoint and PodResources keep the same IDs when the strategy changes.
TEST(DevicePluginResources, IndexIdStrategyStillAdvertisesUuids) {
    Config c;
    c.device_id_strategy = DeviceIdStrategy::index;
    auto node = node_with(2);
    auto rs = must(build_resources(node, c));
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].devices[0].id, node.gpus[0].uuid);
    EXPECT_EQ(rs[0].devices[1].id, node.gpus[1].uuid);
    EXPECT_EQ(rs[0].find(node.gpus[1].uuid), &rs[0].devices[1]);
    EXPECT_EQ(rs[0].find("1"), nullptr);
}

TEST(DevicePluginResources, PatternMatchesAsNvidia) {
    EXPECT_TRUE(pattern_matches("*", "Tesla T4"));
    EXPECT_TRUE(pattern_matches("*A100*", "NVIDIA A100-SXM4-80GB"));
    EXPECT_TRUE(pattern_matches("Tesla T4", "Tesla T4"));
    EXPECT_FALSE(pattern_matches("Tesla", "Tesla T4"));  // anchored
    EXPECT_TRUE(pattern_matches("1g.*", "1g.10gb"));
    EXPECT_FALSE(pattern_matches("1g.*", "2g.20gb"));
    EXPECT_TRUE(pattern_matches("*g.*gb*", "1g.10gb+me"));
    EXPECT_TRUE(pattern_matches("a*b*c", "aXbYbZc"));
    EXPECT_FALSE(pattern_matches("a*b*c", "aXbYbZ"));
    EXPECT_TRUE(pattern_matches("", ""));
    EXPECT_FALSE(pattern_matches("", "x"));
}

// resources.gpus / resources.mig: ignored by default (NVIDIA v0.14-v0.20), applied with the opt-in.
TEST(DevicePluginResources, NamingPatternsOnlyWithTheOptIn) {
    auto node = node_with(3);
    node.gpus[0].name = "NVIDIA A100-SXM4-80GB";
    node.gpus[1].name = "Tesla T4";
    node.gpus[2].name = "NVIDIA A100-SXM4-80GB";
    node.gpus[2].mig_mode = inventory::MigMode::enabled;
    inventory::MigDevice small, big;
    small.index = 0, small.uuid = "MIG-a", small.profile = "1g.10gb", small.gpu_instance_id = 7;
    big.index = 1, big.uuid = "MIG-b", big.profile = "3g.40gb", big.gpu_instance_id = 2;
    node.gpus[2].mig_devices = {small, big};
    Config c;
    c.mig_strategy = MigStrategy::mixed;
    c.resources.gpus = {{"*A100*", "nvidia.com/a100"}};
    c.resources.mig = {{"1g.*", "nvidia.com/mig-small"}};
    auto names = [](const std::vector<Resource>& rs) {
        std::vector<std::string> out;
        for (const auto& r : rs) out.push_back(fmt::format("{}={}", r.name, r.devices.size()));
        return out;
    };
    EXPECT_EQ(names(must(build_resources(node, c))),
              (std::vector<std::string>{"nvidia.com/gpu=2", "nvidia.com/mig-1g.10gb=1", "nvidia.com/mig-3g.40gb=1"}));
    c.apply_resource_naming = true;
    EXPECT_EQ(names(must(build_resources(node, c))),
              (std::vector<std::string>{"nvidia.com/a100=1", "nvidia.com/gpu=1", "nvidia.com/mig-3g.40gb=1",
                                        "nvidia.com/mig-small=1"}));
}

TEST(DevicePluginResources, StartupDumpSaysWhatIsServed) {
    auto node = node_with(4);
    Config c;
    c.device_id_strategy = DeviceIdStrategy::index;
    TimeSlicing ts;
    ReplicatedResource r;
    r.name = "nvidia.com/gpu";
    r.rename = "nvidia.com/gpu.shared";
    r.all_devices = false;
    r.device_ids = {"1", "2"};
    r.replicas = 4;
    ts.resources = {r};
    ts.fail_requests_greater_than_one = true;
    c.sharing.time_slicing = ts;
    const std::string d = describe_resources(must(build_resources(node, c)), c);
    EXPECT_NE(d.find("serving 2 resources (MIG strategy none, containers see devices by index, device list envvar, "
                     "sharing time-slicing):\n"),
              std::string::npos)
        << d;
    EXPECT_NE(d.find("nvidia.com/gpu           2 devices <- GPU 0, 3\n"), std::string::npos) << d;
    EXPECT_NE(d.find("nvidia.com/gpu.shared    8 devices <- GPU 1, 2 x 4 replicas (time-slicing, at most 1 per "
                     "container)\n"),
              std::string::npos)
        << d;
    EXPECT_NE(describe_resources({}, Config{}).find("serving no resource"), std::string::npos);
}

TEST(DevicePluginResources, NoGpusNoResource) {
    EXPECT_TRUE(must(build_resources(node_with(0), Config{})).empty());
}

TEST(DevicePluginResources, DevicesInIndexOrder) {
    auto node = node_with(3);
    std::swap(node.gpus[0], node.gpus[2]);
    auto rs = must(build_resources(node, Config{}));
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].devices[0].gpu_index, 0u);
    EXPECT_EQ(rs[0].devices[2].gpu_index, 2u);
}

TEST(DevicePluginResources, MigEnabledGpusWithMigStrategies) {
    auto node = node_with(2);
    node.gpus[1].mig_mode = inventory::MigMode::enabled;
    EXPECT_EQ(must(build_resources(node, Config{}))[0].devices.size(), 2u);  // none: whole GPUs anyway
    Config c;
    c.mig_strategy = MigStrategy::mixed;
    std::vector<std::string> warnings;
    auto rs = must(build_resources(node, c, &warnings));
    ASSERT_EQ(rs.size(), 1u);
    ASSERT_EQ(rs[0].devices.size(), 1u);
    EXPECT_EQ(rs[0].devices[0].gpu_index, 0u);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("GPU 1"), std::string::npos);
}

TEST(DevicePluginResources, SocketName) {
    EXPECT_EQ(socket_name("nvidia.com/gpu"), "kgpu-nvidia-com-gpu.sock");
    EXPECT_EQ(socket_name("nvidia.com/mig-1g.10gb"), "kgpu-nvidia-com-mig-1g-10gb.sock");
}

}  // namespace
}  // namespace kgpu::deviceplugin
