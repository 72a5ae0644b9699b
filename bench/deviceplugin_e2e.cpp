// End-to-end figures for `kgpu device-plugin` (DESIGN.md budgets), measured from outside the
// process the way the kubelet sees it: a fake kubelet (real gRPC over unix sockets), the built
// binary, the simulator. Prints one line per figure; run it several times on a quiet machine.
//
//   build/release/bench/kgpu_deviceplugin_e2e [fixture.yaml]
//
// Scenarios: whole GPUs on the fixture (default dgx-h100.yaml: registration, Allocate,
// GetPreferredAllocation, XID -> Unhealthy, kubelet restart, RSS); 8 GPUs x 48 replicas
// (time-slicing, 384 devices); 56 MIG devices (8 GPUs x 7 1g.10gb, mixed strategy).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/fake_kubelet.h"
#include "support/process.h"

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

double us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

void report(const std::string& what, std::vector<double> v) {
    std::sort(v.begin(), v.end());
    auto pct = [&](double p) { return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))]; };
    std::printf("%-52s n=%-5zu p50=%9.1f us  p99=%9.1f us  max=%9.1f us\n", what.c_str(), v.size(), pct(0.5), pct(0.99),
                v.back());
}

long rss_kib(int pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    return -1;
}

struct Plugin {
    kgpu::test::TempDir dir;
    std::string events;
    std::unique_ptr<kgpu::test::FakeKubelet> kubelet;
    std::unique_ptr<kgpu::test::ChildProcess> process;
    double registered_ms = 0;

