#include "deviceplugin/resources.h"

#include <gtest/gtest.h>
#include <fmt/format.h>

namespace kgpu::deviceplugin {
namespace {

template <class T>
T must(Result<T> r) {
    EXPECT_TRUE(r.has_value()) << r.error().message;
    return r ? std::move(*r) : T{};
}

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

TEST(DevicePluginResources, IndexIdStrategy) {
    Config c;
    c.device_id_strategy = DeviceIdStrategy::index;
    auto rs = must(build_resources(node_with(2), c));
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].devices[0].id, "0");
    EXPECT_EQ(rs[0].devices[1].id, "1");
    EXPECT_EQ(rs[0].find("1"), &rs[0].devices[1]);
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
