// The health monitor on its own (health.h) against the simulator, in process: how often it probes
// the GPUs. Issue #23 item 9: probing every GPU once a second was most of an idle plugin's CPU;
// while everything is Healthy the probes follow the slow timer, and an XID brings the fast one
// (recovery is decided by probes) until everything is Healthy again.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <thread>

#include "deviceplugin/health.h"
#include "inventory/discovery.h"
#include "nvml/library.h"
#include "support/process.h"
#include "support/expect.h"

using namespace std::chrono_literals;
using kgpu::deviceplugin::GpuHealth;
using kgpu::deviceplugin::HealthConfig;
using kgpu::deviceplugin::HealthMonitor;
using kgpu::test::eventually;

namespace {

// The simulator's t4x4 node in this process, with an events file the test appends to.
struct SimNode {
    kgpu::test::TempDir dir;
    std::string events = dir.path() + "/events";
    std::optional<kgpu::nvml::Session> session;
    std::optional<kgpu::inventory::Node> node;
    std::string error;

    bool open() {
        std::ofstream(events).flush();
        ::setenv("KGPU_SIM_NODE", (std::string(KGPU_SOURCE_DIR) + "/sim/nodes/t4x4.yaml").c_str(), 1);
        ::setenv("KGPU_SIM_EVENTS", events.c_str(), 1);
        auto lib = kgpu::nvml::Library::load({KGPU_SIM_LIBRARY, "/"});
        if (!lib) return error = lib.error().message, false;
        auto s = kgpu::nvml::Session::open(*lib);
        if (!s) return error = s.error().message, false;
        session.emplace(std::move(*s));
        auto n = kgpu::inventory::discover(*session, {"/nonexistent-sysfs", false});
        if (!n) return error = n.error().message, false;
        node.emplace(std::move(*n));
        return true;
    }
    ~SimNode() { ::unsetenv("KGPU_SIM_EVENTS"); }

    std::atomic<int> unhealthy{-1};  // Unhealthy GPUs in the monitor's latest report
    // The monitor's on_change: counts the Unhealthy GPUs into `unhealthy`.
    auto counter() {
        return [this](const std::vector<GpuHealth>& h) {
            int n = 0;
            for (const auto& g : h) n += g.healthy ? 0 : 1;
            unhealthy = n;
        };
    }
    void append(const std::string& line) { std::ofstream(events, std::ios::app) << line << "\n"; }
};

// A clock the test moves (HealthMonitor::TimeSource), read by the monitor's thread.
struct ManualClock {
    std::atomic<std::chrono::steady_clock::rep> ticks{std::chrono::steady_clock::now().time_since_epoch().count()};
    HealthMonitor::TimeSource source() {
        return {[this] { return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(ticks.load())); },
                5ms};
    }
    void advance(std::chrono::steady_clock::duration d) { ticks += d.count(); }
};

// The monitor's thread has looked at the clock as it is now (two full passes of its loop since).
bool looked(const HealthMonitor& m) {
    const unsigned long p = m.passes();
    return eventually([&] { return m.passes() >= p + 2; });
}

TEST(HealthMonitor, ProbesOnTheSlowTimerWhileEverythingIsHealthyAndFastWhileSomethingIsNot) {
    SimNode sim;
    ASSERT_TRUE(sim.open()) << sim.error;
    HealthConfig policy;
    policy.recovery_period = 1s;
    ManualClock clock;
    // Fast: 20 ms; slow: an hour.
    HealthMonitor monitor(*sim.session, *sim.node, policy, sim.counter(), 20ms, {}, 1h);
    monitor.set_time_source(clock.source());
    monitor.start();
    EXPECT_EQ(monitor.probe_rounds(), 1u) << "start() probes every GPU once";
    // Calm: 59 minutes pass without a probe (the old cadence probed every 20 ms); the hour brings one.
    clock.advance(59min);
    ASSERT_TRUE(looked(monitor));
    EXPECT_EQ(monitor.probe_rounds(), 1u);
    clock.advance(1min);
    ASSERT_TRUE(eventually([&] { return monitor.probe_rounds() == 2; })) << monitor.probe_rounds();

    // A recoverable XID: Unhealthy at once (the event), then a probe every 20 ms, which decides
    // the recovery after the quiet period; then the slow timer is back.
    sim.append("xid 2 94");
    ASSERT_TRUE(eventually([&] { return sim.unhealthy == 1; })) << "the XID event";
    for (int step = 0; step < 3; ++step) {
        const unsigned long before = monitor.probe_rounds();
        clock.advance(20ms);
        ASSERT_TRUE(eventually([&] { return monitor.probe_rounds() == before + 1; })) << "step " << step;
        ASSERT_TRUE(looked(monitor));
        EXPECT_EQ(monitor.probe_rounds(), before + 1) << "one probe per 20 ms";
    }
    EXPECT_EQ(sim.unhealthy, 1) << "recovered before the quiet period";
    clock.advance(1s);
    ASSERT_TRUE(eventually([&] { return sim.unhealthy == 0; })) << "recovery after the quiet period";
    const unsigned long after = monitor.probe_rounds();
    clock.advance(59min);
    ASSERT_TRUE(looked(monitor));
    EXPECT_EQ(monitor.probe_rounds(), after) << "the slow timer again";
    monitor.stop();
}

