// The demo's kubelet emulator: the parts of the kubelet a GPU crosses, as real gRPC over unix
// sockets (proto/: device plugin API v1beta1 and PodResources v1).
//
// - Registration server on <device-plugins dir>/kubelet.sock. On Register (version v1beta1, a
//   resource name with a domain) it dials the plugin's endpoint in the same directory, asks
//   GetDevicePluginOptions, and keeps a ListAndWatch stream open on its own thread, the way the
//   kubelet's device manager does; the latest device list is the node's capacity, and its Healthy
//   devices the allocatable count.
// - prefer() and allocate(): GetPreferredAllocation then Allocate, as the kubelet calls them when
//   it admits a pod (preferred allocation only when the plugin said it offers it).
// - A PodResources v1 server (List, GetAllocatableResources) on its own socket, answering with the
//   pods the demo admitted (add_pod), for the exporter's pod labels and for `kgpu doctor`.
//
// Not emulated: checkpoints, pod admission beyond counting, PreStartContainer, DRA.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "deviceplugin_v1beta1.grpc.pb.h"
#include "podresources_v1.grpc.pb.h"

namespace grpc {
class Server;
}

namespace kgpu::demo {

struct PluginRegistration {
    std::string resource_name;
    std::string endpoint;  // socket file name, relative to the device-plugins dir
    std::string version;
    bool preferred_allocation = false;  // from GetDevicePluginOptions
    std::chrono::steady_clock::time_point when;
};

struct DeviceState {
    std::string id;
    std::string health;  // "Healthy" or "Unhealthy", as the plugin sent it
    std::vector<long> numa;
};

struct DeviceList {
    std::vector<DeviceState> devices;
    int update = 0;  // 1 for the first ListAndWatch message
    std::chrono::steady_clock::time_point when;
    int healthy() const;
};

struct PodAllocation {
    std::string namespace_name, pod, container, resource;
    std::vector<std::string> device_ids;
};

class KubeletEmulator {
public:
    // `device_plugin_dir`: where kubelet.sock is served and plugin endpoints are dialled.
    // `pod_resources_socket`: the PodResources socket path.
    KubeletEmulator(std::string device_plugin_dir, std::string pod_resources_socket);
    ~KubeletEmulator();
    KubeletEmulator(const KubeletEmulator&) = delete;
    KubeletEmulator& operator=(const KubeletEmulator&) = delete;

    std::string kubelet_socket() const { return dir_ + "/kubelet.sock"; }
    const std::string& pod_resources_socket() const { return pod_resources_path_; }

    // Serves both sockets. Errors: io naming the socket that could not be bound.
    Status start();
    // Stops the servers and ends the ListAndWatch stream; idempotent.
    void stop();

    // Waits until `resource` registered and its first device list arrived. `cancelled` is polled
    // every 50 ms. nullopt on timeout or cancellation.
    std::optional<PluginRegistration> wait_registered(const std::string& resource, std::chrono::milliseconds timeout,
                                                      const std::function<bool()>& cancelled);
    // Waits until the latest device list of `resource` satisfies `pred`; returns that list.
    std::optional<DeviceList> wait_devices(const std::string& resource, const std::function<bool(const DeviceList&)>& pred,
                                           std::chrono::milliseconds timeout, const std::function<bool()>& cancelled);
    DeviceList devices(const std::string& resource);

    // GetPreferredAllocation for one container. Errors: unavailable when the resource is not
    // registered, else the call's status as common/grpc_error.h maps and names it (invalid_argument:
    // the plugin refused).
    Result<std::vector<std::string>> prefer(const std::string& resource, const std::vector<std::string>& available,
                                            int size);
    // Allocate for one container.
    Result<v1beta1::ContainerAllocateResponse> allocate(const std::string& resource, const std::vector<std::string>& ids);

    // Makes PodResources List report this container's devices.
    void add_pod(PodAllocation pod);
    // Number of List calls served (the exporter polls it).
    int pod_resources_calls() const;

private:
    class RegistrationService;
    class PodResourcesService;
    struct Plugin;
    Status on_register(const v1beta1::RegisterRequest& req);
    v1beta1::DevicePlugin::Stub* stub(const std::string& resource);

    std::string dir_;
    std::string pod_resources_path_;
    std::unique_ptr<RegistrationService> registration_;
    std::unique_ptr<PodResourcesService> pod_resources_;
    std::unique_ptr<grpc::Server> registration_server_;
    std::unique_ptr<grpc::Server> pod_resources_server_;

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::map<std::string, std::shared_ptr<Plugin>> plugins_;
    std::vector<std::shared_ptr<Plugin>> retired_;  // replaced by a re-registration; joined in stop()
};

}  // namespace kgpu::demo
