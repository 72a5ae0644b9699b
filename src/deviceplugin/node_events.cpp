// GPU health for the Kubernetes API (node_events.h).
#include "deviceplugin/node_events.h"

#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/json.h"

namespace kgpu::deviceplugin {
namespace {

// The catalogue's action for the health monitor's reason (health.cpp words them).
std::string action_for(const std::string& reason, unsigned index) {
    if (reason.find("needs a GPU reset") != std::string::npos)
        return fmt::format("Action: drain the GPU's pods, then reset it (nvidia-smi --gpu-reset -i {}) or reboot the node; "
                           "kgpu marks it Healthy once it answers with nothing pending",
                           index);
    if (reason.find("recovers after") != std::string::npos)
        return "Action: none unless it repeats; kgpu marks it Healthy after the quiet period with clean probes";
    if (reason.find("not answering") != std::string::npos || reason.find("lost") != std::string::npos ||
        reason.find("event wait failed") != std::string::npos)
        return "Action: read the kernel log (XID 79: the GPU fell off the bus); a reboot or a reseat is usually needed";
    return "Action: run `kgpu doctor` on the node";
}

std::string takes(const std::function<std::string(unsigned)>& devices_of, unsigned index) {
    if (!devices_of) return {};
    const std::string what = devices_of(index);
    return what.empty() ? std::string() : fmt::format(" ({} no longer allocatable)", what);
}

}  // namespace

std::vector<HealthNotice> health_notices(const std::vector<GpuHealth>& before, const std::vector<GpuHealth>& after,
                                         const std::function<std::string(unsigned)>& devices_of) {
    std::map<std::string, const GpuHealth*> was;
    for (const auto& h : before) was[h.uuid] = &h;
    std::vector<HealthNotice> out;
    for (unsigned i = 0; i < after.size(); ++i) {
        const GpuHealth& now = after[i];
        const auto it = was.find(now.uuid);
        const GpuHealth* prev = it == was.end() ? nullptr : it->second;
        const bool was_healthy = !prev || prev->healthy;
        const std::string gpu = fmt::format("GPU {} ({})", i, now.uuid);
        if (was_healthy && !now.healthy)
            out.push_back({"Warning", kReasonUnhealthy,
                           fmt::format("{} is Unhealthy: {}{}. {}", gpu, now.reason, takes(devices_of, i), action_for(now.reason, i))});
        if (!was_healthy && now.healthy)
            out.push_back({"Normal", kReasonHealthy, fmt::format("{} is Healthy again: {}", gpu, now.reason)});
        // MIG devices on their own, while the GPU itself is Healthy (an Unhealthy GPU takes them all).
        if (!now.healthy) continue;
        auto was_bad = [&](const std::string& mig) { return prev && (!prev->healthy || prev->unhealthy_migs.contains(mig)); };
        for (const auto& [mig, why] : now.unhealthy_migs)
            if (!was_bad(mig))
                out.push_back({"Warning", kReasonUnhealthy,
                               fmt::format("MIG device {} on {} is Unhealthy: {}. {}", mig, gpu, why, action_for(why, i))});
        if (prev && prev->healthy)
            for (const auto& [mig, why] : prev->unhealthy_migs)
                if (!now.unhealthy_migs.contains(mig))
                    out.push_back({"Normal", kReasonHealthy, fmt::format("MIG device {} on {} is Healthy again", mig, gpu)});
    }
    return out;
}

HealthNotice mps_notice(const std::string& resource, bool up, const std::string& why, std::size_t replicas) {
    if (up)
        return {"Normal", kReasonHealthy,
                fmt::format("the MPS control daemon of {} answers again: its {} replicas are Healthy", resource, replicas)};
    return {"Warning", kReasonUnhealthy,
            fmt::format("the MPS control daemon of {} does not answer ({}): its {} replicas are Unhealthy. Action: see "
                        "the kgpu mps-control-daemon pod's log on this node",
                        resource, why, replicas)};
}

std::string health_annotation(const std::vector<GpuHealth>& health) {
    nlohmann::json out = nlohmann::json::object();
    for (unsigned i = 0; i < health.size(); ++i) {
        const GpuHealth& h = health[i];
        nlohmann::json g = {{"index", i}, {"healthy", h.healthy}};
        if (!h.healthy) g["reason"] = h.reason;
        if (!h.unhealthy_migs.empty()) g["unhealthyMigs"] = h.unhealthy_migs;
        out[h.uuid] = std::move(g);
    }
    return kgpu::json::dump_text(out);
}

}  // namespace kgpu::deviceplugin
