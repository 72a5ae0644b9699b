#include "deviceplugin/health.h"

#include <algorithm>
#include <utility>

#include "common/duration.h"
#include "common/log.h"
#include "nvml/events.h"
#include "nvml/xid.h"

namespace kgpu::deviceplugin {

std::vector<HealthMonitor::Gpu> HealthMonitor::make_gpus(const nvml::Session& session, const inventory::Node& node) {
    std::vector<Gpu> gpus;
    for (const auto& g : node.gpus) {
        Gpu gpu;
        gpu.uuid = g.uuid;
        gpu.index = g.index;
        gpu.state.label = fmt::format("GPU {} ({})", g.index, g.uuid);
        if (auto d = session.device_by_index(g.index)) gpu.device = *d;
        if (g.lost) {
            gpu.state.healthy = false;
            gpu.state.reason = "GPU is lost: " + g.error;
            gpu.state.bad = Bad::lost;
            gpu.state.saw_gone = true;
            gpu.answering = false;
        }
        for (const auto& m : g.mig_devices) {
            Mig mig;
            mig.uuid = m.uuid;
            mig.gi = m.gpu_instance_id;
            mig.ci = m.compute_instance_id;
            mig.state.label = fmt::format("MIG device {}:{} ({})", g.index, m.index, m.uuid);
            gpu.migs.push_back(std::move(mig));
        }
        gpus.push_back(std::move(gpu));
    }
    return gpus;
}

HealthMonitor::HealthMonitor(nvml::Session session, const inventory::Node& node, HealthConfig policy,
                             Callback on_change, std::chrono::milliseconds probe_interval, MigChange on_mig_change,
                             std::chrono::milliseconds idle_probe_interval)
    : session_(std::move(session)),
      policy_(std::move(policy)),
      probe_interval_(probe_interval),
      idle_probe_interval_(std::max(idle_probe_interval, probe_interval)),
      on_change_(std::move(on_change)),
      on_mig_change_(std::move(on_mig_change)) {
    gpus_ = make_gpus(session_, node);
}

HealthMonitor::~HealthMonitor() { stop(); }

void HealthMonitor::start() {
    if (thread_.joinable()) return;
    stop_ = false;
    {
        std::lock_guard lk(exit_mu_);
        exited_ = false;
    }
    // Probe every GPU once before returning, so that a snapshot taken now already says what the
    // probes see (issue #12: the first ListAndWatch list after a restart must not call a GPU with
    // a reset pending Healthy).
    {
        std::lock_guard lk(mu_);
        for (size_t i = 0; i < gpus_.size(); ++i) probe(i);
    }
    ++probe_rounds_;
    started_ = time_.now();
    thread_ = std::thread([this] { run(); });
}

void HealthMonitor::stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
}

bool HealthMonitor::stop_within(std::chrono::milliseconds grace) {
    stop_ = true;
    if (!thread_.joinable()) return true;
    {
        std::unique_lock lk(exit_mu_);
        if (!exit_cv_.wait_for(lk, grace, [this] { return exited_; })) return false;
    }
    thread_.join();
    return true;
}

std::vector<GpuHealth> HealthMonitor::snapshot_locked() const {
    std::vector<GpuHealth> out;
    out.reserve(gpus_.size());
    for (const auto& g : gpus_) {
        GpuHealth h{g.uuid, g.state.healthy, g.state.reason, {}};
        for (const auto& m : g.migs)
            if (!m.state.healthy) h.unhealthy_migs.emplace(m.uuid, m.state.reason);
        out.push_back(std::move(h));
    }
    return out;
}

std::chrono::milliseconds HealthMonitor::probe_interval_now() {
    std::lock_guard lk(mu_);
    return calm_locked() ? idle_probe_interval_ : probe_interval_;
}

bool HealthMonitor::calm_locked() const {
    return std::all_of(gpus_.begin(), gpus_.end(), [](const Gpu& g) {
        return g.answering && g.state.healthy &&
               std::all_of(g.migs.begin(), g.migs.end(), [](const Mig& m) { return m.state.healthy; });
    });
}

std::vector<GpuHealth> HealthMonitor::snapshot() const {
    std::lock_guard lk(mu_);
    return snapshot_locked();
}

