// resolve_device_id / is_gpu_resource: every ID form a device plugin strategy writes, against
// simulated nodes (a100-mig: MIG on GPUs 0 and 1; dgx-h100: 8 plain GPUs) and hand-built ones.
#include <gtest/gtest.h>

#include "exporter/attribution.h"
#include "attribution/sim_node.h"

using namespace kgpu;
using exporter::DeviceTarget;
using exporter::resolve_device_id;

namespace {

using kgpu::test::a100_mig;
using kgpu::test::dgx_h100;


std::optional<DeviceTarget> gpu(unsigned i) { return DeviceTarget{i, std::nullopt}; }
std::optional<DeviceTarget> mig(unsigned i, unsigned gi) { return DeviceTarget{i, gi}; }

TEST(DeviceIds, UuidsAndIndicesOnDgxH100) {
    const auto& n = dgx_h100();
    ASSERT_EQ(n.gpus.size(), 8u);
    EXPECT_EQ(resolve_device_id("GPU-64bbca15-1776-feaf-35c7-c0761cd05691", n), gpu(0));
    for (const auto& g : n.gpus) {
        EXPECT_EQ(resolve_device_id(g.uuid, n), gpu(g.index)) << g.uuid;
        EXPECT_EQ(resolve_device_id(std::to_string(g.index), n), gpu(g.index));
    }
    // NVML writes lower case; an upper-case copy still names the GPU.
    std::string upper = n.gpus[3].uuid;
    for (size_t i = 4; i < upper.size(); ++i) upper[i] = static_cast<char>(std::toupper(static_cast<unsigned char>(upper[i])));
    EXPECT_EQ(resolve_device_id(upper, n), gpu(3));
}

TEST(DeviceIds, ReplicasNameTheirGpu) {
    const auto& n = dgx_h100();
    ASSERT_EQ(n.gpus.size(), 8u);
    EXPECT_EQ(resolve_device_id(n.gpus[5].uuid + "::0", n), gpu(5));
    EXPECT_EQ(resolve_device_id(n.gpus[5].uuid + "::17", n), gpu(5));
    EXPECT_EQ(resolve_device_id("7::3", n), gpu(7));
    // A replica suffix that is not a number is not an ID any strategy writes.
    EXPECT_EQ(resolve_device_id(n.gpus[5].uuid + "::", n), std::nullopt);
    EXPECT_EQ(resolve_device_id(n.gpus[5].uuid + "::x", n), std::nullopt);
    EXPECT_EQ(resolve_device_id("7::-1", n), std::nullopt);
    EXPECT_EQ(resolve_device_id("::1", n), std::nullopt);
}

TEST(DeviceIds, MigUuidsAndSlotsOnA100Mig) {
    const auto& n = a100_mig();
    ASSERT_EQ(n.gpus.size(), 4u);
    ASSERT_EQ(n.gpus[0].mig_devices.size(), 7u);
    ASSERT_EQ(n.gpus[1].mig_devices.size(), 4u);
    // Fixture values: GPU 0 slot 0 is GI 7; GPU 1's 3g.40gb is GI 2, its last 1g.10gb GI 14.
    EXPECT_EQ(resolve_device_id("MIG-4b69808b-66a3-1662-f86c-3b76eedd0860", n), mig(0, 7));
    EXPECT_EQ(resolve_device_id("MIG-7b8347a7-1fe5-eb5c-1670-8c5b74d9ad48", n), mig(1, 2));
    EXPECT_EQ(resolve_device_id("MIG-92710a87-5682-21ae-58be-98927cf50673", n), mig(1, 14));
    for (const auto& g : n.gpus) {
        for (const auto& m : g.mig_devices) {
            EXPECT_EQ(resolve_device_id(m.uuid, n), mig(g.index, m.gpu_instance_id)) << m.uuid;
            EXPECT_EQ(resolve_device_id(m.uuid + "::2", n), mig(g.index, m.gpu_instance_id)) << m.uuid;
            const auto slot = std::to_string(g.index) + ":" + std::to_string(m.index);
            EXPECT_EQ(resolve_device_id(slot, n), mig(g.index, m.gpu_instance_id)) << slot;
            EXPECT_EQ(resolve_device_id(slot + "::1", n), mig(g.index, m.gpu_instance_id)) << slot;
        }
    }
    EXPECT_EQ(resolve_device_id("1:3", n), mig(1, 14));
    // The parent GPUs and the MIG-disabled ones resolve as whole GPUs.
    EXPECT_EQ(resolve_device_id(n.gpus[0].uuid, n), gpu(0));
    EXPECT_EQ(resolve_device_id("2", n), gpu(2));
    EXPECT_EQ(resolve_device_id(n.gpus[3].uuid + "::4", n), gpu(3));
}

TEST(DeviceIds, LegacyMigForm) {
    const auto& n = a100_mig();
    ASSERT_EQ(n.gpus.size(), 4u);
    // Drivers before R470 named MIG devices "MIG-<parent GPU UUID>/<gi>/<ci>".
    EXPECT_EQ(resolve_device_id("MIG-" + n.gpus[1].uuid + "/5/0", n), mig(1, 5));
    EXPECT_EQ(resolve_device_id("MIG-" + n.gpus[1].uuid + "/6/0", n), std::nullopt);  // no GI 6
    EXPECT_EQ(resolve_device_id("MIG-" + n.gpus[1].uuid + "/5", n), std::nullopt);
    EXPECT_EQ(resolve_device_id("MIG-" + n.gpus[1].uuid + "/x/0", n), std::nullopt);
    EXPECT_EQ(resolve_device_id("MIG-" + n.gpus[2].uuid + "/5/0", n), std::nullopt);  // MIG disabled
}

TEST(DeviceIds, UnknownAndMalformedIdsResolveToNothing) {
    const auto& n = a100_mig();
    ASSERT_EQ(n.gpus.size(), 4u);
    for (std::string_view id :
         {"", "4", "99", "-1", "+1", " 1", "1 ", "0x1", "GPU-", "GPU-00000000-0000-0000-0000-000000000000",
          "MIG-", "MIG-00000000-0000-0000-0000-000000000000", "0:7", "2:0", "4:0", "0:", ":0", "a:b", "0:0:0",
          "nvidia0", "4294967296", "0:4294967296", "GPU-5ad70d24-867c-2e2a-7049-b5408d9d30fb-extra"})
        EXPECT_EQ(resolve_device_id(id, n), std::nullopt) << "'" << id << "'";
    EXPECT_EQ(resolve_device_id("0", inventory::Node{}), std::nullopt);
}

TEST(DeviceIds, HandBuiltNodeWithSparseIndices) {
    // A node whose GPU list does not start at 0 (indices are NVML's, not positions).
    inventory::Node n;
    inventory::Gpu g;
    g.index = 2;
    g.uuid = "GPU-aaaa";
    inventory::MigDevice m;
    m.index = 1;
    m.uuid = "MIG-bbbb";
    m.gpu_instance_id = 3;
    g.mig_devices.push_back(m);
    n.gpus.push_back(g);
    EXPECT_EQ(resolve_device_id("2", n), gpu(2));
    EXPECT_EQ(resolve_device_id("0", n), std::nullopt);
    EXPECT_EQ(resolve_device_id("2:1", n), mig(2, 3));
    EXPECT_EQ(resolve_device_id("2:0", n), std::nullopt);
    EXPECT_EQ(resolve_device_id("MIG-bbbb::0", n), mig(2, 3));
    EXPECT_EQ(resolve_device_id("GPU-aaaa", n), gpu(2));
}

TEST(DeviceIds, GpuResourceNames) {
    using exporter::is_gpu_resource;
    EXPECT_TRUE(is_gpu_resource("nvidia.com/gpu"));
    EXPECT_TRUE(is_gpu_resource("nvidia.com/gpu.shared"));
    EXPECT_TRUE(is_gpu_resource("nvidia.com/mig-1g.10gb"));
    EXPECT_TRUE(is_gpu_resource("nvidia.com/mig-3g.40gb.shared"));
    EXPECT_FALSE(is_gpu_resource("nvidia.com/mig-"));
    EXPECT_FALSE(is_gpu_resource("nvidia.com/gpus"));
    EXPECT_FALSE(is_gpu_resource("nvidia.com/gpu.other"));
    EXPECT_FALSE(is_gpu_resource("example.com/gpu"));
    EXPECT_FALSE(is_gpu_resource("cpu"));
    EXPECT_FALSE(is_gpu_resource(""));
    const std::vector<std::string> extra{"acme.com/shared-gpu", ""};
    EXPECT_TRUE(is_gpu_resource("acme.com/shared-gpu", extra));
    EXPECT_TRUE(is_gpu_resource("nvidia.com/gpu", extra));
    EXPECT_FALSE(is_gpu_resource("acme.com/shared-gpu"));
    EXPECT_FALSE(is_gpu_resource("", extra));
    // A whole domain (the MIG manager's: resources renamed by resources.gpus).
    const std::vector<std::string> domain{"nvidia.com/*"};
    EXPECT_TRUE(is_gpu_resource("nvidia.com/a100", domain));
    EXPECT_FALSE(is_gpu_resource("nvidia.com/", domain));
    EXPECT_FALSE(is_gpu_resource("nvidia.company/a100", domain));
    EXPECT_FALSE(is_gpu_resource("acme.com/gpu", domain));
}

}  // namespace
