// End-to-end figures for `kgpu device-plugin` (DESIGN.md budgets), measured from outside the
// process the way the kubelet sees it: a fake kubelet (real gRPC over unix sockets), the built
// binary, the simulator. Prints one line per figure; run it several times on a quiet machine.
//
//   build/release/bench/kgpu_deviceplugin_e2e [fixture.yaml]
//
// Scenarios: whole GPUs on the fixture (default dgx-h100.yaml: registration, Allocate,
// GetPreferredAllocation, XID -> Unhealthy, kubelet restart, RSS); 8 GPUs x 48 replicas
// (time-slicing, 384 devices); 56 MIG devices (8 GPUs x 7 1g.10gb, mixed strategy: the fixture's
// GPUs must be MIG capable, as dgx-h100.yaml's are); the lifecycle of issue #12 against a fake
// kubelet that behaves like v1.26: process start ->
// registered with health known, SIGTERM -> exit, health change -> ListAndWatch while the kubelet
// never answers Register, and NVIDIA's plugin going away -> kgpu serving again, both orders.
// With env KGPU_NVIDIA_PLUGIN naming NVIDIA's nvidia-device-plugin binary (root), NVIDIA's plugin
// answers the same Allocate and GetPreferredAllocation calls in the same run, the two plugins'
// calls taking turns in blocks of 100, and the medians and RSS are printed as kgpu / NVIDIA ratios,
// with GetDevicePluginOptions (no work in either plugin) as the gRPC round trip's baseline and each
// plugin process's CPU per call:
//
//   xz -dc ../shared/peers/nvidia/nvidia-device-plugin.xz > /tmp/nvidia-device-plugin
//   chmod +x /tmp/nvidia-device-plugin
//   KGPU_NVIDIA_PLUGIN=/tmp/nvidia-device-plugin build/release/bench/kgpu_deviceplugin_e2e
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "support/fake_device_plugin.h"
#include "support/fake_kubelet.h"
#include "support/plugin_watcher.h"
#include "support/process.h"

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

double us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// Prints the percentiles of `v`; returns the median.
double report(const std::string& what, std::vector<double> v) {
    std::sort(v.begin(), v.end());
    auto pct = [&](double p) { return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))]; };
    std::printf("%-52s n=%-5zu p50=%9.1f us  p99=%9.1f us  max=%9.1f us\n", what.c_str(), v.size(), pct(0.5), pct(0.99),
                v.back());
    return pct(0.5);
}

// Milliseconds, for the lifecycle figures (few samples: median and max).
void report_ms(const std::string& what, std::vector<double> v) {
    std::sort(v.begin(), v.end());
    std::printf("%-52s n=%-5zu median=%7.1f ms  max=%7.1f ms\n", what.c_str(), v.size(), v[v.size() / 2], v.back());
}

long rss_kib(int pid) { return kgpu::test::proc_status_kib(pid, "VmRSS:"); }

struct Plugin {
    kgpu::test::TempDir dir;    // the device plugin directory
    kgpu::test::TempDir files;  // the events file
    std::string events;
    std::unique_ptr<kgpu::test::FakeKubelet> kubelet;
    std::unique_ptr<kgpu::test::ChildProcess> process;
    double registered_ms = 0;

