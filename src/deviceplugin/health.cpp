#include "deviceplugin/health.h"

#include "common/log.h"
#include "nvml/events.h"
#include "nvml/xid.h"

namespace kgpu::deviceplugin {

HealthMonitor::HealthMonitor(nvml::Session session, const inventory::Node& node, HealthConfig policy,
                             Callback on_change, std::chrono::milliseconds probe_interval)
    : session_(std::move(session)),
      policy_(std::move(policy)),
      probe_interval_(probe_interval),
      on_change_(std::move(on_change)) {
    for (const auto& g : node.gpus) {
        Gpu gpu;
        gpu.uuid = g.uuid;
        if (auto d = session_.device_by_index(g.index)) gpu.device = *d;
        if (g.lost) {
            gpu.health = {false, "GPU is lost: " + g.error};
            gpu.bad = Bad::lost;
            gpu.saw_gone = true;
        }
        gpus_.push_back(std::move(gpu));
    }
}

HealthMonitor::~HealthMonitor() { stop(); }

void HealthMonitor::start() {
    if (thread_.joinable()) return;
    stop_ = false;
    thread_ = std::thread([this] { run(); });
}

void HealthMonitor::stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
}

std::vector<GpuHealth> HealthMonitor::snapshot() const {
    std::lock_guard lk(mu_);
    std::vector<GpuHealth> out;
    for (const auto& g : gpus_) out.push_back(g.health);
    return out;
}

void HealthMonitor::set_unhealthy(size_t i, Bad bad, std::string reason) {
    Gpu& g = gpus_[i];
    g.last_bad = std::chrono::steady_clock::now();
    // A worse class replaces a milder one; a milder one never downgrades a worse one.
    if (static_cast<int>(bad) > static_cast<int>(g.bad)) g.bad = bad;
    if (bad == Bad::lost) g.saw_gone = true;
    if (!g.health.healthy) {
        // Probes find the same state every interval: only a new event is worth a line.
        if (reason.starts_with("XID")) log::info("GPU {} ({}) still unhealthy, new {}", i, g.uuid, reason);
        return;
    }
    g.health = {false, reason};
    ++transitions_;
    changed_ = true;
    log::warn("GPU {} ({}) is now Unhealthy: {}", i, g.uuid, reason);
}

void HealthMonitor::set_healthy(size_t i, std::string reason) {
    Gpu& g = gpus_[i];
    if (g.health.healthy) return;
    g.health = {true, reason};
    g.bad = Bad::none;
    g.saw_gone = g.saw_pending = false;
    ++transitions_;
    changed_ = true;
    log::info("GPU {} ({}) is Healthy again: {}", i, g.uuid, reason);
}

void HealthMonitor::on_xid(size_t i, unsigned xid) {
    const XidClass cls = policy_.classify(xid);
    std::string_view meaning = nvml::xid_meaning(xid);
    std::string what = meaning.empty() ? fmt::format("XID {}", xid) : fmt::format("XID {} ({})", xid, meaning);
    std::lock_guard lk(mu_);
    if (cls == XidClass::ignored) {
        log::info("GPU {} ({}): {} ignored by the health policy", i, gpus_[i].uuid, what);
        return;
    }
    if (xid == 79) {
        set_unhealthy(i, Bad::lost, what);
    } else if (cls == XidClass::recoverable) {
        set_unhealthy(i, Bad::recoverable,
                      fmt::format("{}; recovers after {}s without another critical XID", what,
                                  std::chrono::duration_cast<std::chrono::seconds>(policy_.recovery_period).count()));
    } else {
        set_unhealthy(i, Bad::reset, fmt::format("{}; needs a GPU reset", what));
    }
}

