// A fake kubelet for device-plugin tests: real gRPC over unix sockets in a temp directory.
// It serves Registration on <dir>/kubelet.sock; on Register it dials the plugin's endpoint back,
// calls GetDevicePluginOptions and keeps a ListAndWatch stream open on its own thread, recording
// every device list. Tests call Allocate / GetPreferredAllocation through it and can "restart"
// it the way the kubelet does (every socket in the directory deleted, kubelet.sock re-created).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <optional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "deviceplugin_v1beta1.grpc.pb.h"

namespace grpc {
class Server;
}

namespace kgpu::test {

class FakeKubelet {
public:
    struct Registration {
        std::string resource_name;
        std::string endpoint;
        std::string version;
        bool preferred_allocation_available = false;
        int generation = 0;  // counts registrations of this resource
    };
    struct DeviceState {
        std::string health;
        std::vector<long> numa;
    };

    explicit FakeKubelet(std::string dir);
    ~FakeKubelet();

    const std::string& dir() const { return dir_; }
    std::string socket_path() const { return dir_ + "/kubelet.sock"; }

    // Serves kubelet.sock (again). Returns false if it could not bind.
    bool start();
    // Stops serving and closes plugin streams (kubelet.sock stays deleted).
    void stop();
    // What the kubelet does at start: stop, delete every socket file in the directory, serve again.
    bool restart();

    // Blocks until `resource` has been registered at least `generation` times (and its first
    // ListAndWatch list arrived), or the timeout. Returns the registration.
    std::optional<Registration> wait_registered(const std::string& resource, int generation,
                                                std::chrono::milliseconds timeout);
    // Blocks until the latest device list of `resource` satisfies `pred`.
    bool wait_devices(const std::string& resource,
                      const std::function<bool(const std::map<std::string, DeviceState>&)>& pred,
                      std::chrono::milliseconds timeout);
    std::map<std::string, DeviceState> devices(const std::string& resource);
    // Number of ListAndWatch messages received for `resource`.
    int updates(const std::string& resource);
    // True once the ListAndWatch stream of `resource` ended (plugin stopped or restarted).
    bool stream_ended(const std::string& resource);
    // Every resource registered so far (sorted).
    std::vector<std::string> resources();
    // The number of devices in each ListAndWatch message of the latest stream of `resource`.
    std::vector<size_t> history(const std::string& resource);
    // The encoded size in bytes of the latest ListAndWatch message of `resource` (0: none).
    size_t last_message_bytes(const std::string& resource);

    grpc::Status allocate(const std::string& resource, const std::vector<std::vector<std::string>>& containers,
                          v1beta1::AllocateResponse* out);
    grpc::Status prefer(const std::string& resource, const std::vector<std::string>& available,
                        const std::vector<std::string>& must_include, int size, std::vector<std::string>* out);

private:
    class RegistrationService;
    struct Plugin {
        Registration reg;
        std::shared_ptr<grpc::Channel> channel;
        std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
        std::unique_ptr<grpc::ClientContext> stream_ctx;
        std::thread reader;
        std::map<std::string, DeviceState> devices;
        std::vector<size_t> history;
        size_t last_bytes = 0;
        int updates = 0;
        bool ended = false;
    };
    void on_register(const v1beta1::RegisterRequest& req);
    void close_plugins();

    std::string dir_;
    std::unique_ptr<RegistrationService> service_;
    std::unique_ptr<grpc::Server> server_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::map<std::string, std::unique_ptr<Plugin>> plugins_;
    std::map<std::string, int> generations_;
    std::vector<std::unique_ptr<Plugin>> retired_;
};

}  // namespace kgpu::test
