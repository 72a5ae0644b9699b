// GPU health for the device plugin: an NVML event thread plus periodic probes, with recovery by
// class (shared/facts/diagnostics.md "Recovery classes"), unlike NVIDIA's plugin where Unhealthy
// is final:
//  - application-caused XIDs (ignored list) change nothing;
//  - recoverable XIDs (e.g. 92, 94): Unhealthy, Healthy again after `recovery_period` with no new
//    critical XID and clean probes;
//  - reset-class XIDs (48, 62, 63, 64, 74, 79, 95, 119, 120, 140, 143, and any XID not named
//    elsewhere), pending remapped rows / page retirement, a row-remap failure or a recovery action
//    other than NONE: Unhealthy until the GPU has been reset — seen as the GPU going away and
//    answering again, or the pending state it showed clearing — and probes are clean. Clean
//    probes alone prove nothing: XID 79 on a GPU that still answers stays Unhealthy;
//  - a GPU that does not answer (GPU_IS_LOST) is Unhealthy while it is gone.
//
// Everything a GPU backs shares its health (unlike NVIDIA's plugin, issue #1929): the plugin marks
// every replica and every MIG device of an unhealthy GPU. An XID that names a GPU/compute
// instance (the event's GI/CI ids) marks only the MIG devices whose ids match (a CI id of
// 0xFFFFFFFF matches every CI of that GI) and they recover by the same rules; an instance-specific
// event that matches none of them marks the whole GPU.
//
// MIG configuration change events (0x100) are handed to on_mig_change; the plugin rediscovers
// and calls update_node().
//
// Probing costs CPU on an idle node, and events tell most of what it finds (an XID comes with
// the remapped rows or recovery action it leaves, XID 79 with a GPU falling off the bus). So
// probes run every `probe_interval` (1 s) only while a GPU or MIG device is Unhealthy or a GPU
// does not answer (recovery is decided by probes: a reset seen, a quiet period passed), and every
// `idle_probe_interval` (10 s) while everything is Healthy: that slow probe finds what comes
// without an event (pending state, a GPU gone silently). An XID is handled when it arrives.

#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "deviceplugin/config.h"
#include "inventory/node.h"
#include "nvml/device.h"
#include "nvml/events.h"

namespace kgpu::deviceplugin {

struct GpuHealth {
    std::string uuid;
    bool healthy = true;
    std::string reason;  // why it is unhealthy (or how it recovered)
    // MIG devices (by MIG UUID) unhealthy on their own while the GPU is healthy, with the reason.
    std::map<std::string, std::string> unhealthy_migs;
};

class HealthMonitor {
public:
    // Called from the monitor thread after every change, with the health of every GPU (indexed
    // like node.gpus).
    using Callback = std::function<void(const std::vector<GpuHealth>&)>;
    // Called from the monitor thread when a GPU reports a MIG configuration change (its index).
    using MigChange = std::function<void(unsigned gpu)>;

    static constexpr std::chrono::milliseconds kProbeInterval{1000};
    static constexpr std::chrono::milliseconds kIdleProbeInterval{10000};
    // How long one nvmlEventSetWait may block (less when a probe is due sooner): how often an
    // idle thread wakes up, and what stop() may have to wait for, since NVML's wait cannot be
    // interrupted. 500 ms: two wake-ups a second where 50 ms gave twenty, most of an idle
    // plugin's CPU (issue #23). A process that exits does not wait for it: stop_within().
    static constexpr std::chrono::milliseconds kEventWait{500};

    // The clock the monitor decides by (Envoy's TimeSource idea): steady_clock and kEventWait in
    // production. A test passes a clock it advances and a short event wait, so a probe runs
    // exactly when the test moves time past it, and passes() tells it the thread has looked.
    struct TimeSource {
        std::function<std::chrono::steady_clock::time_point()> now = [] { return std::chrono::steady_clock::now(); };
        std::chrono::milliseconds event_wait = kEventWait;
    };

    // `probe_interval`: how often every GPU is probed (answers? anything pending?) while anything
    // is Unhealthy; `idle_probe_interval`: while everything is Healthy (see above).
    HealthMonitor(nvml::Session session, const inventory::Node& node, HealthConfig policy, Callback on_change,
                  std::chrono::milliseconds probe_interval = kProbeInterval, MigChange on_mig_change = {},
                  std::chrono::milliseconds idle_probe_interval = kIdleProbeInterval);
    ~HealthMonitor();
    HealthMonitor(const HealthMonitor&) = delete;
    HealthMonitor& operator=(const HealthMonitor&) = delete;