void HealthMonitor::update_node(const inventory::Node& node) {
    std::vector<Gpu> fresh = make_gpus(session_, node);
    std::lock_guard lk(mu_);
    for (auto& g : fresh) {
        auto old = std::find_if(gpus_.begin(), gpus_.end(), [&](const Gpu& o) { return o.uuid == g.uuid; });
        if (old == gpus_.end()) continue;
        if (!old->state.healthy && g.state.healthy) g.state = old->state;  // discovery's "lost" wins over old state
        for (auto& m : g.migs) {
            auto om = std::find_if(old->migs.begin(), old->migs.end(), [&](const Mig& x) { return x.uuid == m.uuid; });
            if (om != old->migs.end()) m.state = om->state;
        }
    }
    gpus_ = std::move(fresh);
    changed_ = true;
    rebuild_ = true;
}

void HealthMonitor::set_unhealthy(State& s, Bad bad, std::string reason) {
    s.last_bad = time_.now();
    // Healthy -> Unhealthy: what a reset must show starts now. A MIG device's flags may hold what
    // probes saw of its GPU while the device was still Healthy (lost, restored, then a reset-class
    // XID on the device must not count the earlier absence as its reset).
    if (s.healthy) s.saw_gone = s.saw_pending = false;
    // A worse class replaces a milder one; a milder one never downgrades a worse one.
    if (static_cast<int>(bad) > static_cast<int>(s.bad)) s.bad = bad;
    if (bad == Bad::lost) s.saw_gone = true;
    if (!s.healthy) {
        // Probes find the same state every interval: only a new event is worth a line.
        if (reason.starts_with("XID")) log::info("{} still unhealthy, new {}", s.label, reason);
        return;
    }
    s.healthy = false;
    s.reason = std::move(reason);
    ++transitions_;
    changed_ = true;
    log::warn("{} is now Unhealthy: {}", s.label, s.reason);
}

void HealthMonitor::set_healthy(State& s, std::string reason) {
    if (s.healthy) return;
    s.healthy = true;
    s.reason = std::move(reason);
    s.bad = Bad::none;
    s.saw_gone = s.saw_pending = false;
    ++transitions_;
    changed_ = true;
    log::info("{} is Healthy again: {}", s.label, s.reason);
}

void HealthMonitor::on_xid(size_t i, unsigned xid, unsigned gi, unsigned ci) {
    const XidClass cls = policy_.classify(xid);
    std::string_view meaning = nvml::xid_meaning(xid);
    std::string what = meaning.empty() ? fmt::format("XID {}", xid) : fmt::format("XID {} ({})", xid, meaning);
    std::lock_guard lk(mu_);
    if (i >= gpus_.size()) return;  // the node was read again since the event was taken
    Gpu& g = gpus_[i];
    if (cls == XidClass::ignored) {
        log::info("{}: {} ignored by the health policy", g.state.label, what);
        return;
    }
    // XID 79 (fell off the bus) is reset-class like the others: the GPU answering again proves
    // nothing until it was seen gone and back (or its pending state cleared), whatever probes say
    // meanwhile (issue #13: it used to recover on the first clean probe, about a second later).
    Bad bad = Bad::reset;
    std::string reason = fmt::format("{}; needs a GPU reset", what);
    if (cls == XidClass::recoverable) {
        bad = Bad::recoverable;
        // Whole seconds ("5m") unless a test shortened it ("300ms").
        reason = fmt::format("{}; recovers after {} without another critical XID", what,
                             format_duration(policy_.recovery_period));
    }
    // An instance-specific XID (not 79: the whole GPU fell off the bus) marks the matching MIG
    // devices only.
    bool marked = false;
    bool unseen = false;  // a state now waiting for a reset that no probe has looked at yet
    if (gi != nvml::kNoInstance && xid != 79) {
        for (auto& m : g.migs) {
            if (m.gi != gi || (ci != nvml::kNoInstance && m.ci != ci)) continue;
            marked = true;
            set_unhealthy(m.state, bad, fmt::format("{} on GPU instance {} compute instance {}", reason, gi, m.ci));
            unseen |= !m.state.saw_pending && !m.state.saw_gone;
        }
        if (!marked)
            log::warn("{}: {} names GPU instance {} compute instance {}, which no advertised MIG device has: marking "
                      "the whole GPU",
                      g.state.label, what, gi, ci == nvml::kNoInstance ? std::string("(any)") : std::to_string(ci));
    }
    if (!marked) {
        set_unhealthy(g.state, bad, std::move(reason));
        unseen = !g.state.saw_pending && !g.state.saw_gone;
    }
    // What a reset has to clear (remapped rows, a recovery action) is read now, with the XID, not
    // at the next probe: a reset done before that probe (within the probe interval, or a probe
    // late on a busy node) would otherwise leave nothing seen pending, and the device would wait
    // for a reset that already happened. Once per wait: a storm of XIDs costs no more probes.
    if (bad == Bad::reset && unseen) probe(i);
}