void HealthMonitor::probe(size_t i) {
    Gpu& g = gpus_[i];
    if (!g.device) return;
    auto uuid = g.device->uuid();
    if (!uuid) {
        if (uuid.error().code == Code::gpu_lost || g.health.healthy)
            set_unhealthy(i, Bad::lost, fmt::format("GPU not answering: {}", uuid.error().message));
        g.saw_gone = true;
        return;
    }
    std::string pending;
    // With health checks disabled only a GPU that stops answering turns Unhealthy.
    if (policy_.disabled) {
        if (!g.health.healthy && g.bad == Bad::lost) set_healthy(i, "GPU answers again");
        return;
    }
    if (auto rows = g.device->remapped_rows()) {
        if (rows->failure) pending = "a row remap failed";
        else if (rows->pending) pending = "remapped rows pending";
    }
    if (pending.empty()) {
        if (auto p = g.device->retired_pages_pending(); p && *p) pending = "page retirement pending";
    }
    if (pending.empty()) {
        if (auto a = g.device->recovery_action(); a && *a != 0) pending = fmt::format("recovery action {} requested", *a);
    }
    if (!pending.empty()) {
        g.saw_pending = true;
        set_unhealthy(i, Bad::reset, pending + "; needs a GPU reset");
        return;
    }
    if (g.health.healthy) return;
    const auto now = std::chrono::steady_clock::now();
    switch (g.bad) {
        case Bad::none:
        case Bad::lost:
            set_healthy(i, "GPU answers again and nothing is pending");
            break;
        case Bad::recoverable:
            if (now - g.last_bad >= policy_.recovery_period)
                set_healthy(i, "quiet period passed with clean probes");
            break;
        case Bad::reset:
            if (g.saw_gone || g.saw_pending) set_healthy(i, "GPU was reset: answers and nothing is pending");
            break;
    }
}

bool HealthMonitor::rebuild_events(std::optional<nvml::EventSet>& set) {
    set.reset();
    auto s = nvml::EventSet::create(session_);
    if (!s) {
        log::warn("health: cannot create an NVML event set: {}", s.error().message);
        return false;
    }
    for (size_t i = 0; i < gpus_.size(); ++i) {
        if (!gpus_[i].device) continue;
        auto r = s->add(*gpus_[i].device, nvml::kEventXid, static_cast<int>(i));
        if (!r) log::warn("health: GPU {}: cannot register for XID events: {}", i, r.error().message);
    }
    set.emplace(std::move(*s));
    return true;
}

void HealthMonitor::run() {
    std::optional<nvml::EventSet> set;
    rebuild_events(set);
    auto next_probe = std::chrono::steady_clock::now();
    int failures = 0;
    while (!stop_) {
        if (!set) {
            // Back off instead of spinning on a broken driver.
            std::this_thread::sleep_for(std::chrono::milliseconds(std::min(200 * (1 << std::min(failures, 4)), 2000)));
            if (stop_) break;
            if (!rebuild_events(set)) ++failures;
        } else {
            auto ev = set->wait(200);
            if (!ev) {
                ++failures;
                {
                    std::lock_guard lk(mu_);
                    for (size_t i = 0; i < gpus_.size(); ++i)
                        set_unhealthy(i, Bad::lost, fmt::format("NVML event wait failed: {}", ev.error().message));
                }
                set.reset();
            } else if (*ev && (*ev)->type == nvml::kEventXid && (*ev)->key >= 0 &&
                       static_cast<size_t>((*ev)->key) < gpus_.size()) {
                failures = 0;
                on_xid(static_cast<size_t>((*ev)->key), static_cast<unsigned>((*ev)->data));
            }
        }
        const auto now = std::chrono::steady_clock::now();
        if (now >= next_probe) {
            next_probe = now + probe_interval_;
            bool came_back = false;
            {
                std::lock_guard lk(mu_);
                for (size_t i = 0; i < gpus_.size(); ++i) {
                    const bool was_lost = gpus_[i].bad == Bad::lost;
                    probe(i);
                    came_back |= was_lost && gpus_[i].health.healthy;
                }
            }
            // A GPU that came back may have lost its event registration: register everything again.
            if (came_back) rebuild_events(set);
        }
        notify();
    }
}

void HealthMonitor::notify() {
    std::vector<GpuHealth> snap;
    {
        std::lock_guard lk(mu_);
        if (!changed_) return;
        changed_ = false;
        for (const auto& g : gpus_) snap.push_back(g.health);
    }
    if (on_change_) on_change_(snap);
}

}  // namespace kgpu::deviceplugin
