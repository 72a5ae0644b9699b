// Idle CPU of `kgpu device-plugin` (issue #23 item 9): registered with a fake kubelet on a
// simulated node, nothing happening, CPU time used over a window (its threads' run time from
// /proc/<pid>/task/*/schedstat); the median of several runs. With env KGPU_NVIDIA_PLUGIN naming NVIDIA's
// nvidia-device-plugin binary (v0.18.2, ../shared/peers/nvidia), the same is measured for it in
// the same run, alternating with kgpu (root: it serves on the fixed path
// /var/lib/kubelet/device-plugins, so it runs in its own mount namespace where that path is the
// fake kubelet's directory). Env KGPU_IDLE_BINARY measures another kgpu binary (an earlier build).
//
//   build/release/bench/kgpu_deviceplugin_idle [seconds=30] [runs=3] [fixture.yaml]
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/fake_kubelet.h"
#include "support/process.h"

using namespace std::chrono_literals;

namespace {

// One idle measurement: starts the plugin, waits for its registration, lets it settle for a
// second, then measures CPU over `window`. Returns seconds of CPU, or -1.
double measure(bool nvidia, const std::string& binary, const std::string& node, std::chrono::seconds window) {
    kgpu::test::TempDir dir, cdi;
    kgpu::test::FakeKubelet kubelet(dir.path());
    if (!kubelet.start()) return -1;
    const std::string sim_dir = std::filesystem::path(KGPU_SIM_LIBRARY).parent_path().string();
    std::unique_ptr<kgpu::test::ChildProcess> p;
    if (nvidia) {
        // A private /var/lib with the fake kubelet's directory at NVIDIA's fixed plugin path.
        const std::string script = "mount -t tmpfs none /var/lib && mkdir -p /var/lib/kubelet/device-plugins && "
                                   "mount --bind '" + dir.path() + "' /var/lib/kubelet/device-plugins && exec '" +
                                   binary + "' --kubelet-socket /var/lib/kubelet/device-plugins/kubelet.sock";
        p = std::make_unique<kgpu::test::ChildProcess>(
            std::vector<std::string>{"/usr/bin/unshare", "-m", "/bin/sh", "-c", script},
            std::map<std::string, std::string>{{"KGPU_SIM_NODE", node}, {"LD_LIBRARY_PATH", sim_dir}});
    } else {
        p = std::make_unique<kgpu::test::ChildProcess>(
            std::vector<std::string>{binary, "device-plugin", "--device-plugin-path", dir.path(), "--nvml-library",
                                     KGPU_SIM_LIBRARY, "--cdi-spec-dir", cdi.path(), "--log-level", "warn"},
            std::map<std::string, std::string>{{"KGPU_SIM_NODE", node}});
    }
    double used = -1;
    if (kubelet.wait_registered("nvidia.com/gpu", 1, 30s)) {
        std::this_thread::sleep_for(1s);
        const double before = kgpu::test::proc_cpu_seconds(p->pid());
        std::this_thread::sleep_for(window);
        const double after = kgpu::test::proc_cpu_seconds(p->pid());
        if (before >= 0 && after >= 0 && p->running()) used = after - before;
    } else {
        std::cerr << (nvidia ? "NVIDIA's plugin" : "kgpu") << " did not register\n" << p->err();
    }
    p->signal(SIGTERM);
    p->wait(10000);
    return used;
}

}  // namespace

int main(int argc, char** argv) {
    const int seconds = argc > 1 ? std::atoi(argv[1]) : 30;
    const int runs = argc > 2 ? std::atoi(argv[2]) : 3;
    const std::string node = argc > 3 ? argv[3] : std::string(KGPU_SOURCE_DIR) + "/sim/nodes/dgx-h100.yaml";
    const char* nvidia = std::getenv("KGPU_NVIDIA_PLUGIN");
    const char* other = std::getenv("KGPU_IDLE_BINARY");
    const std::string binary = other && *other ? other : KGPU_BINARY;
    std::vector<double> kgpu, theirs;
    for (int i = 0; i < runs; ++i) {
        kgpu.push_back(measure(false, binary, node, std::chrono::seconds(seconds)));
        if (nvidia && *nvidia) theirs.push_back(measure(true, nvidia, node, std::chrono::seconds(seconds)));
    }
    auto line = [&](const char* who, std::vector<double> v) {
        if (v.empty()) return;
        std::string all;
        for (double x : v) all += (all.empty() ? "" : " ") + std::to_string(x).substr(0, 6);
        std::sort(v.begin(), v.end());
        std::printf("%-26s idle CPU over %d s: median %.4f s (runs: %s)\n", who, seconds, v[v.size() / 2], all.c_str());
    };
    line("kgpu device-plugin", kgpu);
    line("NVIDIA device plugin", theirs);
    return 0;
}