void HealthMonitor::maybe_recover(State& s, std::chrono::steady_clock::time_point now) {
    if (s.healthy) return;
    switch (s.bad) {
        case Bad::none:
        case Bad::lost:
            set_healthy(s, "GPU answers again and nothing is pending");
            break;
        case Bad::recoverable:
            if (now - s.last_bad >= policy_.recovery_period) set_healthy(s, "quiet period passed with clean probes");
            break;
        case Bad::reset:
            if (s.saw_gone || s.saw_pending) set_healthy(s, "GPU was reset: answers and nothing is pending");
            break;
    }
}

void HealthMonitor::probe(size_t i) {
    Gpu& g = gpus_[i];
    if (!g.device) return;
    auto uuid = g.device->uuid();
    if (!uuid && uuid.error().code == Code::stale) {
        // The GPU answers again after GPU_IS_LOST, and NVML handles from before are refused (the
        // nvml layer's handle generations): take a new one (by UUID; by index where the driver
        // cannot look one up by UUID), which the events register with too.
        auto d = session_.device_by_uuid(g.uuid);
        if (!d) d = session_.device_by_index(g.index);
        if (d) {
            log::info("{}: NVML handle taken again ({})", g.state.label, uuid.error().message);
            g.device = std::move(*d);
            g.retaken = true;
            ++handles_retaken_;
            uuid = g.device->uuid();
        }
    }
    if (!uuid) {
        if (g.answering) log::info("{} stopped answering: {}", g.state.label, uuid.error().message);
        g.answering = false;
        if (uuid.error().code == Code::gpu_lost || g.state.healthy)
            set_unhealthy(g.state, Bad::lost, fmt::format("GPU not answering: {}", uuid.error().message));
        // Only states already Unhealthy wait for this; a Healthy one is not "reset" by it later.
        if (!g.state.healthy) g.state.saw_gone = true;
        for (auto& m : g.migs)
            if (!m.state.healthy) m.state.saw_gone = true;
        return;
    }
    if (!g.answering) log::info("{} answers again", g.state.label);
    g.answering = true;
    // With health checks disabled only a GPU that stops answering turns Unhealthy.
    if (policy_.disabled) {
        if (!g.state.healthy && g.state.bad == Bad::lost) set_healthy(g.state, "GPU answers again");
        return;
    }
    std::string pending;
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
        set_unhealthy(g.state, Bad::reset, pending + "; needs a GPU reset");
        g.state.saw_pending = true;
        for (auto& m : g.migs)
            if (!m.state.healthy) m.state.saw_pending = true;
        return;
    }
    const auto now = time_.now();
    maybe_recover(g.state, now);
    for (auto& m : g.migs) maybe_recover(m.state, now);
}

bool HealthMonitor::rebuild_events(std::optional<nvml::EventSet>& set) {
    set.reset();
    auto s = nvml::EventSet::create(session_);
    if (!s) {
        log::warn("health: cannot create an NVML event set: {}", s.error().message);
        return false;
    }
    std::lock_guard lk(mu_);
    for (size_t i = 0; i < gpus_.size(); ++i) {
        if (!gpus_[i].device) continue;
        auto r = s->add(*gpus_[i].device, nvml::kEventXid | nvml::kEventMigConfigChange, static_cast<int>(i));
        if (!r) log::warn("health: GPU {}: cannot register for XID events: {}", i, r.error().message);
    }
    set.emplace(std::move(*s));
    return true;
}

