// What the device plugin posts on the Node for a health change (issue #27 part 2): one notice per
// transition, naming the GPU's index and UUID, the reason (XID and meaning), what it takes away
// and the action; none while nothing changes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "deviceplugin/node_events.h"

using namespace kgpu::deviceplugin;

namespace {

std::vector<GpuHealth> fleet(std::size_t n) {
    std::vector<GpuHealth> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i].uuid = "GPU-" + std::to_string(i);
    return out;
}

std::string one_gpu(unsigned i) { return i == 3 ? "1 nvidia.com/gpu device" : ""; }

}  // namespace

TEST(NodeHealthNotices, AGpuTurningUnhealthyAndBackIsOneWarningThenOneNormal) {
    auto before = fleet(4), after = fleet(4);
    after[3].healthy = false;
    after[3].reason = "XID 48 (double-bit ECC error); needs a GPU reset";
    auto n = health_notices(before, after, one_gpu);
    ASSERT_EQ(n.size(), 1u);
    EXPECT_EQ(n[0].type, "Warning");
    EXPECT_EQ(n[0].reason, "GPUUnhealthy");
    EXPECT_EQ(n[0].message,
              "GPU 3 (GPU-3) is Unhealthy: XID 48 (double-bit ECC error); needs a GPU reset (1 nvidia.com/gpu device no "
              "longer allocatable). Action: drain the GPU's pods, then reset it (nvidia-smi --gpu-reset -i 3) or "
              "reboot the node; kgpu marks it Healthy once it answers with nothing pending");
    EXPECT_TRUE(health_notices(after, after, one_gpu).empty()) << "no change, no notice";

    auto healed = fleet(4);
    healed[3].reason = "GPU was reset: answers and nothing is pending";
    n = health_notices(after, healed, one_gpu);
    ASSERT_EQ(n.size(), 1u);
    EXPECT_EQ(n[0].type, "Normal");
    EXPECT_EQ(n[0].reason, "GPUHealthy");
    EXPECT_EQ(n[0].message, "GPU 3 (GPU-3) is Healthy again: GPU was reset: answers and nothing is pending");
}

TEST(NodeHealthNotices, GpusAreMatchedByUuidNotPosition) {
    auto before = fleet(2), after = fleet(2);
    before[0].healthy = false;
    before[0].reason = "GPU not answering: lost";
    std::swap(after[0].uuid, after[1].uuid);  // rediscovered in another order
    after[1].healthy = false;
    after[1].reason = before[0].reason;
    EXPECT_TRUE(health_notices(before, after, {}).empty());
}

TEST(NodeHealthNotices, AnUnhealthyGpuAtStartIsReportedAndTheActionFollowsTheClass) {
    auto after = fleet(1);
    after[0].healthy = false;
    after[0].reason = "XID 94 (contained ECC error); recovers after 5m without another critical XID";
    auto n = health_notices({}, after, {});
    ASSERT_EQ(n.size(), 1u);
    EXPECT_NE(n[0].message.find("Action: none unless it repeats"), std::string::npos) << n[0].message;
    after[0].reason = "GPU not answering: GPU is lost";
    n = health_notices({}, after, {});
    EXPECT_NE(n[0].message.find("XID 79"), std::string::npos) << n[0].message;
}

TEST(NodeHealthNotices, MigDevicesOnTheirOwnWhileTheirGpuIsHealthy) {
    auto before = fleet(1), after = fleet(1);
    after[0].unhealthy_migs["MIG-a"] = "XID 94 (contained ECC error); recovers after 5m without another critical "
                                       "XID on GPU instance 1 compute instance 0";
    auto n = health_notices(before, after, {});
    ASSERT_EQ(n.size(), 1u);
    EXPECT_EQ(n[0].reason, "GPUUnhealthy");
    EXPECT_TRUE(n[0].message.starts_with("MIG device MIG-a on GPU 0 (GPU-0) is Unhealthy: XID 94")) << n[0].message;
    n = health_notices(after, before, {});
    ASSERT_EQ(n.size(), 1u);
    EXPECT_EQ(n[0].message, "MIG device MIG-a on GPU 0 (GPU-0) is Healthy again");
    // While the whole GPU is Unhealthy its MIG devices add nothing.
    auto down = after;
    down[0].healthy = false;
    down[0].reason = "XID 48 (double-bit ECC error); needs a GPU reset";
    n = health_notices(before, down, {});
    EXPECT_EQ(n.size(), 1u);
}

TEST(NodeHealthNotices, TheAnnotationHoldsEveryGpuAndReasonsOnlyWhenUnhealthy) {
    auto h = fleet(2);
    h[1].healthy = false;
    h[1].reason = "r";
    h[0].unhealthy_migs["MIG-a"] = "m";
    auto j = nlohmann::json::parse(health_annotation(h));
    EXPECT_EQ(j["GPU-0"], nlohmann::json({{"index", 0}, {"healthy", true}, {"unhealthyMigs", {{"MIG-a", "m"}}}}));
    EXPECT_EQ(j["GPU-1"], nlohmann::json({{"index", 1}, {"healthy", false}, {"reason", "r"}}));
}

TEST(NodeHealthNotices, MpsDaemonDownAndUp) {
    auto down = mps_notice("nvidia.com/gpu", false, "no pipe", 8);
    EXPECT_EQ(down.type, "Warning");
    EXPECT_EQ(down.reason, "GPUUnhealthy");
    EXPECT_NE(down.message.find("its 8 replicas are Unhealthy"), std::string::npos);
    EXPECT_EQ(mps_notice("nvidia.com/gpu", true, "", 8).reason, "GPUHealthy");
}
