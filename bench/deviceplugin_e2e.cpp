// End-to-end figures for `kgpu device-plugin` (DESIGN.md budgets), measured from outside the
// process the way the kubelet sees it: a fake kubelet (real gRPC over unix sockets), the built
// binary, the simulator. Prints one line per figure; run it several times on a quiet machine.
//
//   build/release/bench/kgpu_deviceplugin_e2e [fixture.yaml]
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "support/fake_kubelet.h"
#include "support/process.h"

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

double us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

void report(const char* what, std::vector<double> v) {
    std::sort(v.begin(), v.end());
    auto pct = [&](double p) { return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))]; };
    std::printf("%-44s n=%-5zu p50=%9.1f us  p99=%9.1f us  max=%9.1f us\n", what, v.size(), pct(0.5), pct(0.99), v.back());
}

long rss_kib(int pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    return -1;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string node = argc > 1 ? argv[1] : std::string(KGPU_SOURCE_DIR) + "/sim/nodes/dgx-h100.yaml";
    kgpu::test::TempDir dir;
    const std::string events = dir.path() + "-events";
    std::ofstream(events).flush();
    kgpu::test::FakeKubelet kubelet(dir.path());
    if (!kubelet.start()) return 1;

    const auto t0 = Clock::now();
    kgpu::test::ChildProcess plugin({KGPU_BINARY, "device-plugin", "--device-plugin-path", dir.path(), "--nvml-library",
                                     KGPU_SIM_LIBRARY, "--log-level", "warn"},
                                    {{"KGPU_SIM_NODE", node}, {"KGPU_SIM_EVENTS", events}});
    if (!kubelet.wait_registered("nvidia.com/gpu", 1, 20s)) {
        std::cerr << "not registered\n" << plugin.err();
        return 1;
    }
    std::printf("%-44s %.1f ms (process start to first device list, including exec and NVML init)\n",
                "registered after start", us(Clock::now() - t0) / 1000.0);

    std::vector<std::string> ids;
    for (const auto& [id, d] : kubelet.devices("nvidia.com/gpu")) ids.push_back(id);

    std::vector<double> alloc, prefer;
    for (int i = 0; i < 2000; ++i) {
        v1beta1::AllocateResponse resp;
        auto s = Clock::now();
        if (!kubelet.allocate("nvidia.com/gpu", {{ids[i % ids.size()]}}, &resp).ok()) return 1;
        alloc.push_back(us(Clock::now() - s));
    }
    report("Allocate (1 GPU) over the unix socket", alloc);
    for (int i = 0; i < 2000; ++i) {
        std::vector<std::string> out;
        auto s = Clock::now();
        if (!kubelet.prefer("nvidia.com/gpu", ids, {}, static_cast<int>(ids.size() / 2), &out).ok()) return 1;
        prefer.push_back(us(Clock::now() - s));
    }
    report("GetPreferredAllocation (n/2 of n GPUs)", prefer);

    std::vector<double> xid;
    for (size_t g = 0; g < ids.size(); ++g) {
        auto s = Clock::now();
        std::ofstream(events, std::ios::app) << "xid " << g << " 94\n";
        // ids are sorted by string, not by index: wait for any device to turn Unhealthy anew.
        const size_t before = g;
        kubelet.wait_devices(
            "nvidia.com/gpu",
            [&](const auto& d) {
                size_t n = 0;
                for (const auto& [k, v] : d) n += v.health == "Unhealthy";
                return n > before;
            },
            10s);
        xid.push_back(us(Clock::now() - s));
    }
    report("XID appended -> Unhealthy in ListAndWatch", xid);
    std::printf("%-44s (includes the simulator's 25 ms poll of the events file)\n", "");

    std::vector<double> rereg;
    for (int i = 0; i < 5; ++i) {
        auto s = Clock::now();
        kubelet.restart();
        if (!kubelet.wait_registered("nvidia.com/gpu", i + 2, 20s)) return 1;
        rereg.push_back(us(Clock::now() - s));
    }
    report("kubelet restart -> registered again", rereg);
    std::printf("%-44s %ld KiB\n", "plugin RSS after the above", rss_kib(plugin.pid()));
    plugin.signal(SIGTERM);
    plugin.wait(10000);
    std::remove(events.c_str());
    return 0;
}
