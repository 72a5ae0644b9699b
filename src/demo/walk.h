// `kgpu demo`'s walk, internal to src/demo: the Demo class and what its three files share.
// demo.cpp: the environment (locating the binary and fixtures, the work dir, the simulated node,
// starting the children), the teardown and the order of steps; steps.cpp: the default walk
// (register, allocate, an XID, metrics, doctor); steps_mps.cpp: the --mps walk.
#pragma once

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"
#include "common/strings.h"
#include "demo/demo.h"
#include "demo/host.h"
#include "demo/kubelet.h"
#include "demo/process.h"

namespace kgpu::demo::detail {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

inline constexpr const char* kResource = "nvidia.com/gpu";
inline constexpr const char* kNamespace = "default";
inline constexpr const char* kPod = "cuda-train";
inline constexpr const char* kContainer = "trainer";
inline constexpr int kPodGpus = 2;
inline constexpr int kXid = 94;  // "Contained ECC error": recoverable once the faulting work is gone
inline constexpr int kSteps = 5;
// --mps: the MPS walk (NVIDIA's README MPS config with 4 replicas; sim/README.md's stand-in daemon).
inline constexpr int kMpsSteps = 4;
inline constexpr unsigned kMpsReplicas = 4;

inline const char* signal_name(int sig) {
    switch (sig) {
        case SIGINT: return "SIGINT";
        case SIGTERM: return "SIGTERM";
        case SIGHUP: return "SIGHUP";
        default: return "a signal";
    }
}

inline double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
inline long long millis(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

inline std::string read_or_empty(const fs::path& p) {
    auto r = files::read(p);
    return r ? *r : std::string{};
}

inline std::string tail(const fs::path& p, size_t lines) {
    std::string s = read_or_empty(p);
    std::vector<std::string_view> all;
    for (auto l : strings::split(s, '\n'))
        if (!l.empty()) all.push_back(l);
    std::string out;
    for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += "    | " + std::string(all[i]) + "\n";
    return out.empty() ? "    | (empty)\n" : out;
}

inline std::string short_uuid(const std::string& uuid) { return uuid.size() > 12 ? uuid.substr(0, 12) + "…" : uuid; }

// A failed step or setup problem: the message, the exit code it maps to, and a log worth showing.
struct Failure {
    int exit_code = 1;
    std::string message;
    fs::path log;
};

class Demo {
public:
    Demo(const Options& o, std::ostream& out) : opts_(o), out_(out) {}
    ~Demo() {
        try {
            teardown();
        } catch (...) {  // a destructor must not throw; the Child members still stop the children
        }
    }

    // run_steps() behind an exception barrier: what the steps do not expect (a child's output of
    // another shape, bad_alloc) is a message and exit 1 after the teardown, never std::terminate
    // with the children and the work dir left behind.
    int run();

private:
    template <class... Args>
    void say(fmt::format_string<Args...> f, Args&&... args) {
        out_ << fmt::format(f, std::forward<Args>(args)...) << '\n';
        out_.flush();
    }
    bool interrupted();
    std::function<bool()> cancel_fn() {
        return [this] { return interrupted(); };
    }
    // Reads the signalfd first, so a failure caused by the interruption (a child that got the
    // same signal) is reported as the interruption.
    std::optional<Failure> interrupted_failure() {
        if (!interrupted()) return std::nullopt;
        return Failure{128 + signal_, fmt::format("interrupted by {}", signal_name(signal_)), {}};
    }
    Failure step_failure(std::string message, fs::path log = {}) {
        if (auto f = interrupted_failure()) return *f;
        return Failure{1, std::move(message), std::move(log)};
    }

    std::optional<Failure> locate();
    std::optional<Failure> make_work_dir();
    std::optional<Failure> read_node();
    std::optional<Failure> start();
    std::optional<Failure> step_register();
    std::optional<Failure> step_allocate();
    std::optional<Failure> step_xid();
    std::optional<Failure> step_metrics();
    std::optional<Failure> step_doctor();
    std::optional<Failure> wait_exporter();
    std::optional<Failure> start_mps();
    std::optional<Failure> step_mps_register();
    std::optional<Failure> step_mps_share();
    std::optional<Failure> step_mps_kill();
    std::optional<Failure> step_mps_metrics();
    void teardown();
    int run_steps();

    SpawnOptions child(const std::string& name, std::vector<std::string> args) const;
    Status append_event(const std::string& line);

    Options opts_;
    std::ostream& out_;
    Clock::time_point t0_ = Clock::now();
    int signal_ = 0;
    int sfd_ = -1;
    sigset_t old_mask_{};
    bool mask_changed_ = false;
    struct sigaction old_pipe_ {};
    bool torn_down_ = false;

    fs::path exe_, sim_, node_file_, work_;
    HostPaths host_;
    fs::path logs_, events_;
    SimNode node_;

    std::unique_ptr<KubeletEmulator> kubelet_;
    Child plugin_, exporter_;
    Clock::time_point plugin_started_;
    PluginRegistration reg_;
    std::vector<std::string> pod_ids_;  // the demo pod's device IDs
    std::string faulted_uuid_;          // the GPU step 3 sent an XID to
    std::string exporter_host_;
    int exporter_port_ = 0;

    // --mps
    Child mps_daemon_;
    fs::path mps_root_, mps_control_, mps_config_;
    std::string mps_uuid_;                 // the GPU the two MPS pods share
    std::vector<std::string> mps_pod_ids_;  // their replicas
};

}  // namespace kgpu::demo::detail