    // Starts the plugin on `node` with `extra` flags and `preload` fault commands (applied at
    // NVML init), and waits for `resource` to be registered with `count` devices.
    // `new_kubelet` false: a kubelet the caller started already serves the directory.
    bool start(const std::string& node, const std::vector<std::string>& extra, const std::string& preload,
               const std::string& resource, size_t count, bool new_kubelet = true) {
        events = files.path() + "/events";
        std::ofstream(events) << preload;
        if (new_kubelet) {
            kubelet = std::make_unique<kgpu::test::FakeKubelet>(dir.path());
            if (!kubelet->start()) return false;
        }
        // Hermetic: CDI specs (if any) go to the run's own directory, never the machine's /var/run/cdi.
        std::vector<std::string> argv = {KGPU_BINARY, "device-plugin", "--device-plugin-path", dir.path(),
                                         "--nvml-library", KGPU_SIM_LIBRARY, "--log-level", "warn",
                                         "--cdi-spec-dir", dir.path() + "-cdi"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        const auto t0 = Clock::now();
        process = std::make_unique<kgpu::test::ChildProcess>(
            kgpu::test::under_profiler(argv), std::map<std::string, std::string>{{"KGPU_SIM_NODE", node}, {"KGPU_SIM_EVENTS", events}});
        if (!kubelet->wait_registered(resource, 1, 20s) ||
            !kubelet->wait_devices(resource, [&](const auto& d) { return d.size() == count; }, 20s)) {
            std::cerr << resource << " not registered with " << count << " devices\n" << process->err();
            return false;
        }
        registered_ms = us(Clock::now() - t0) / 1000.0;
        return true;
    }
    // NVIDIA's nvidia-device-plugin `binary` on `node` with its defaults. It serves on the fixed
    // path /var/lib/kubelet/device-plugins, so it runs in a mount namespace of its own where that
    // path is the fake kubelet's directory (root only), with the simulator as its libnvidia-ml.so.1.
    bool start_nvidia(const std::string& binary, const std::string& node, size_t count) {
        kubelet = std::make_unique<kgpu::test::FakeKubelet>(dir.path());
        if (!kubelet->start()) return false;
        const std::string script = "mount -t tmpfs none /var/lib && mkdir -p /var/lib/kubelet/device-plugins && "
                                   "mount --bind '" + dir.path() + "' /var/lib/kubelet/device-plugins && exec '" +
                                   binary + "' --kubelet-socket /var/lib/kubelet/device-plugins/kubelet.sock";
        const auto t0 = Clock::now();
        process = std::make_unique<kgpu::test::ChildProcess>(
            std::vector<std::string>{"/usr/bin/unshare", "-m", "/bin/sh", "-c", script},
            std::map<std::string, std::string>{
                {"KGPU_SIM_NODE", node}, {"LD_LIBRARY_PATH", std::filesystem::path(KGPU_SIM_LIBRARY).parent_path().string()}});
        if (!kubelet->wait_registered("nvidia.com/gpu", 1, 30s) ||
            !kubelet->wait_devices("nvidia.com/gpu", [&](const auto& d) { return d.size() == count; }, 30s)) {
            std::cerr << "NVIDIA's plugin: nvidia.com/gpu not registered with " << count << " devices\n" << process->err();
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
        std::filesystem::remove_all(dir.path() + "-cdi");
    }
};

std::vector<std::string> ids_of(kgpu::test::FakeKubelet& k, const std::string& resource) {
    std::vector<std::string> ids;
    for (const auto& [id, d] : k.devices(resource)) ids.push_back(id);
    return ids;
}

struct Medians {
    double round_trip = 0, allocate = 0, prefer = 0;
    double allocate_cpu = 0;  // the plugin process's CPU per Allocate, microseconds
};

// One plugin measured by measure_together, with its label and, after, its medians.
struct Measured {
    Plugin* plugin;
    std::string label;
    Medians medians;
};

// Allocate (one device) and GetPreferredAllocation (`size` of all) latency, each plugin process's
// CPU per call, and the size of one ListAndWatch message, for `resource` of each plugin of
// `plugins`, their calls taking turns in blocks of 100, so that what else the machine does falls
// on all alike. (Blocks, not single calls: after each of its own calls NVIDIA's Go plugin keeps a
// core busy for a while, which single turns would charge to the next plugin's call.) With
// `round_trip`, first as many GetDevicePluginOptions calls, the baseline (the side-by-side round
// only: the one-plugin rounds keep 2000 + 2000 calls, which the RSS figures and
// scripts/function-order's profile count).
bool measure_together(std::vector<Measured>& plugins, const std::string& resource, int size, bool round_trip = false) {
    std::vector<std::vector<std::string>> ids;
    for (auto& m : plugins) {
        ids.push_back(ids_of(*m.plugin->kubelet, resource));
        std::printf("%-52s %zu devices, %zu bytes\n", (m.label + ": ListAndWatch message").c_str(), ids.back().size(),
                    m.plugin->kubelet->last_message_bytes(resource));
    }
    constexpr int kCalls = 2000, kBlock = 100;
    // One phase: `call(p, i)` for each plugin, in turns; each call's latency, and each plugin
    // process's CPU per call over the phase (its threads' schedstat, whatever they did meanwhile).
    auto phase = [&](const std::function<bool(size_t, int)>& call, std::vector<std::vector<double>>& latency,
                     std::vector<double>& cpu_us) {
        latency.assign(plugins.size(), {});
        std::vector<double> before;
        for (auto& m : plugins) before.push_back(kgpu::test::proc_cpu_seconds(m.plugin->process->pid()));
        for (int b = 0; b < kCalls; b += kBlock)
            for (size_t p = 0; p < plugins.size(); ++p)
                for (int i = b; i < b + kBlock; ++i) {
                    auto s = Clock::now();
                    if (!call(p, i)) return false;
                    latency[p].push_back(us(Clock::now() - s));
                }
        cpu_us.clear();
        for (size_t p = 0; p < plugins.size(); ++p) {
            const double after = kgpu::test::proc_cpu_seconds(plugins[p].plugin->process->pid());
            cpu_us.push_back(before[p] < 0 || after < 0 ? std::nan("") : (after - before[p]) * 1e6 / kCalls);
        }
        return true;
    };
    std::vector<std::vector<double>> trip, alloc, prefer;
    std::vector<double> trip_cpu, alloc_cpu, prefer_cpu;
    // The baseline: GetDevicePluginOptions, which neither plugin does any work for.
    if (round_trip && !phase([&](size_t p, int) {
            v1beta1::DevicePluginOptions resp;
            return plugins[p].plugin->kubelet->options(resource, &resp).ok();
        }, trip, trip_cpu))
        return false;
    if (!phase([&](size_t p, int i) {
            v1beta1::AllocateResponse resp;
            return plugins[p].plugin->kubelet->allocate(resource, {{ids[p][static_cast<size_t>(i) % ids[p].size()]}}, &resp).ok();
        }, alloc, alloc_cpu))
        return false;
    if (!phase([&](size_t p, int) {
            std::vector<std::string> out;
            return plugins[p].plugin->kubelet->prefer(resource, ids[p], {}, size, &out).ok();
        }, prefer, prefer_cpu))
        return false;
    for (size_t p = 0; p < plugins.size(); ++p) {
        if (round_trip)
            plugins[p].medians.round_trip = report(plugins[p].label + ": GetDevicePluginOptions (no work)", trip[p]);
        plugins[p].medians.allocate = report(plugins[p].label + ": Allocate (1 device)", alloc[p]);
        plugins[p].medians.prefer =
            report(plugins[p].label + ": GetPreferredAllocation (" + std::to_string(size) + " of " +
                       std::to_string(ids[p].size()) + ")",
                   prefer[p]);
        plugins[p].medians.allocate_cpu = alloc_cpu[p];
        if (round_trip)
            std::printf("%-52s GetDevicePluginOptions %.1f us, ", (plugins[p].label + ": plugin CPU per call").c_str(),
                        trip_cpu[p]);
        else
            std::printf("%-52s ", (plugins[p].label + ": plugin CPU per call").c_str());
        std::printf("Allocate %.1f us, GetPreferredAllocation %.1f us\n", alloc_cpu[p], prefer_cpu[p]);
    }
    return true;
}

bool measure(Plugin& p, const std::string& label, const std::string& resource, int size) {
    std::vector<Measured> one{{&p, label, {}}};
    return measure_together(one, resource, size);
}

bool running_for(kgpu::test::ChildProcess& p, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (p.running()) {
        if (Clock::now() > deadline) return true;
        std::this_thread::sleep_for(200us);
    }
    return false;
}

size_t unhealthy(const kgpu::test::PluginWatcher::Devices& d) {
    return static_cast<size_t>(std::count_if(d.begin(), d.end(), [](const auto& kv) { return kv.second == "Unhealthy"; }));
}

// Issue #12: the plugin's lifecycle around a kubelet that behaves like v1.26.
bool lifecycle(const std::string& node) {
    const std::string gpu = "nvidia.com/gpu";
    // Process start -> registered, the first list carrying health as probed (GPU 1 has a reset
    // pending from before: XID 48 in the events file's history); then SIGTERM -> process gone.
    std::vector<double> start, term;
    for (int i = 0; i < 7; ++i) {
        Plugin p;
        if (!p.start(node, {"--device-id-strategy", "index"}, "xid 1 48\n", gpu, 8)) return false;
        const auto first = p.kubelet->messages(gpu).front();
        // IDs are UUIDs under every strategy: exactly one device (GPU 1) is Unhealthy.
        const auto bad = std::count_if(first.begin(), first.end(), [](const auto& kv) { return kv.second.health == "Unhealthy"; });
        if (first.size() != 8 || bad != 1) {
            std::cerr << "the first list does not carry GPU 1's pending reset\n";
            return false;
        }
        start.push_back(p.registered_ms);
        const auto s = Clock::now();
        p.process->signal(SIGTERM);
        if (running_for(*p.process, 10s)) return false;
        term.push_back(us(Clock::now() - s) / 1000.0);
        if (!p.kubelet->stream_ended(gpu) || std::filesystem::exists(p.dir.path() + "/kgpu-nvidia-com-gpu.sock")) {
            std::cerr << "SIGTERM left a stream or the socket\n";
            return false;
        }
    }
    report_ms("process start -> registered, first list with health", start);
    report_ms("SIGTERM -> exited (streams ended, socket removed)", term);

    // A kubelet that accepts the connection and never answers Register: health changes still
    // reach ListAndWatch (our own client on the plugin socket).
    {
        kgpu::test::TempDir dir, files;
        const std::string events = files.path() + "/events";
        std::ofstream(events).flush();
        kgpu::test::FakeKubelet kubelet(dir.path());
        kubelet.hang_register(true);
        if (!kubelet.start()) return false;
        kgpu::test::ChildProcess proc({KGPU_BINARY, "device-plugin", "--device-plugin-path", dir.path(),
                                       "--nvml-library", KGPU_SIM_LIBRARY, "--log-level", "warn", "--cdi-spec-dir",
                                       dir.path() + "-cdi"},
                                      {{"KGPU_SIM_NODE", node}, {"KGPU_SIM_EVENTS", events}});
        if (!kubelet.wait_until([&] { return kubelet.hung_registers() == 1; }, 20s)) return false;
        kgpu::test::PluginWatcher watcher(dir.path() + "/kgpu-nvidia-com-gpu.sock");
        if (!watcher.wait([](const auto& d) { return d.size() == 8; })) return false;
        std::vector<double> health;
        for (size_t g = 0; g < 8; ++g) {
            const auto s = Clock::now();
            std::ofstream(events, std::ios::app) << "xid " << g << " 94\n";
            if (!watcher.wait([&](const auto& d) { return unhealthy(d) > g; })) return false;
            health.push_back(us(Clock::now() - s) / 1000.0);
        }
        report_ms("hung kubelet: XID appended -> Unhealthy in ListAndWatch", health);
        if (kubelet.abandoned_registers() != 0) std::printf("%-52s (a Register timed out meanwhile)\n", "");
        proc.signal(SIGTERM);
        proc.wait(10000);
        kubelet.hang_register(false);
        std::filesystem::remove_all(dir.path() + "-cdi");
    }

    // NVIDIA's plugin goes away -> kgpu serves the resource again (the kubelet's client is kgpu's,
    // allocatable back to 8), in both orders.
    for (bool kgpu_last : {true, false}) {
        std::vector<double> back;
        for (int i = 0; i < 5; ++i) {
            Plugin p;
            kgpu::test::FakeDevicePlugin nvidia(p.dir.path(), gpu, {"GPU-a", "GPU-b"});
            if (kgpu_last) {
                p.kubelet = std::make_unique<kgpu::test::FakeKubelet>(p.dir.path());
                if (!p.kubelet->start() || !nvidia.start() || !nvidia.register_with(p.kubelet->socket_path()).ok())
                    return false;
                if (!p.start(node, {}, "", gpu, 8, /*new_kubelet=*/false)) return false;
            } else {
                if (!p.start(node, {}, "", gpu, 8)) return false;
                if (!nvidia.start() || !nvidia.register_with(p.kubelet->socket_path()).ok()) return false;
            }
            auto& k = *p.kubelet;
            if (!k.wait_until([&] { return k.endpoint(gpu) == (kgpu_last ? "kgpu-nvidia-com-gpu.sock" : "nvidia-gpu.sock"); },
                              20s))
                return false;
            std::this_thread::sleep_for(100ms);  // both registrations done: the operator deletes NVIDIA's plugin later
            const auto s = Clock::now();
            nvidia.stop();
            if (!k.wait_until(
                    [&] {
                        return k.connected(gpu) && k.endpoint(gpu) == "kgpu-nvidia-com-gpu.sock" &&
                               k.allocatable(gpu) == 8;
                    },
                    20s)) {
                std::cerr << "kgpu does not serve " << gpu << " again\n" << p.process->err();
                return false;
            }
            back.push_back(us(Clock::now() - s) / 1000.0);
        }
        report_ms(kgpu_last ? "NVIDIA's plugin stops, kgpu registered last -> served"
                            : "NVIDIA's plugin stops, it registered last -> served",
                  back);
    }
    return true;
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
        std::printf("%-52s %ld KiB\n", "plugin RSS after those calls", rss_kib(p.process->pid()));
        // 10 s after its control loop last did something the plugin gives back the pages of
        // start-up code (common/memory.h); one more round of calls brings back what serving runs.
        std::this_thread::sleep_for(12s);
        std::printf("%-52s %ld KiB\n", "plugin RSS settled (12 s idle)", rss_kib(p.process->pid()));
        if (!measure(p, "whole GPUs, settled", "nvidia.com/gpu", static_cast<int>(ids.size() / 2))) return 1;
        std::printf("%-52s %ld KiB\n", "plugin RSS settled, after 2000+2000 more calls", rss_kib(p.process->pid()));
        // NVIDIA's plugin (env KGPU_NVIDIA_PLUGIN: its nvidia-device-plugin binary, v0.18.2 in
        // ../shared/peers/nvidia, unpacked) on the same node: a first round of calls of its own,
        // then a round where the two plugins' calls take turns; the ratios are of that round.
        if (const char* nvidia = std::getenv("KGPU_NVIDIA_PLUGIN"); nvidia && *nvidia) {
            Plugin q;
            if (!q.start_nvidia(nvidia, node, 8)) return 1;
            std::printf("%-52s %.1f ms\n", "NVIDIA's plugin: registered after start", q.registered_ms);
            if (!measure(q, "NVIDIA's plugin: whole GPUs", "nvidia.com/gpu", static_cast<int>(ids.size() / 2))) return 1;
            std::vector<Measured> both{{&p, "kgpu, turns with NVIDIA's", {}}, {&q, "NVIDIA's, turns with kgpu", {}}};
            if (!measure_together(both, "nvidia.com/gpu", static_cast<int>(ids.size() / 2), /*round_trip=*/true)) return 1;
            const long ours = rss_kib(p.process->pid()), theirs = rss_kib(q.process->pid());
            std::printf("%-52s kgpu %ld KiB, NVIDIA's %ld KiB\n", "RSS after 6000+6000 / 4000+4000 calls (+2000 no-op)",
                        ours, theirs);
            std::printf("%-52s Allocate p50 %.2fx, GetPreferredAllocation p50 %.2fx, RSS %.2fx\n", "kgpu / NVIDIA's plugin",
                        both[0].medians.allocate / both[1].medians.allocate, both[0].medians.prefer / both[1].medians.prefer,
                        static_cast<double>(ours) / static_cast<double>(theirs));
            // What each plugin adds to the round trip (the part the plugin's own code decides).
            const Medians& k = both[0].medians;
            const Medians& n = both[1].medians;
            std::printf("%-52s %.2fx\n", "plugin CPU per Allocate, kgpu / NVIDIA's", k.allocate_cpu / n.allocate_cpu);
            std::printf("%-52s %.2fx; Allocate over it: kgpu %+.1f us, NVIDIA's %+.1f us; GetPreferredAllocation over "
                        "it: kgpu %+.1f us, NVIDIA's %+.1f us\n",
                        "GetDevicePluginOptions p50 (the round trip)", k.round_trip / n.round_trip,
                        k.allocate - k.round_trip, n.allocate - n.round_trip, k.prefer - k.round_trip,
                        n.prefer - n.round_trip);
        }
        // Grown by more than 1 MiB since: given back again at the next minute's check.
        std::this_thread::sleep_for(65s);
        std::printf("%-52s %ld KiB\n", "plugin RSS a minute after its last calls", rss_kib(p.process->pid()));

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
            kubelet.restart();
            if (!kubelet.wait_registered("nvidia.com/gpu", i + 2, 20s)) return 1;
            // From the moment the new kubelet serves kubelet.sock (its device manager is up).
            rereg.push_back(us(Clock::now() - kubelet.started_at()));
            // Exactly one Register and one stream for this kubelet instance (issue #12).
            std::this_thread::sleep_for(200ms);
            if (kubelet.register_calls("nvidia.com/gpu") != 1 || kubelet.open_streams("nvidia.com/gpu") != 1) {
                std::cerr << "after a kubelet restart: " << kubelet.register_calls("nvidia.com/gpu") << " Register, "
                          << kubelet.open_streams("nvidia.com/gpu") << " streams\n";
                return 1;
            }
        }
        report("kubelet restart -> registered again (1 Register)", rereg);
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
        std::this_thread::sleep_for(12s);
        if (!measure(p, "8 GPUs x 48 replicas, settled", "nvidia.com/gpu", 8)) return 1;
        std::printf("%-52s %ld KiB\n", "8 GPUs x 48 replicas: RSS settled, after the calls", rss_kib(p.process->pid()));
    }
    {
        Plugin p;
        // dgx-h100's GPUs are MIG capable with MIG off; the events file's history turns it on.
        std::string preload;
        for (int g = 0; g < 8; ++g) preload += "mig " + std::to_string(g) + " 1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb\n";
        if (!p.start(node, {"--mig-strategy", "mixed"}, preload, "nvidia.com/mig-1g.10gb", 56)) return 1;
        std::printf("%-52s %.1f ms\n", "56 MIG devices: registered after start", p.registered_ms);
        if (!measure(p, "56 MIG devices", "nvidia.com/mig-1g.10gb", 4)) return 1;
    }
    if (!lifecycle(node)) return 1;
    return 0;
}
