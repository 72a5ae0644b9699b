// Runs one device plugin (kgpu's or NVIDIA's, any binary) against the fake kubelet and prints
// what the kubelet sees: the registration, every device with its health and NUMA node, the answer
// to GetPreferredAllocation and to Allocate of the first device (protobuf text form), every
// ListAndWatch message for a while, and the plugin's RSS. Meant for a node with a real driver,
// where the simulator is not involved and the plugins' answers can be diffed side by side:
//
//   kgpu_plugin_probe [--dir D] [--resource R] [--watch S] -- COMMAND [ARGS...]
//
// `{dir}` in COMMAND's words is replaced by the kubelet's directory (default a fresh temp dir;
// NVIDIA's plugin serves on /var/lib/kubelet/device-plugins, so give it that as --dir). It watches
// S seconds (default 10) after Allocate and then stops the plugin with SIGTERM; the exit code is 0
// when the plugin registered and answered both calls.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "support/fake_kubelet.h"
#include "support/process.h"

using namespace std::chrono_literals;

namespace {

long rss_kib(int pid) { return kgpu::test::proc_status_kib(pid, "VmRSS:"); }

// utime + stime of `pid` in clock ticks (-1: unreadable).
long cpu_ticks(int pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto close = stat.rfind(')');
    if (close == std::string::npos) return -1;
    std::istringstream fields(stat.substr(close + 2));
    std::string f;
    long utime = 0, stime = 0;
    for (int i = 3; fields >> f; ++i) {
        if (i == 14) utime = std::stol(f);
        if (i == 15) {
            stime = std::stol(f);
            return utime + stime;
        }
    }
    return -1;
}

// The plugin's resident set by mapping (from /proc/<pid>/smaps), largest first: where its RSS goes.
void print_rss_by_mapping(int pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/smaps");
    std::map<std::string, long> by_name;
    std::string line, name;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        if (!std::isupper(static_cast<unsigned char>(line[0]))) {  // a mapping's header line
            std::istringstream words(line);
            std::string w;
            for (int i = 0; i < 5 && words >> w; ++i) {
            }
            std::getline(words, name);
            const auto b = name.find_first_not_of(' ');
            name = b == std::string::npos ? "[anonymous]" : name.substr(b);
        } else if (line.rfind("Rss:", 0) == 0) {
            by_name[name] += std::stol(line.substr(4));
        }
    }
    std::vector<std::pair<long, std::string>> sorted;
    for (const auto& [n, kib] : by_name) sorted.emplace_back(kib, n);
    std::sort(sorted.rbegin(), sorted.rend());
    for (size_t i = 0; i < sorted.size() && i < 10; ++i)
        std::printf("  rss %6ld KiB  %s\n", sorted[i].first, sorted[i].second.c_str());
}

void print_devices(const kgpu::test::FakeKubelet::Devices& devices) {
    for (const auto& [id, d] : devices) {
        std::string numa;
        for (long n : d.numa) numa += (numa.empty() ? "" : ",") + std::to_string(n);
        std::printf("  device %s health=%s numa=%s\n", id.c_str(), d.health.c_str(), numa.empty() ? "-" : numa.c_str());
    }
}

// The answer, sorted where the protocol's order means nothing (maps), one field per line.
void print_allocate(const v1beta1::AllocateResponse& r) {
    for (const auto& c : r.container_responses()) {
        std::map<std::string, std::string> envs(c.envs().begin(), c.envs().end());
        for (const auto& [k, v] : envs) std::printf("  env %s=%s\n", k.c_str(), v.c_str());
        for (const auto& m : c.mounts())
            std::printf("  mount %s <- %s%s\n", m.container_path().c_str(), m.host_path().c_str(), m.read_only() ? " ro" : "");
        for (const auto& d : c.devices())
            std::printf("  device %s <- %s %s\n", d.container_path().c_str(), d.host_path().c_str(), d.permissions().c_str());
        std::map<std::string, std::string> annotations(c.annotations().begin(), c.annotations().end());
        for (const auto& [k, v] : annotations) std::printf("  annotation %s=%s\n", k.c_str(), v.c_str());
        for (const auto& d : c.cdi_devices()) std::printf("  cdi device %s\n", d.name().c_str());
    }
}

