// GPU health for the device plugin: an NVML event thread plus periodic probes, with recovery by
// class (shared/facts/diagnostics.md "Recovery classes"), unlike NVIDIA's plugin where Unhealthy
// is final:
//  - application-caused XIDs (ignored list) change nothing;
//  - recoverable XIDs (e.g. 92, 94): Unhealthy, Healthy again after `recovery_period` with no new
//    critical XID and clean probes;
//  - reset-class XIDs (48, 62, 63, 64, 74, 79, 95, 119, 120, 140, 143, and any XID not named
//    elsewhere), pending remapped rows / page retirement, a row-remap failure or a recovery action
//    other than NONE: Unhealthy until the GPU has been reset — seen as the GPU going away and
//    answering again, or the pending state it showed clearing — and probes are clean;
//  - a GPU that does not answer (GPU_IS_LOST) is Unhealthy while it is gone.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
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
    bool healthy = true;
    std::string reason;  // why it is unhealthy (or how it recovered)
};

class HealthMonitor {
public:
    // Called from the monitor thread after every change, with the health of every GPU (indexed
    // like node.gpus).
    using Callback = std::function<void(const std::vector<GpuHealth>&)>;

    // `probe_interval`: how often every GPU is probed (answers? anything pending?).
    HealthMonitor(nvml::Session session, const inventory::Node& node, HealthConfig policy, Callback on_change,
                  std::chrono::milliseconds probe_interval = std::chrono::seconds(1));
    ~HealthMonitor();
    HealthMonitor(const HealthMonitor&) = delete;
    HealthMonitor& operator=(const HealthMonitor&) = delete;

    void start();
    void stop();
    std::vector<GpuHealth> snapshot() const;
    // Number of Healthy<->Unhealthy transitions so far (for logs and metrics).
    unsigned long transitions() const { return transitions_.load(); }

private:
    enum class Bad { none, recoverable, reset, lost };
    struct Gpu {
        std::string uuid;
        std::optional<nvml::Device> device;
        GpuHealth health;
        Bad bad = Bad::none;
        std::chrono::steady_clock::time_point last_bad{};
        bool saw_gone = false;     // stopped answering after it became unhealthy
        bool saw_pending = false;  // showed pending state after it became unhealthy
    };

    void run();
    bool rebuild_events(std::optional<nvml::EventSet>& set);
    void on_xid(size_t gpu, unsigned xid);
    void probe(size_t gpu);
    void set_unhealthy(size_t gpu, Bad bad, std::string reason);
    void set_healthy(size_t gpu, std::string reason);
    void notify();

    nvml::Session session_;
    HealthConfig policy_;
    std::chrono::milliseconds probe_interval_;
    Callback on_change_;
    mutable std::mutex mu_;
    std::vector<Gpu> gpus_;
    bool changed_ = false;
    std::atomic<bool> stop_{false};
    std::atomic<unsigned long> transitions_{0};
    std::thread thread_;
};

}  // namespace kgpu::deviceplugin