// A reset right after a reset-class XID, before the next probe, still counts: the pending state
// the XID left is read when the XID arrives. (KubeE2E.XidHealth once failed this way: a reset
// ~0.5 s after XID 48 on a busy machine, no probe in between, and the GPU stayed Unhealthy.)
TEST(HealthMonitor, AResetBeforeTheNextProbeStillCounts) {
    SimNode sim;
    ASSERT_TRUE(sim.open()) << sim.error;
    ManualClock clock;  // stands still: no probe comes until the test moves it
    HealthMonitor monitor(*sim.session, *sim.node, HealthConfig{}, sim.counter(), 2s, {}, 1h);
    monitor.set_time_source(clock.source());
    monitor.start();
    sim.append("xid 1 48");  // double-bit ECC: remapped rows pending
    ASSERT_TRUE(eventually([&] { return sim.unhealthy == 1; })) << "the XID event";
    sim.append("restore 1");  // the reset: nothing pending any more
    ASSERT_TRUE(eventually([&] {  // the simulator has applied it (it reads its events file as NVML is called)
        auto rows = sim.session->device_by_index(1)->remapped_rows();
        return rows && !rows->pending;
    }));
    ASSERT_TRUE(looked(monitor));
    EXPECT_EQ(monitor.probe_rounds(), 1u) << "a probe came between the XID and the reset";
    clock.advance(2s);  // the next probe
    EXPECT_TRUE(eventually([&] { return sim.unhealthy == 0; })) << "the reset went unseen";
    monitor.stop();
}

}  // namespace

// A GPU that stopped answering and came back: the NVML layer refuses the handle from before (#24
// item 9, handle generations), the monitor takes a new one and registers its events with it, so
// an XID after the return still reaches it.
TEST(HealthMonitor, AGpuThatCameBackIsWatchedThroughANewHandle) {
    SimNode sim;
    ASSERT_TRUE(sim.open()) << sim.error;
    ManualClock clock;
    HealthMonitor monitor(*sim.session, *sim.node, HealthConfig{}, sim.counter(), 20ms, {}, 1h);
    monitor.set_time_source(clock.source());
    monitor.start();
    auto before = sim.session->device_by_index(3);
    ASSERT_TRUE(before);
    sim.append("lost 3");
    ASSERT_TRUE(eventually([&] { return sim.unhealthy == 1; })) << "XID 79";
    sim.append("restore 3");
    ASSERT_TRUE(eventually([&] {  // the simulator applied it: a handle taken now answers
        auto d = sim.session->device_by_index(3);
        return d && d->uuid().has_value();
    }));
    clock.advance(20ms);
    ASSERT_TRUE(eventually([&] { return sim.unhealthy == 0; })) << "the GPU answers again";
    auto refused = before->uuid();
    ASSERT_FALSE(refused) << "a handle from before it was lost answered";
    EXPECT_EQ(refused.error().code, kgpu::Code::stale);
    EXPECT_EQ(monitor.handles_retaken(), 1u) << "the monitor's handle from before was not replaced";
    sim.append("xid 3 94");
    EXPECT_TRUE(eventually([&] { return sim.unhealthy == 1; })) << "no event after the GPU came back";
    monitor.stop();
}
