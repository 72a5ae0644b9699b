// MPS end to end, as on a node: `kgpu mps-control-daemon` (the simulator and its stand-in
// nvidia-cuda-mps-control) and `kgpu device-plugin` on NVIDIA's MPS config, through the fake
// kubelet (issue #18, "Done when"): 32 devices on dgx-h100 with replicas 4, the daemon's limits in
// control.log, the pipe directory in Allocate, Unhealthy within 1 s of the daemon dying and
// Healthy again after its restart.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "deviceplugin/plugin_fixture.h"

namespace kgpu::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ::testing::Contains;
using ::testing::HasSubstr;

const std::string kStandIn = KGPU_MPS_CONTROL_SIM;
const std::string kGpu = "nvidia.com/gpu";

std::vector<std::string> lines(const fs::path& p) {
    std::vector<std::string> out;
    std::ifstream in(p);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
}

size_t healthy(const Devices& d) {
    size_t n = 0;
    for (const auto& [id, s] : d) n += s.health == "Healthy";
    return n;
}

class MpsPlugin : public PluginFixture {
protected:
    std::string root_ = aux_.path() + "/mps";
    std::string cfg_;
    std::unique_ptr<ChildProcess> daemon_;

    void SetUp() override {
        PluginFixture::SetUp();
        // NVIDIA's README MPS example, with 4 replicas.
        cfg_ = config("version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n");
    }
    void TearDown() override {
        if (daemon_ && daemon_->running()) {
            daemon_->signal(SIGTERM);
            daemon_->wait(10000);
        }
        if (HasFailure() && daemon_) std::cerr << "---- mps-control-daemon stderr ----\n" << daemon_->err();
        if (pid_t p = daemon_pid(); p > 0) ::kill(p, SIGKILL);
        PluginFixture::TearDown();
    }
    void start_daemon() {
        daemon_ = std::make_unique<ChildProcess>(
            std::vector<std::string>{KGPU_BINARY, "mps-control-daemon", "--config-file", cfg_, "--nvml-library",
                                     KGPU_SIM_LIBRARY, "--mps-root", root_, "--mps-control-binary", kStandIn},
            std::map<std::string, std::string>{{"KGPU_SIM_NODE", sim_fixture("dgx-h100.yaml")}, {"KGPU_SIM_EVENTS", events_}});
    }
    void start_plugin() {
        start("dgx-h100.yaml", {"--config-file", cfg_, "--mps-root", root_, "--mps-control-binary", kStandIn});
    }
    fs::path pipe() const { return fs::path(root_) / kGpu / "pipe"; }
    fs::path control_log() const { return fs::path(root_) / kGpu / "log" / "control.log"; }
    std::string last_control_command() const {
        auto log = lines(control_log());
        return log.empty() ? std::string() : log.back();
    }
    pid_t daemon_pid() const {
        std::ifstream in(pipe() / "nvidia-cuda-mps-control.pid");
        pid_t p = 0;
        in >> p;
        return p;
    }
    bool all_healthy(size_t n, std::chrono::milliseconds t = 20s) {
        return kubelet_->wait_devices(kGpu, [&](const Devices& d) { return d.size() == n && healthy(d) == n; }, t);
    }
};

