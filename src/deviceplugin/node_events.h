// What the device plugin tells the Kubernetes API about GPU health (issue #27 part 2): an Event
// on the Node per change (kube/events.h posts them) and, on request, a node annotation with each
// GPU's health for tools. Pure functions: the plugin calls them under its lock.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "deviceplugin/health.h"

namespace kgpu::deviceplugin {

inline constexpr const char* kReasonUnhealthy = "GPUUnhealthy";
inline constexpr const char* kReasonHealthy = "GPUHealthy";
// The node annotation --node-health-annotation writes (JSON, see health_annotation()).
inline constexpr const char* kHealthAnnotation = "kgpu/gpu-health";

struct HealthNotice {
    std::string type;    // "Warning" (Unhealthy) or "Normal" (Healthy again)
    std::string reason;  // kReasonUnhealthy or kReasonHealthy
    std::string message;
};

// The notices for the change from `before` to `after` (both indexed like the node's GPUs; a GPU
// is matched by UUID, one missing from `before` counts as Healthy): a GPU or a MIG device that
// turned Unhealthy (Warning, with the GPU's index and UUID, the health monitor's reason — the XID
// and its meaning, or the pending state — the devices it takes away and the action to take) or
// Healthy again (Normal). `devices_of(index)` words what the GPU backs ("1 nvidia.com/gpu
// device"); empty leaves it out.
std::vector<HealthNotice> health_notices(const std::vector<GpuHealth>& before, const std::vector<GpuHealth>& after,
                                         const std::function<std::string(unsigned)>& devices_of);

// An MPS resource's control daemon stopped or started answering.
HealthNotice mps_notice(const std::string& resource, bool up, const std::string& why, std::size_t replicas);

// {"<GPU UUID>": {"index": 3, "healthy": false, "reason": "...", "unhealthyMigs": {"<MIG UUID>":
// "..."}}, ...}: reason only while Unhealthy, unhealthyMigs only when any.
std::string health_annotation(const std::vector<GpuHealth>& health);

}  // namespace kgpu::deviceplugin
