// Every XID class of the health policy end to end: the simulator's events file -> NVML events
// and probes -> the plugin's health monitor -> ListAndWatch as the (fake) kubelet sees it.
// Classes (facts/diagnostics.md "Recovery classes", NVIDIA's ignore list):
//   ignored 13 31 43 45 68 109 · recoverable 92 94 ·
//   reset 48 62 63 64 74 79 95 119 120 140 143 and any XID nobody classified.
#include <gmock/gmock.h>

#include "deviceplugin/plugin_fixture.h"

using namespace std::chrono_literals;
using kgpu::test::Devices;
using kgpu::test::PluginFixture;
using ::testing::HasSubstr;

namespace {

constexpr const char* kGpu = "nvidia.com/gpu";

class HealthClassesTest : public PluginFixture {
protected:
    // Sends reset-class `xids` (one per GPU, GPU i gets xids[i]; GPU 7 of dgx-h100 is left
    // alone as the marker), checks every GPU stays Unhealthy past the recovery period although
    // probes in between are clean, then resets each and checks they are Healthy again.
    void check_reset_class(const std::vector<unsigned>& xids) {
        ASSERT_LT(xids.size(), 8u) << "GPU 7 is the marker";
        std::set<std::string> all;
        for (size_t i = 0; i < xids.size(); ++i) {
            event("xid " + std::to_string(i) + " " + std::to_string(xids[i]));
            all.insert(std::to_string(i));
        }
        ASSERT_TRUE(unhealthy_becomes(kGpu, all)) << "after XIDs";
        ASSERT_TRUE(quiet_period_passed(kGpu, "7"));
        EXPECT_EQ(sim_.unhealthy(kubelet_->devices(kGpu)), all) << "a reset-class XID recovered without a reset";
        // What a reset looks like to NVML: the pending state the XID left clears (`restore`), or,
        // for XIDs that leave no trace, the GPU is seen gone (`lost`) and back (`restore`).
        std::vector<unsigned> lost;
        for (size_t i = 0; i < xids.size(); ++i) {
            const unsigned x = xids[i];
            // XIDs the simulator leaves pending state for (remapped rows, recovery action).
            const bool trace = x == 48 || x == 63 || x == 64 || x == 95 || x == 119 || x == 120 || x == 140 || x == 143;
            if (!trace) event("lost " + std::to_string(i)), lost.push_back(static_cast<unsigned>(i));
        }
        for (unsigned i : lost) ASSERT_TRUE(seen_gone(i)) << "no probe saw GPU " << i << " gone";
        for (size_t i = 0; i < xids.size(); ++i) event("restore " + std::to_string(i));
        ASSERT_TRUE(unhealthy_becomes(kGpu, {})) << "after the resets";
    }
};

TEST_F(HealthClassesTest, Xid79StaysUnhealthyUntilTheGpuWasReset) {
    start("t4x4.yaml", {}, quick_recovery());
    registered(kGpu, 4);
    event("xid 1 79");  // the event only: the GPU keeps answering and shows nothing pending
    ASSERT_TRUE(unhealthy_becomes(kGpu, {"1"}));
    ASSERT_TRUE(quiet_period_passed(kGpu, "2"));  // clean probes for longer than the recovery period
    EXPECT_EQ(sim_.unhealthy(kubelet_->devices(kGpu)), (std::set<std::string>{"1"}));
    v1beta1::AllocateResponse resp;
    EXPECT_EQ(kubelet_->allocate(kGpu, {{sim_.uuid("1")}}, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    // The GPU falls off the bus and comes back after a reset.
    event("lost 1");
    ASSERT_TRUE(seen_gone(1));
    EXPECT_EQ(sim_.unhealthy(kubelet_->devices(kGpu)), (std::set<std::string>{"1"}));
    event("restore 1");
    ASSERT_TRUE(unhealthy_becomes(kGpu, {}));
    EXPECT_THAT(plugin_->err(), HasSubstr("GPU has fallen off the bus"));
}

TEST_F(HealthClassesTest, Xid79OnAMigDeviceTakesTheWholeGpuUntilItWasReset) {
    start("a100-mig.yaml", {"--mig-strategy", "mixed"}, quick_recovery());
    registered("nvidia.com/mig-1g.10gb", 9);
    registered("nvidia.com/mig-3g.40gb", 1);
    event("xid 1:2 79");  // reported by one MIG device of GPU 1: the whole GPU is off the bus
    ASSERT_TRUE(unhealthy_becomes("nvidia.com/mig-1g.10gb", {"1:2", "1:3"}));
    ASSERT_TRUE(unhealthy_becomes("nvidia.com/mig-3g.40gb", {"1:0"}));
    ASSERT_TRUE(quiet_period_passed(kGpu, "2"));
    EXPECT_EQ(sim_.unhealthy(kubelet_->devices("nvidia.com/mig-1g.10gb")), (std::set<std::string>{"1:2", "1:3"}));
    EXPECT_EQ(sim_.unhealthy(kubelet_->devices("nvidia.com/mig-2g.20gb")), (std::set<std::string>{"1:1"}));
    event("lost 1");
    ASSERT_TRUE(seen_gone(1));
    event("restore 1");
    ASSERT_TRUE(unhealthy_becomes("nvidia.com/mig-1g.10gb", {}));
    ASSERT_TRUE(unhealthy_becomes("nvidia.com/mig-3g.40gb", {}));
    ASSERT_TRUE(unhealthy_becomes("nvidia.com/mig-2g.20gb", {}));
}

// A MIG device that was Healthy while its GPU was lost and restored has not been reset after a
// later reset-class XID of its own: it stays Unhealthy until its GPU is seen gone and back again.
TEST_F(HealthClassesTest, ResetClassXidOnAMigDeviceAfterItsGpuWasLostAndRestoredWaitsForANewReset) {
    start("a100-mig.yaml", {"--mig-strategy", "mixed"}, quick_recovery());
    registered("nvidia.com/mig-1g.10gb", 9);
    const std::set<std::string> gpu0 = {"0:0", "0:1", "0:2", "0:3", "0:4", "0:5", "0:6"};
    event("lost 0");
    ASSERT_TRUE(unhealthy_becomes("nvidia.com/mig-1g.10gb", gpu0));
    ASSERT_TRUE(seen_gone(0));
    event("restore 0");
    ASSERT_TRUE(unhealthy_becomes("nvidia.com/mig-1g.10gb", {}));
    event("xid 0:0 74");
    ASSERT_TRUE(unhealthy_becomes("nvidia.com/mig-1g.10gb", {"0:0"}));
    ASSERT_TRUE(quiet_period_passed(kGpu, "2"));
    EXPECT_EQ(sim_.unhealthy(kubelet_->devices("nvidia.com/mig-1g.10gb")), (std::set<std::string>{"0:0"}))
        << "a reset-class XID recovered by a reset seen before it";
    EXPECT_THAT(plugin_->err(), ::testing::Not(HasSubstr("MIG device 0:0 (" + sim_.uuid("0:0") + ") is Healthy again")));
    // A reset after the XID does count.
    event("lost 0");
    ASSERT_TRUE(seen_gone(0, 2));
    event("restore 0");
    ASSERT_TRUE(unhealthy_becomes("nvidia.com/mig-1g.10gb", {}));
}

TEST_F(HealthClassesTest, IgnoredXidsChangeNothing) {
    start("dgx-h100.yaml", {"--health-recovery-period", "1s"});
    registered(kGpu, 8);
    const int before = kubelet_->updates(kGpu);
    for (unsigned x : {13, 31, 43, 45, 68, 109}) event("xid 0 " + std::to_string(x));
    event("xid 5 94");  // a marker that does change something, after the ignored ones
    ASSERT_TRUE(unhealthy_becomes(kGpu, {"5"}));
    EXPECT_EQ(kubelet_->updates(kGpu), before + 1);
}

TEST_F(HealthClassesTest, RecoverableXidsRecoverAfterTheQuietPeriod) {
    start("dgx-h100.yaml", {}, quick_recovery());
    registered(kGpu, 8);
    event("xid 2 92\nxid 3 94");  // one write, read at once: GPU 2 does not recover before GPU 3's XID comes
    ASSERT_TRUE(unhealthy_seen(kGpu, {"2", "3"}));
    ASSERT_TRUE(unhealthy_seen(kGpu, {}));
}

TEST_F(HealthClassesTest, ResetClassXidsWaitForAResetFirstHalf) {
    start("dgx-h100.yaml", {}, quick_recovery());
    registered(kGpu, 8);
    check_reset_class({48, 62, 63, 64, 74, 79, 95});
}

TEST_F(HealthClassesTest, ResetClassXidsWaitForAResetSecondHalfAndUnknownXids) {
    start("dgx-h100.yaml", {}, quick_recovery());
    registered(kGpu, 8);
    check_reset_class({119, 120, 140, 143, 61, 999});  // 61 and 999 are in no list: treated as reset-class
}

}  // namespace
