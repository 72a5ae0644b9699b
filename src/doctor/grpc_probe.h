// The gRPC questions doctor asks the kubelet's and the device plugin's sockets: a socket that
// accepts connections can still have nobody answering the API behind it.
#pragma once

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "common/error.h"

namespace kgpu::doctor {

// GetDevicePluginOptions on a device-plugin socket. Returns a one-line summary of the options.
// Errors: unavailable, naming the socket and the gRPC status.
Result<std::string> probe_device_plugin(const std::filesystem::path& socket, int timeout_ms = 2000);

// PodResourcesLister/List on the kubelet's PodResources socket. Returns the number of pods listed
// and how many containers hold an nvidia.com device.
struct PodResourcesSummary {
    size_t pods = 0;
    size_t gpu_containers = 0;
};
Result<PodResourcesSummary> probe_pod_resources(const std::filesystem::path& socket, int timeout_ms = 2000);

// The first ListAndWatch message of a device-plugin socket, as device ID -> health; the stream is
// closed right after. Only for kgpu's own sockets: NVIDIA's plugin hands each health event to one
// of its streams, so a probe stream could take one meant for the kubelet. The stream carries the
// metadata `kgpu-probe: 1`, so kgpu does not take it for the kubelet's stream of a registration.
// Errors: unavailable, naming the socket and the gRPC status.
Result<std::map<std::string, std::string>> probe_device_list(const std::filesystem::path& socket,
                                                             int timeout_ms = 2000);

// PodResourcesLister/GetAllocatableResources: the device IDs the kubelet counts as allocatable,
// per resource name. Errors: not_supported when the kubelet does not offer it (before v1.23, or
// the KubeletPodResourcesGetAllocatable feature gate off), unavailable otherwise.
Result<std::map<std::string, std::set<std::string>>> probe_allocatable(const std::filesystem::path& socket,
                                                                       int timeout_ms = 2000);

}  // namespace kgpu::doctor
