// The exporter on an MPS node: kgpu_mps_* from the daemon's status (limits, up, restarts), and
// pods on MPS replicas labelled as pods on time-sliced ones (one series per pod and replica with
// --kubernetes-virtual-gpus), against the simulator, the stand-in and a fake PodResources.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "deviceplugin/plugin_fixture.h"
#include "metrics_text.h"
#include "support/fake_pod_resources.h"

namespace kgpu::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

TEST(MpsExporter, LimitsDaemonStateAndPodsOnReplicas) {
    TempDir dir;
    const std::string root = dir.path() + "/mps";
    const std::string cfg = dir.write("config.yaml",
                                      "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n"
                                      "      replicas: 4\n");
    const std::map<std::string, std::string> env{{"KGPU_SIM_NODE", sim_fixture("dgx-h100.yaml")}};
    ChildProcess daemon({KGPU_BINARY, "mps-control-daemon", "--config-file", cfg, "--nvml-library", KGPU_SIM_LIBRARY,
                         "--mps-root", root, "--mps-control-binary", KGPU_MPS_CONTROL_SIM},
                        env);
    ASSERT_TRUE(eventually([&] { return fs::exists(root + "/.ready"); })) << daemon.err();

    // Two pods on replicas 0 and 1 of GPU 3, by the IDs the plugin advertises.
    SimIds sim;
    sim.load("dgx-h100.yaml");
    FakePodResources pr(dir.path() + "/pod-resources.sock");
    ASSERT_TRUE(pr.start());
    pr.add_pod("ml", "mps-a", "main", "nvidia.com/gpu", {sim.uuid("3::0")});
    pr.add_pod("ml", "mps-b", "main", "nvidia.com/gpu", {sim.uuid("3::1")});

    ChildProcess exporter({KGPU_BINARY, "exporter", "--address", "127.0.0.1:0", "--collect-interval", "100",
                           "--nvml-library", KGPU_SIM_LIBRARY, "--mps-root", root, "--kubernetes",
                           "--pod-resources-kubelet-socket", dir.path() + "/pod-resources.sock",
                           "--container-runtime-endpoint", "unix://" + dir.path() + "/no-cri.sock",
                           "--kubernetes-virtual-gpus", "--ready-file", dir.path() + "/ready"},
                          env);
    const int port = wait_for_ready_port(exporter, dir.path() + "/ready");
    ASSERT_GT(port, 0) << exporter.err();
    auto scrape = [&] { return parse_metrics(http_request(port, "GET", "/metrics").body); };
    const std::map<std::string, std::string> res{{"resource", "nvidia.com/gpu"}};

    ParsedMetrics m;
    ASSERT_TRUE(eventually([&] {
        m = scrape();
        return m.value("kgpu_mps_daemon_up", res) == 1.0;
    }));
    EXPECT_TRUE(m.errors.empty()) << m.errors.front();
    EXPECT_EQ(m.value("kgpu_mps_active_thread_percentage", res), 25.0);
    EXPECT_EQ(m.value("kgpu_mps_daemon_restarts_total", res), 0.0);
    EXPECT_EQ(m.find("kgpu_mps_pinned_memory_limit_bytes").size(), 8u);
    EXPECT_EQ(m.value("kgpu_mps_pinned_memory_limit_bytes",
                      {{"resource", "nvidia.com/gpu"}, {"gpu", "3"}, {"UUID", sim.uuid("3")}}),
              double(20389ull << 20));
    EXPECT_EQ(m.type["kgpu_mps_daemon_restarts_total"], "counter");
    // Each pod on its replica of GPU 3, as for time-slicing.
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "3"}, {"pod", "mps-a"}, {"vgpu", "0"}}).size(), 1u);
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "3"}, {"pod", "mps-b"}, {"vgpu", "1"}}).size(), 1u);

    // The daemon dies and is restarted: the metrics follow.
    std::ifstream pidfile(root + "/nvidia.com/gpu/pipe/nvidia-cuda-mps-control.pid");
    pid_t pid = 0;
    pidfile >> pid;
    ASSERT_GT(pid, 0);
    ::kill(pid, SIGKILL);
    ASSERT_TRUE(eventually([&] {
        m = scrape();
        return m.value("kgpu_mps_daemon_restarts_total", res) == 1.0 && m.value("kgpu_mps_daemon_up", res) == 1.0;
    })) << daemon.err();

    daemon.signal(SIGTERM);
    EXPECT_EQ(daemon.wait(10000), 0);
    ASSERT_TRUE(eventually([&] { return scrape().value("kgpu_mps_daemon_up", res) == 0.0; }));
    exporter.signal(SIGTERM);
    exporter.wait(10000);
}

}  // namespace
}  // namespace kgpu::test
