// The gRPC questions doctor asks the kubelet's and the device plugin's sockets: a socket that
// accepts connections can still have nobody answering the API behind it.
#pragma once

#include <filesystem>
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

}  // namespace kgpu::doctor