TEST_F(MpsPlugin, DgxH100WithFourReplicasServesAndHealsAsTheIssueSays) {
    start_daemon();
    ASSERT_TRUE(eventually([&] { return fs::exists(fs::path(root_) / ".ready"); })) << daemon_->err();
    start_plugin();

    // 8 GPUs x 4 replicas, Healthy once the daemon answers.
    auto devs = registered(kGpu, 32);
    ASSERT_TRUE(all_healthy(32)) << plugin_->err();

    // The daemon's limits, as NVIDIA's daemon sends them: a quarter of the threads, and a quarter
    // of each GPU's 81559 MiB pinned.
    auto log = lines(control_log());
    EXPECT_THAT(log, Contains("set_default_active_thread_percentage 25"));
    for (int i = 0; i < 8; ++i) EXPECT_THAT(log, Contains(fmt::format("set_default_device_pinned_mem_limit {} 20389M", i)));
    // Every GPU went to EXCLUSIVE_PROCESS through NVML (the simulator shares it through its events file).
    auto events = lines(events_);
    for (int i = 0; i < 8; ++i) EXPECT_THAT(events, Contains(fmt::format("computemode {} 3", i)));

    // Allocate: the pipe directory, and the shared /dev/shm.
    const std::string id = sim_.uuid("3::2");
    v1beta1::AllocateResponse resp;
    ASSERT_TRUE(kubelet_->allocate(kGpu, {{id}}, &resp).ok());
    ASSERT_EQ(resp.container_responses_size(), 1);
    const auto& c = resp.container_responses(0);
    EXPECT_EQ(c.envs().at("CUDA_MPS_PIPE_DIRECTORY"), "/mps/nvidia.com/gpu/pipe");
    EXPECT_EQ(c.envs().at("NVIDIA_VISIBLE_DEVICES"), sim_.uuid("3"));
    std::map<std::string, std::string> mounts;
    for (const auto& m : c.mounts()) mounts[m.container_path()] = m.host_path();
    EXPECT_EQ(mounts["/mps/nvidia.com/gpu/pipe"], pipe().string());
    EXPECT_EQ(mounts["/dev/shm"], root_ + "/shm");
    // failRequestsGreaterThanOne is true for MPS (NVIDIA's default).
    auto two = kubelet_->allocate(kGpu, {{sim_.uuid("3::0"), sim_.uuid("3::1")}}, &resp);
    EXPECT_FALSE(two.ok());
    EXPECT_THAT(two.error_message(), HasSubstr("maximum request size for shared resources is 1"));

    // The daemon dies: every replica Unhealthy within 1 s (measured from the kill to the
    // kubelet's view), then Healthy again after kgpu mps-control-daemon restarted it.
    const pid_t first = daemon_pid();
    ASSERT_GT(first, 0);
    const auto killed = std::chrono::steady_clock::now();
    ::kill(first, SIGKILL);
    ASSERT_TRUE(kubelet_->wait_devices(kGpu, [](const Devices& d) { return healthy(d) == 0; }, 10s)) << plugin_->err();
    const auto took = std::chrono::steady_clock::now() - killed;
    EXPECT_LT(took, 1s) << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
    std::cerr << "MPS daemon killed -> 32 devices Unhealthy in the kubelet after "
              << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms\n";
    EXPECT_EQ(kubelet_->allocatable(kGpu), 0);
    EXPECT_FALSE(kubelet_->allocate(kGpu, {{id}}, &resp).ok());
    ASSERT_TRUE(all_healthy(32)) << daemon_->err() << plugin_->err();
    EXPECT_NE(daemon_pid(), first);
    log = lines(control_log());
    EXPECT_EQ(std::count(log.begin(), log.end(), std::string("set_default_active_thread_percentage 25")), 2);
    EXPECT_THAT(daemon_->err(), HasSubstr("control daemon down"));
    EXPECT_THAT(plugin_->err(), HasSubstr("its devices are Unhealthy"));
    EXPECT_TRUE(kubelet_->allocate(kGpu, {{id}}, &resp).ok());

    // SIGTERM: quit, and nothing more; the GPUs go back to DEFAULT; the devices Unhealthy.
    daemon_->signal(SIGTERM);
    EXPECT_EQ(daemon_->wait(10000), 0);
    EXPECT_EQ(lines(control_log()).back(), "quit");
    events = lines(events_);
    EXPECT_EQ(events.back(), "computemode 7 0");
    EXPECT_TRUE(kubelet_->wait_devices(kGpu, [](const Devices& d) { return healthy(d) == 0; }, 10s));
}

// NVIDIA's plugin waits for the daemon at start; kgpu's registers at once and keeps the devices
// Unhealthy until the daemon answers (capacity 32, allocatable 0 meanwhile).
TEST_F(MpsPlugin, ThePluginWaitsForTheDaemon) {
    start_plugin();
    auto devs = registered(kGpu, 32);
    EXPECT_EQ(healthy(devs), 0u);
    EXPECT_EQ(kubelet_->allocatable(kGpu), 0);
    v1beta1::AllocateResponse resp;
    EXPECT_FALSE(kubelet_->allocate(kGpu, {{sim_.uuid("0::0")}}, &resp).ok());
    start_daemon();
    ASSERT_TRUE(all_healthy(32)) << plugin_->err() << daemon_->err();
    EXPECT_THAT(plugin_->err(), HasSubstr("the control daemon answers"));
}

