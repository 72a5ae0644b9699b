// A second device plugin for migration tests, shaped like NVIDIA's k8s-device-plugin v0.14
// (internal/plugin/server.go): it serves v1beta1.DevicePlugin on <dir>/nvidia-<name>.sock (a stale
// file removed first), registers its resource with the kubelet, sends its device list when a
// ListAndWatch stream opens and keeps every stream open until it stops. stop() is what NVIDIA's
// plugin does on SIGTERM: the gRPC server stops (every stream ends) and the socket is removed;
// kill() what SIGKILL leaves: the streams end, the socket file stays and nobody listens on it.
// (The server listens in a private directory and the plugin directory holds a hard link to that
// socket, so gRPC's own unlink at shutdown does not touch the plugin directory.)
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/support/status.h>

namespace grpc {
class Server;
}

namespace kgpu::test {

class FakeDevicePlugin {
public:
    // `resource` like "nvidia.com/gpu": served on <dir>/nvidia-gpu.sock with `device_ids` Healthy.
    FakeDevicePlugin(std::string dir, std::string resource, std::vector<std::string> device_ids);
    ~FakeDevicePlugin();
    FakeDevicePlugin(const FakeDevicePlugin&) = delete;
    FakeDevicePlugin& operator=(const FakeDevicePlugin&) = delete;

    const std::string& socket_path() const { return socket_; }
    bool start();
    // Register with the kubelet at `kubelet_socket` (5 s timeout, as NVIDIA's plugin dials).
    grpc::Status register_with(const std::string& kubelet_socket);
    void stop();
    void kill();
    // ListAndWatch streams open on this plugin.
    int open_streams();

private:
    class Service;
    void shutdown();
    std::string dir_, resource_, socket_, private_dir_;
    std::unique_ptr<Service> service_;
    std::unique_ptr<grpc::Server> server_;
};

}  // namespace kgpu::test