    // Before start(): the clock to decide by (default: the real one).
    void set_time_source(TimeSource time) { time_ = std::move(time); }
    // Probes every GPU once (so snapshot() reflects the probes from then on), then starts the thread.
    void start();
    // Asks the thread to end at its next wake-up (within kEventWait) without waiting for it, so a
    // caller can tear down other things meanwhile; stop() then joins. Idempotent.
    void request_stop() { stop_ = true; }
    // Ends the thread and joins it (up to kEventWait); idempotent.
    void stop();
    // For a process on its way out: asks the thread to end and joins it if it does within
    // `grace`. Returns false when it is still inside NVML's wait: then the monitor must not be
    // destroyed (the destructor would join); the caller ends the process instead (std::_Exit),
    // which is safe at that point since the thread holds nothing the process must release.
    bool stop_within(std::chrono::milliseconds grace);
    std::vector<GpuHealth> snapshot() const;
    // A rediscovered node (after a MIG change): GPUs keep their state by UUID, MIG devices by MIG
    // UUID (new ones start Healthy); events are registered again. Thread-safe.
    void update_node(const inventory::Node& node);
    // Number of Healthy<->Unhealthy transitions so far (for logs and metrics).
    unsigned long transitions() const { return transitions_.load(); }
    // Probe rounds (every GPU once) so far, the one in start() included (tests, logs).
    unsigned long probe_rounds() const { return probe_rounds_.load(); }
    // Passes of the thread's loop so far: each waited for events, looked at the clock and probed
    // if due (tests: after moving their clock, two more passes mean the thread saw the new time).
    unsigned long passes() const { return passes_.load(); }
    // Times a probe took a new NVML handle because the old one was refused (a GPU came back).
    unsigned long handles_retaken() const { return handles_retaken_.load(); }

private:
    enum class Bad { none, recoverable, reset, lost };
    // The health state of a GPU or of one MIG device.
    struct State {
        std::string label;         // "GPU 1 (GPU-...)" / "MIG device 1:2 (MIG-...)" for logs
        bool healthy = true;
        std::string reason;
        Bad bad = Bad::none;
        std::chrono::steady_clock::time_point last_bad{};
        // What a reset-class state waits for, seen since it last turned Unhealthy (set_unhealthy
        // clears both on that transition: a GPU seen gone while this was still Healthy proves
        // nothing about a later XID).
        bool saw_gone = false;     // the GPU stopped answering
        bool saw_pending = false;  // the GPU showed pending state (remapped rows, recovery action)
    };
    struct Mig {
        std::string uuid;
        unsigned gi = 0, ci = 0;
        State state;
    };
    struct Gpu {
        std::string uuid;
        unsigned index = 0;  // NVML's, as discovered
        std::optional<nvml::Device> device;
        State state;
        std::vector<Mig> migs;
        bool answering = true;  // as the latest probe saw it (a change is logged: tests wait on it)
        bool retaken = false;   // the probe took a new handle: the events register with it
    };

    static std::vector<Gpu> make_gpus(const nvml::Session& session, const inventory::Node& node);
    void run();
    bool rebuild_events(std::optional<nvml::EventSet>& set);
    // A new set registered, then what the old one still holds handled (run's thread).
    void replace_events(std::optional<nvml::EventSet>& set);
    void handle_event(const nvml::Event& e);
    // One bounded wait on `set` (reset when the wait fails), the event handled.
    void wait_for_event(std::optional<nvml::EventSet>& set, std::chrono::steady_clock::time_point last_probe,
                        int& failures);
    // Probes every GPU. true: one came back (answers again, or has a new handle).
    bool probe_all();
    void on_xid(size_t gpu, unsigned xid, unsigned gi, unsigned ci);
    void probe(size_t gpu);
    void set_unhealthy(State& s, Bad bad, std::string reason);
    void set_healthy(State& s, std::string reason);
    // Recovery of a State that is unhealthy by itself, after a clean probe of its GPU.
    void maybe_recover(State& s, std::chrono::steady_clock::time_point now);
    void notify();
    std::vector<GpuHealth> snapshot_locked() const;
    // Every GPU answers and nothing is Unhealthy: the slow probe cadence applies.
    bool calm_locked() const;
    // The probe interval the state asks for now (takes mu_).
    std::chrono::milliseconds probe_interval_now();

    nvml::Session session_;
    HealthConfig policy_;
    std::chrono::milliseconds probe_interval_;
    std::chrono::milliseconds idle_probe_interval_;
    Callback on_change_;
    MigChange on_mig_change_;
    mutable std::mutex mu_;
    std::vector<Gpu> gpus_;
    bool changed_ = false;
    std::atomic<bool> rebuild_{false};  // update_node asks the thread to register events again
    std::atomic<bool> stop_{false};
    std::atomic<unsigned long> transitions_{0};
    std::atomic<unsigned long> probe_rounds_{0};
    std::atomic<unsigned long> passes_{0};
    std::atomic<unsigned long> handles_retaken_{0};
    TimeSource time_;
    std::chrono::steady_clock::time_point started_{};  // when start()'s probe round ran
    std::mutex exit_mu_;
    std::condition_variable exit_cv_;
    bool exited_ = false;  // run() returned (guarded by exit_mu_)
    std::thread thread_;
};

}  // namespace kgpu::deviceplugin