void HealthMonitor::handle_event(const nvml::Event& e) {
    size_t n = 0;
    {
        std::lock_guard lk(mu_);
        n = gpus_.size();
    }
    if (e.key < 0 || static_cast<size_t>(e.key) >= n) return;
    if (e.type == nvml::kEventXid) {
        on_xid(static_cast<size_t>(e.key), static_cast<unsigned>(e.data), e.gpu_instance_id, e.compute_instance_id);
    } else if (e.type == nvml::kEventMigConfigChange) {
        log::info("GPU {}: MIG configuration changed", e.key);
        if (on_mig_change_) on_mig_change_(static_cast<unsigned>(e.key));
    }
}

// The new set registers before the old one goes, and what the old one still holds is handled: an
// event queued between the last wait and a rebuild (e.g. the next MIG change right after one) is
// not lost with it.
void HealthMonitor::replace_events(std::optional<nvml::EventSet>& set) {
    std::optional<nvml::EventSet> old;
    old.swap(set);
    rebuild_events(set);
    while (old) {
        auto ev = old->wait(0);
        if (!ev || !*ev) break;
        handle_event(**ev);
    }
}

void HealthMonitor::wait_for_event(std::optional<nvml::EventSet>& set, std::chrono::steady_clock::time_point last_probe,
                                   int& failures) {
    // Bounded waits, as NVML's cannot be interrupted: stop() joins this thread. Not shorter than
    // needed: every wake-up costs CPU on an idle node (issue #23); the next probe may ask for a
    // shorter one.
    const auto until_probe =
        std::chrono::duration_cast<std::chrono::milliseconds>(last_probe + probe_interval_now() - time_.now());
    const auto wait = std::clamp(until_probe, std::chrono::milliseconds(1), time_.event_wait);
    auto ev = set->wait(static_cast<unsigned>(wait.count()));
    if (!ev) {
        ++failures;
        {
            std::lock_guard lk(mu_);
            for (auto& g : gpus_)
                set_unhealthy(g.state, Bad::lost, fmt::format("NVML event wait failed: {}", ev.error().message));
        }
        set.reset();
    } else if (*ev && (*ev)->key >= 0) {
        failures = 0;
        handle_event(**ev);
    }
}

bool HealthMonitor::probe_all() {
    bool came_back = false;
    std::lock_guard lk(mu_);
    for (size_t i = 0; i < gpus_.size(); ++i) {
        Gpu& g = gpus_[i];
        const bool was_lost = g.state.bad == Bad::lost, was_answering = g.answering;
        probe(i);
        came_back |= (was_lost && g.state.healthy) || (!was_answering && g.answering) || std::exchange(g.retaken, false);
    }
    return came_back;
}

void HealthMonitor::run() {
    std::optional<nvml::EventSet> set;
    rebuild_events(set);
    // The start() round was the first probe; the next comes after the interval the state asks for.
    auto last_probe = started_;
    int failures = 0;
    while (!stop_) {
        if (rebuild_.exchange(false)) replace_events(set);
        if (!set) {
            // Back off instead of spinning on a broken driver.
            std::this_thread::sleep_for(std::chrono::milliseconds(std::min(200 * (1 << std::min(failures, 4)), 2000)));
            if (stop_) break;
            if (!rebuild_events(set)) ++failures;
        } else {
            wait_for_event(set, last_probe, failures);
        }
        const auto now = time_.now();
        // Decided on every pass: an XID that just arrived brings the fast cadence at once.
        if (now >= last_probe + probe_interval_now()) {
            last_probe = now;
            const bool came_back = probe_all();
            ++probe_rounds_;
            // A GPU that came back (healthy, or answering again while it waits for pending state to
            // clear) may have lost its event registration, and one with a new handle registers
            // with that: register everything again.
            if (came_back) replace_events(set);
        }
        notify();
        ++passes_;
    }
    std::lock_guard lk(exit_mu_);
    exited_ = true;
    exit_cv_.notify_all();
}

void HealthMonitor::notify() {
    std::vector<GpuHealth> snap;
    {
        std::lock_guard lk(mu_);
        if (!changed_) return;
        changed_ = false;
        snap = snapshot_locked();
    }
    if (on_change_) on_change_(snap);
}

}  // namespace kgpu::deviceplugin