int usage() {
    std::fprintf(stderr, "usage: kgpu_plugin_probe [--dir D] [--resource R] [--watch SECONDS] -- COMMAND [ARGS...]\n");
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    std::string dir, resource = "nvidia.com/gpu";
    int watch_s = 10;
    std::vector<std::string> command;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--") {
            command.assign(argv + i + 1, argv + argc);
            break;
        }
        if (i + 1 >= argc) return usage();
        if (a == "--dir") dir = argv[++i];
        else if (a == "--resource") resource = argv[++i];
        else if (a == "--watch") watch_s = std::atoi(argv[++i]);
        else return usage();
    }
    if (command.empty()) return usage();

    std::unique_ptr<kgpu::test::TempDir> temp;
    if (dir.empty()) {
        temp = std::make_unique<kgpu::test::TempDir>();
        dir = temp->path();
    }
    std::filesystem::create_directories(dir);
    for (auto& word : command)
        for (size_t at; (at = word.find("{dir}")) != std::string::npos;) word.replace(at, 5, dir);

    kgpu::test::FakeKubelet kubelet(dir);
    if (!kubelet.start()) {
        std::fprintf(stderr, "cannot serve %s/kubelet.sock\n", dir.c_str());
        return 1;
    }
    const auto t0 = std::chrono::steady_clock::now();
    kgpu::test::ChildProcess plugin(command);
    auto reg = kubelet.wait_registered(resource, 1, 60s);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    int rc = 0;
    if (!reg) {
        std::printf("NOT registered: %s within 60 s\n", resource.c_str());
        rc = 1;
    } else {
        std::printf("registered %s in %.0f ms: endpoint=%s version=%s preferred_allocation=%d\n", resource.c_str(), ms,
                    reg->endpoint.c_str(), reg->version.c_str(), reg->preferred_allocation_available ? 1 : 0);
        const auto devices = kubelet.devices(resource);
        std::printf("ListAndWatch: %zu devices, %zu bytes\n", devices.size(), kubelet.last_message_bytes(resource));
        print_devices(devices);
        std::vector<std::string> ids;
        for (const auto& [id, d] : devices) ids.push_back(id);
        if (!ids.empty()) {
            std::vector<std::string> preferred;
            auto s = kubelet.prefer(resource, ids, {}, 1, &preferred);
            std::printf("GetPreferredAllocation(1 of %zu): %s", ids.size(), s.ok() ? "" : ("error " + s.error_message()).c_str());
            for (const auto& p : preferred) std::printf(" %s", p.c_str());
            std::printf("\n");
            v1beta1::AllocateResponse response;
            s = kubelet.allocate(resource, {{ids.front()}}, &response);
            if (s.ok()) {
                std::printf("Allocate(%s):\n", ids.front().c_str());
                print_allocate(response);
            } else {
                std::printf("Allocate(%s): error %d %s\n", ids.front().c_str(), static_cast<int>(s.error_code()),
                            s.error_message().c_str());
                rc = 1;
            }
        }
        std::fflush(stdout);
        // Every ListAndWatch message from here on (a health change on the real driver).
        size_t seen = kubelet.messages(resource).size();
        const long ticks_before = cpu_ticks(plugin.pid());
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(watch_s);
        while (std::chrono::steady_clock::now() < until && plugin.running()) {
            std::this_thread::sleep_for(100ms);
            const auto messages = kubelet.messages(resource);
            for (; seen < messages.size(); ++seen) {
                std::printf("ListAndWatch message %zu:\n", seen + 1);
                print_devices(messages[seen]);
            }
            std::fflush(stdout);
        }
        std::printf("RSS after %d s: %ld KiB; CPU over the watch: %ld ticks of 1/%ld s; still running: %d\n", watch_s,
                    rss_kib(plugin.pid()), cpu_ticks(plugin.pid()) - ticks_before, sysconf(_SC_CLK_TCK),
                    plugin.running() ? 1 : 0);
        print_rss_by_mapping(plugin.pid());
    }
    plugin.signal(SIGTERM);
    const int exit_code = plugin.wait(15000);
    std::printf("exit code after SIGTERM: %d\n--- plugin stderr ---\n%s--- plugin stdout ---\n%s", exit_code,
                plugin.err().c_str(), plugin.out().c_str());
    return rc;
}
