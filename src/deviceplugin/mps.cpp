#include "deviceplugin/mps.h"

#include <sys/stat.h>

#include <map>

#include "common/log.h"

namespace kgpu::deviceplugin {

std::vector<mps::DaemonSpec> mps_daemon_specs(const std::vector<Resource>& resources, const inventory::Node& node) {
    std::vector<mps::DaemonSpec> out;
    for (const auto& r : resources) {
        if (!r.mps) continue;
        mps::DaemonSpec spec{r.name, {}};
        std::map<std::string, size_t> by_physical;  // physical device id -> position in spec.gpus
        for (const auto& d : r.devices) {
            auto [it, fresh] = by_physical.try_emplace(d.physical_id, spec.gpus.size());
            if (!fresh) {
                ++spec.gpus[it->second].replicas;
                continue;
            }
            mps::SharedGpu g;
            g.index = d.gpu_index;
            g.uuid = d.uuid;
            g.replicas = 1;
            g.mig = d.mig.has_value();
            if (d.gpu_index < node.gpus.size()) {
                const auto& gpu = node.gpus[d.gpu_index];
                g.memory_mib = gpu.memory_total_mib;
                g.cc_major = gpu.cc_major;
                g.cc_minor = gpu.cc_minor;
                if (d.mig)
                    for (const auto& m : gpu.mig_devices)
                        if (m.uuid == d.uuid) g.memory_mib = m.memory_mib;
            }
            spec.gpus.push_back(std::move(g));
        }
        out.push_back(std::move(spec));
    }
    return out;
}

bool shares_with_mps(const Config& config) { return config.sharing.mps.has_value(); }

MpsWatcher::MpsWatcher(std::vector<std::string> resources, Options options, Callback on_change)
    : opts_(std::move(options)), on_change_(std::move(on_change)) {
    for (auto& r : resources) {
        mps::Control control(opts_.control_binary, opts_.root.pipe_dir(r), opts_.root.log_dir(r), opts_.command_timeout);
        watched_.push_back(Watched{r, std::move(control), State{false, "not checked yet"}, "", {}});
    }
}

MpsWatcher::~MpsWatcher() { stop(); }

bool MpsWatcher::check(Watched& w, std::chrono::steady_clock::time_point now) {
    State next = w.state;
    const auto started = opts_.root.started_file(w.resource);
    struct stat sb {};
    if (opts_.control_binary.empty()) {
        next = {false, "no nvidia-cuda-mps-control to ask the MPS control daemon with"};
    } else if (::stat(started.c_str(), &sb) != 0) {
        next = {false, fmt::format("no MPS control daemon runs for it ({} is missing)", started.string())};
        w.started_key.clear();
    } else {
        const std::string key = fmt::format("{}:{}.{}", sb.st_ino, sb.st_mtim.tv_sec, sb.st_mtim.tv_nsec);
        const bool fresh = key != w.started_key;
        const auto since = now - w.last_probe;
        if (fresh || (!w.state.up && since >= opts_.retry_interval) || since >= opts_.probe_interval) {
            w.last_probe = now;
            if (auto r = w.control.send(mps::kProbeCommand); r) {
                next = {true, "answering"};
                w.started_key = key;
            } else {
                next = {false, r.error().message};
                w.started_key = key;  // asked again after retry_interval, not on every tick
            }
        }
    }
    const bool changed = next.up != w.state.up || (!next.up && next.reason != w.state.reason);
    if (changed) {
        if (next.up)
            log::info("MPS {}: the control daemon answers: its devices are Healthy", w.resource);
        else
            log::warn("MPS {}: its devices are Unhealthy: {}", w.resource, next.reason);
    }
    std::lock_guard lk(mu_);
    w.state = std::move(next);
    return changed;
}

void MpsWatcher::start() {
    const auto now = std::chrono::steady_clock::now();
    for (auto& w : watched_) check(w, now);
    {
        std::lock_guard lk(stop_mu_);
        stopping_ = false;
    }
    thread_ = std::thread([this] { run(); });
}

void MpsWatcher::stop() {
    {
        std::lock_guard lk(stop_mu_);
        stopping_ = true;
    }
    stop_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

std::map<std::string, MpsWatcher::State> MpsWatcher::snapshot() const {
    std::lock_guard lk(mu_);
    std::map<std::string, State> out;
    for (const auto& w : watched_) out[w.resource] = w.state;
    return out;
}

void MpsWatcher::run() {
    for (;;) {
        {
            std::unique_lock lk(stop_mu_);
            if (stop_cv_.wait_for(lk, opts_.watch_interval, [this] { return stopping_; })) return;
        }
        bool changed = false;
        const auto now = std::chrono::steady_clock::now();
        for (auto& w : watched_) changed |= check(w, now);
        if (changed && on_change_) on_change_(snapshot());
    }
}

}  // namespace kgpu::deviceplugin
