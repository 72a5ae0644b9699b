// PodResourcesClient against the fake kubelet PodResources server (tests/support).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "attribution/sim_node.h"
#include "exporter/attribution.h"
#include "support/fake_cri.h"
#include "support/fake_pod_resources.h"
#include "support/process.h"

using namespace kgpu;
using exporter::DeviceTarget;
using exporter::DeviceUse;
using exporter::PodRef;
using testing::HasSubstr;

namespace {

const inventory::Node& a100_mig() {
    static const inventory::Node node = test::sim_node("a100-mig.yaml");
    return node;
}
const inventory::Node& dgx_h100() {
    static const inventory::Node node = test::sim_node("dgx-h100.yaml");
    return node;
}

int count(const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
    return n;
}

// (Designated initializers that leave a member out trip -Wmissing-field-initializers on g++ 12.)
exporter::PodResourcesOptions opts(std::string socket, std::vector<std::string> extra = {},
                                   std::chrono::milliseconds timeout = std::chrono::milliseconds(2000)) {
    exporter::PodResourcesOptions o;
    o.socket = std::move(socket);
    o.extra_resources = std::move(extra);
    o.timeout = timeout;
    return o;
}

class PodResourcesTest : public testing::Test {
protected:
    test::TempDir dir;
    std::string socket = dir.path() + "/kubelet.sock";
    test::FakePodResources fake{socket};
};

TEST_F(PodResourcesTest, MapsEveryIdFormOnDgxH100) {
    const auto& n = dgx_h100();
    ASSERT_EQ(n.gpus.size(), 8u);
    ASSERT_TRUE(fake.start());
    fake.add_pod("ml", "trainer-0", "main", "nvidia.com/gpu", {n.gpus[0].uuid, n.gpus[1].uuid});
    fake.add_pod("ml", "by-index", "worker", "nvidia.com/gpu", {"2", "3"});
    // Time-slicing: two replicas of GPU 4 in one container give one DeviceUse; another pod
    // shares the same GPU.
    fake.add_pod("shared", "a", "c", "nvidia.com/gpu.shared", {n.gpus[4].uuid + "::0", n.gpus[4].uuid + "::3"});
    fake.add_pod("shared", "b", "c", "nvidia.com/gpu.shared", {"4::1"});
    // Not GPUs: ignored even though the ID would resolve.
    fake.add_pod("other", "nic", "c", "example.com/sriov", {"5"});

    exporter::PodResourcesClient client(opts(socket));
    auto uses = client.list(n);
    ASSERT_TRUE(uses) << uses.error().message;
    const std::vector<DeviceUse> want{
        {DeviceTarget{0, std::nullopt}, PodRef{"trainer-0", "ml", "main"}},
        {DeviceTarget{1, std::nullopt}, PodRef{"trainer-0", "ml", "main"}},
        {DeviceTarget{2, std::nullopt}, PodRef{"by-index", "ml", "worker"}},
        {DeviceTarget{3, std::nullopt}, PodRef{"by-index", "ml", "worker"}},
        {DeviceTarget{4, std::nullopt}, PodRef{"a", "shared", "c"}, "0"},
        {DeviceTarget{4, std::nullopt}, PodRef{"b", "shared", "c"}, "1"},
    };
    EXPECT_EQ(*uses, want);
}

TEST_F(PodResourcesTest, MapsMigDevicesOnA100Mig) {
    const auto& n = a100_mig();
    ASSERT_EQ(n.gpus.size(), 4u);
    ASSERT_TRUE(fake.start());
    fake.add_pod("ml", "small", "c", "nvidia.com/mig-1g.10gb", {"MIG-4b69808b-66a3-1662-f86c-3b76eedd0860"});
    fake.add_pod("ml", "big", "c", "nvidia.com/mig-3g.40gb", {"1:0"});
    fake.add_pod("ml", "whole", "c", "nvidia.com/gpu", {n.gpus[2].uuid});
    // The single strategy advertises MIG devices as nvidia.com/gpu.
    fake.add_pod("ml", "single", "c", "nvidia.com/gpu", {"MIG-92710a87-5682-21ae-58be-98927cf50673"});

    exporter::PodResourcesClient client(opts("unix://" + socket));
    auto uses = client.list(n);
    ASSERT_TRUE(uses) << uses.error().message;
    const std::vector<DeviceUse> want{
        {DeviceTarget{0, 7u}, PodRef{"small", "ml", "c"}},
        {DeviceTarget{1, 2u}, PodRef{"big", "ml", "c"}},
        {DeviceTarget{1, 14u}, PodRef{"single", "ml", "c"}},
        {DeviceTarget{2, std::nullopt}, PodRef{"whole", "ml", "c"}},
    };
    EXPECT_EQ(*uses, want);
}

TEST_F(PodResourcesTest, RenamedResourcesCountWhenListed) {
    const auto& n = dgx_h100();
    ASSERT_EQ(n.gpus.size(), 8u);
    ASSERT_TRUE(fake.start());
    fake.add_pod("ml", "p", "c", "acme.com/gpu-slice", {"6::1"});
    {
        exporter::PodResourcesClient client(opts(socket));
        auto uses = client.list(n);
        ASSERT_TRUE(uses) << uses.error().message;
        EXPECT_TRUE(uses->empty());
    }
    exporter::PodResourcesClient client(opts(socket, {"acme.com/gpu-slice"}));
    auto uses = client.list(n);
    ASSERT_TRUE(uses) << uses.error().message;
    ASSERT_EQ(uses->size(), 1u);
    EXPECT_EQ((*uses)[0].target, (DeviceTarget{6, std::nullopt}));
}

TEST_F(PodResourcesTest, UnknownIdsAreSkippedAndLoggedOnce) {
    const auto& n = dgx_h100();
    ASSERT_EQ(n.gpus.size(), 8u);
    ASSERT_TRUE(fake.start());
    fake.add_pod("ml", "p", "c", "nvidia.com/gpu", {"GPU-not-on-this-node", "0", "42"});
    exporter::PodResourcesClient client(opts(socket));
    testing::internal::CaptureStderr();
    for (int i = 0; i < 3; ++i) {
        auto uses = client.list(n);
        ASSERT_TRUE(uses) << uses.error().message;
        ASSERT_EQ(uses->size(), 1u);
        EXPECT_EQ((*uses)[0].target.gpu_index, 0u);
    }
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(count(err, "'GPU-not-on-this-node'"), 1) << err;
    EXPECT_EQ(count(err, "'42'"), 1) << err;
    EXPECT_THAT(err, HasSubstr("pod ml/p, container c"));
}

TEST_F(PodResourcesTest, EmptyListIsNotAnError) {
    ASSERT_TRUE(fake.start());
    exporter::PodResourcesClient client(opts(socket));
    auto uses = client.list(dgx_h100());
    ASSERT_TRUE(uses) << uses.error().message;
    EXPECT_TRUE(uses->empty());
}

TEST_F(PodResourcesTest, MissingSocketNamesItLogsOnceAndRecovers) {
    const auto& n = dgx_h100();
    ASSERT_EQ(n.gpus.size(), 8u);
    exporter::PodResourcesClient client(opts(socket, {}, std::chrono::milliseconds(500)));
    testing::internal::CaptureStderr();
    for (int i = 0; i < 3; ++i) {
        auto uses = client.list(n);
        ASSERT_FALSE(uses);
        EXPECT_THAT(uses.error().message, HasSubstr(socket));
        EXPECT_TRUE(uses.error().code == Code::unavailable || uses.error().code == Code::timeout)
            << uses.error().message;
    }
    // The kubelet comes up: the same client (same channel) answers within a generous deadline.
    fake.add_pod("ml", "p", "c", "nvidia.com/gpu", {"1"});
    ASSERT_TRUE(fake.start());
    Result<std::vector<DeviceUse>> uses = fail(Code::internal, "not tried");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
        uses = client.list(n);
        if (uses) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const std::string err = testing::internal::GetCapturedStderr();
    RecordProperty("stderr", err);  // in --gtest_output=xml, to read the log lines
    ASSERT_TRUE(uses) << uses.error().message;
    ASSERT_EQ(uses->size(), 1u);
    EXPECT_EQ((*uses)[0].pod, (PodRef{"p", "ml", "c"}));
    // One warning for the failure (however many calls failed, as long as the failure stayed the
    // same kind), one line for the recovery.
    EXPECT_GE(count(err, "warn PodResources List on " + socket), 1) << err;
    EXPECT_LE(count(err, "warn PodResources List on " + socket), 2) << err;
    EXPECT_EQ(count(err, "answers again"), 1) << err;
}

TEST_F(PodResourcesTest, ASocketWithoutTheApiIsNotSupported) {
    // Something answers gRPC on the socket, but not PodResources (here: the CRI fake).
    test::FakeCri other(socket);
    ASSERT_TRUE(other.start());
    exporter::PodResourcesClient client(opts(socket));
    auto uses = client.list(dgx_h100());
    ASSERT_FALSE(uses);
    EXPECT_EQ(uses.error().code, Code::not_supported) << uses.error().message;
    EXPECT_THAT(uses.error().message, HasSubstr(socket));
}

TEST_F(PodResourcesTest, EmptySocketIsAnError) {
    exporter::PodResourcesClient client(opts(""));
    auto uses = client.list(dgx_h100());
    ASSERT_FALSE(uses);
    EXPECT_EQ(uses.error().code, Code::invalid_argument);
}

}  // namespace