// A daemon that stops answering (SIGSTOP) is as good as dead: Unhealthy within 1 s, killed and
// started again, Healthy after.
TEST_F(MpsPlugin, ADaemonThatStopsAnsweringIsReplaced) {
    start_daemon();
    ASSERT_TRUE(eventually([&] { return fs::exists(fs::path(root_) / ".ready"); })) << daemon_->err();
    start_plugin();
    registered(kGpu, 32);
    ASSERT_TRUE(all_healthy(32)) << plugin_->err();
    const pid_t first = daemon_pid();
    const auto stopped = std::chrono::steady_clock::now();
    ::kill(first, SIGSTOP);
    ASSERT_TRUE(kubelet_->wait_devices(kGpu, [](const Devices& d) { return healthy(d) == 0; }, 10s)) << plugin_->err();
    const auto took = std::chrono::steady_clock::now() - stopped;
    EXPECT_LT(took, 1s) << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
    std::cerr << "MPS daemon stopped -> 32 devices Unhealthy in the kubelet after "
              << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms\n";
    ASSERT_TRUE(all_healthy(32)) << daemon_->err();
    EXPECT_NE(daemon_pid(), first);
    EXPECT_THAT(daemon_->err(), HasSubstr("is stopped and cannot answer"));
}

// SIGHUP re-reads the config: the daemons get quit and start again with the new limits; the
// plugin follows the restart (Unhealthy while it is down, Healthy after).
TEST_F(MpsPlugin, TheDaemonReloadsItsConfigOnSighup) {
    start_daemon();
    ASSERT_TRUE(eventually([&] { return fs::exists(fs::path(root_) / ".ready"); })) << daemon_->err();
    const pid_t first = daemon_pid();
    aux_.write("config.yaml", "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n");
    daemon_->signal(SIGHUP);
    ASSERT_TRUE(eventually([&] { return last_control_command() == "set_default_active_thread_percentage 50"; })) << daemon_->err();
    auto log = lines(control_log());
    auto quit = std::find(log.begin(), log.end(), "quit");
    ASSERT_NE(quit, log.end());
    EXPECT_THAT(std::vector<std::string>(quit, log.end()), Contains("set_default_device_pinned_mem_limit 0 40779M"));
    EXPECT_NE(daemon_pid(), first);
    EXPECT_TRUE(daemon_->running());
    EXPECT_THAT(daemon_->err(), HasSubstr("re-reading the configuration"));
}

// A SIGHUP whose config does not load (a node label naming a bad config, an edit) keeps the
// running daemons: nothing is quit, the process stays up, and a later good config applies.
TEST_F(MpsPlugin, ABadConfigOnSighupKeepsTheRunningDaemons) {
    start_daemon();
    ASSERT_TRUE(eventually([&] { return fs::exists(fs::path(root_) / kGpu / ".started"); })) << daemon_->err();
    const pid_t first = daemon_pid();
    aux_.write("config.yaml", "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 1\n");
    daemon_->signal(SIGHUP);
    ASSERT_TRUE(eventually([&] { return daemon_->err().find("the daemons keep running on the last good one") != std::string::npos; }))
        << daemon_->err();
    EXPECT_TRUE(daemon_->running());
    EXPECT_EQ(daemon_pid(), first);
    EXPECT_THAT(lines(control_log()), ::testing::Not(Contains("quit")));
    EXPECT_TRUE(fs::exists(fs::path(root_) / kGpu / ".started"));
    aux_.write("config.yaml", "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n");
    daemon_->signal(SIGHUP);
    ASSERT_TRUE(eventually([&] { return last_control_command() == "set_default_active_thread_percentage 50"; })) << daemon_->err();
    EXPECT_NE(daemon_pid(), first);
}

// MPS shares whole GPUs: on a node whose MIG devices the strategy serves, both refuse to start.
TEST_F(MpsPlugin, MigDevicesAreRefused) {
    auto r = run_process({KGPU_BINARY, "device-plugin", "--device-plugin-path", dir_.path(), "--config-file", cfg_,
                          "--mig-strategy", "single", "--nvml-library", KGPU_SIM_LIBRARY},
                         {{"KGPU_SIM_NODE", sim_fixture("a100-mig-uniform.yaml")}});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("not supported for MIG devices"));
    r = run_process({KGPU_BINARY, "mps-control-daemon", "--config-file", cfg_, "--mig-strategy", "single",
                     "--nvml-library", KGPU_SIM_LIBRARY, "--mps-root", root_, "--mps-control-binary", kStandIn},
                    {{"KGPU_SIM_NODE", sim_fixture("a100-mig-uniform.yaml")}});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("not supported for MIG devices"));
}

}  // namespace
}  // namespace kgpu::test