    // Starts the plugin on `node` with `extra` flags and `preload` fault commands (applied at
    // NVML init), and waits for `resource` to be registered with `count` devices.
    bool start(const std::string& node, const std::vector<std::string>& extra, const std::string& preload,
               const std::string& resource, size_t count) {
        events = dir.path() + "-events";
        std::ofstream(events) << preload;
        kubelet = std::make_unique<kgpu::test::FakeKubelet>(dir.path());
        if (!kubelet->start()) return false;
        std::vector<std::string> argv = {KGPU_BINARY, "device-plugin", "--device-plugin-path", dir.path(),
                                         "--nvml-library", KGPU_SIM_LIBRARY, "--log-level", "warn"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        const auto t0 = Clock::now();
        process = std::make_unique<kgpu::test::ChildProcess>(
            argv, std::map<std::string, std::string>{{"KGPU_SIM_NODE", node}, {"KGPU_SIM_EVENTS", events}});
        if (!kubelet->wait_registered(resource, 1, 20s) ||
            !kubelet->wait_devices(resource, [&](const auto& d) { return d.size() == count; }, 20s)) {
            std::cerr << resource << " not registered with " << count << " devices\n" << process->err();
            return false;
        }
        registered_ms = us(Clock::now() - t0) / 1000.0;
        return true;
    }
    ~Plugin() {
        if (process) {
            process->signal(SIGTERM);
            process->wait(10000);
        }
        kubelet.reset();
        std::remove(events.c_str());
    }
};

std::vector<std::string> ids_of(kgpu::test::FakeKubelet& k, const std::string& resource) {
    std::vector<std::string> ids;
    for (const auto& [id, d] : k.devices(resource)) ids.push_back(id);
    return ids;
}

// Allocate (one device) and GetPreferredAllocation (`size` of all) latency, and the size of one
// ListAndWatch message, for `resource`.
bool measure(Plugin& p, const std::string& label, const std::string& resource, int size) {
    auto& k = *p.kubelet;
    const auto ids = ids_of(k, resource);
    std::printf("%-52s %zu devices, %zu bytes\n", (label + ": ListAndWatch message").c_str(), ids.size(),
                k.last_message_bytes(resource));
    std::vector<double> alloc, prefer;
    for (int i = 0; i < 2000; ++i) {
        v1beta1::AllocateResponse resp;
        auto s = Clock::now();
        if (!k.allocate(resource, {{ids[static_cast<size_t>(i) % ids.size()]}}, &resp).ok()) return false;
        alloc.push_back(us(Clock::now() - s));
    }
    report(label + ": Allocate (1 device)", alloc);
    for (int i = 0; i < 2000; ++i) {
        std::vector<std::string> out;
        auto s = Clock::now();
        if (!k.prefer(resource, ids, {}, size, &out).ok()) return false;
        prefer.push_back(us(Clock::now() - s));
    }
    report(label + ": GetPreferredAllocation (" + std::to_string(size) + " of " + std::to_string(ids.size()) + ")",
           prefer);
    return true;
}

// The fixture with every GPU MIG-capable (MIG disabled in the file; `mig` commands enable it).
std::string mig_capable(const std::string& fixture, const std::string& dir) {
    std::ifstream in(fixture);
    std::stringstream out;
    std::string line;
    while (std::getline(in, line)) {
        out << line << "\n";
        if (line.rfind("    uuid:", 0) == 0) out << "    mig: {mode: disabled, max_devices: 7}\n";
    }
    const std::string path = dir + "/mig-node.yaml";
    std::ofstream(path) << out.str();
    return path;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string node = argc > 1 ? argv[1] : std::string(KGPU_SOURCE_DIR) + "/sim/nodes/dgx-h100.yaml";
    {
        Plugin p;
        if (!p.start(node, {}, "", "nvidia.com/gpu", 8)) return 1;
        std::printf("%-52s %.1f ms (process start to first device list, including exec and NVML init)\n",
                    "registered after start", p.registered_ms);
        auto& kubelet = *p.kubelet;
        const auto ids = ids_of(kubelet, "nvidia.com/gpu");
        if (!measure(p, "whole GPUs", "nvidia.com/gpu", static_cast<int>(ids.size() / 2))) return 1;

        std::vector<double> xid;
        for (size_t g = 0; g < ids.size(); ++g) {
            auto s = Clock::now();
            std::ofstream(p.events, std::ios::app) << "xid " << g << " 94\n";
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
        std::printf("%-52s (includes the simulator's 25 ms poll of the events file)\n", "");

        std::vector<double> rereg;
        for (int i = 0; i < 5; ++i) {
            auto s = Clock::now();
            kubelet.restart();
            if (!kubelet.wait_registered("nvidia.com/gpu", i + 2, 20s)) return 1;
            rereg.push_back(us(Clock::now() - s));
        }
        report("kubelet restart -> registered again", rereg);
        std::printf("%-52s %ld KiB\n", "plugin RSS after the above", rss_kib(p.process->pid()));
    }
    {
        Plugin p;
        kgpu::test::TempDir cfg_dir;
        const std::string cfg = cfg_dir.write(
            "ts.yaml", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 48\n");
        if (!p.start(node, {"--config-file", cfg}, "", "nvidia.com/gpu", 8 * 48)) return 1;
        std::printf("%-52s %.1f ms\n", "8 GPUs x 48 replicas: registered after start", p.registered_ms);
        if (!measure(p, "8 GPUs x 48 replicas", "nvidia.com/gpu", 8)) return 1;
        std::printf("%-52s %ld KiB\n", "8 GPUs x 48 replicas: plugin RSS", rss_kib(p.process->pid()));
    }
    {
        Plugin p;
        kgpu::test::TempDir node_dir;
        std::string preload;
        for (int g = 0; g < 8; ++g) preload += "mig " + std::to_string(g) + " 1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb\n";
        if (!p.start(mig_capable(node, node_dir.path()), {"--mig-strategy", "mixed"}, preload, "nvidia.com/mig-1g.10gb",
                     56))
            return 1;
        std::printf("%-52s %.1f ms\n", "56 MIG devices: registered after start", p.registered_ms);
        if (!measure(p, "56 MIG devices", "nvidia.com/mig-1g.10gb", 4)) return 1;
    }
    return 0;
}
