// A fake kubelet for device-plugin tests, as strict as the Kubernetes v1.26 device manager
// (pkg/kubelet/cm/devicemanager: plugin/v1beta1/server.go, handler.go, client.go and manager.go),
// over real gRPC on unix sockets in a temp directory.
//
// What v1.26 does, and so what this fake does:
// - Register (version v1beta1, an extended resource name `domain/name`) makes a new client THE
//   client of that resource name (one per name: a newer one replaces the older in the map, but
//   the older connection and its ListAndWatch stream stay open), dials the plugin's endpoint and
//   asks GetDevicePluginOptions (that endpoint serves Allocate from then on), answers Register,
//   then opens a NEW ListAndWatch stream on its own thread. A failed dial drops whatever client the
//   name has.
// - Every message on ANY open stream of a resource replaces that resource's device sets: with two
//   streams every update is processed twice.
// - When ANY stream of a resource ends, the resource's CURRENT client is dropped: its connection
//   closed (which ends its stream) and the resource disconnected: every device Unhealthy,
//   allocatable 0, Allocate refused ("endpoint stopped") until a new registration.
// - restart(): what a kubelet restart does: the old process goes away (every connection closes);
//   the new one deletes every file in the directory but its checkpoint (in directory order),
//   serves kubelet.sock again and knows no client.
// It also serves PodResources v1 (GetAllocatableResources: the healthy devices of every resource,
// as the kubelet computes them) when asked to, and can hang on Register (a kubelet that accepts
// the connection and never answers).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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
        int generation = 0;  // successful registrations of this resource, over every restart
    };
    struct DeviceState {
        std::string health;  // as the kubelet sees it: "Unhealthy" for every device once cut off
        std::vector<long> numa;
    };
    using Devices = std::map<std::string, DeviceState>;

    explicit FakeKubelet(std::string dir);
    ~FakeKubelet();
    FakeKubelet(const FakeKubelet&) = delete;
    FakeKubelet& operator=(const FakeKubelet&) = delete;

    const std::string& dir() const { return dir_; }
    std::string socket_path() const { return dir_ + "/kubelet.sock"; }

    // Serves kubelet.sock (again). Returns false if it could not bind.
    bool start();
    // The kubelet process goes away: stops serving and closes every plugin connection
    // (kubelet.sock stays, now stale, as after a crash). The next start() is a new instance.
    void stop();
    // What the kubelet does at start: stop, delete every file in the directory, serve again.
    bool restart();
    // When the latest start() began serving kubelet.sock (the device manager is up).
    std::chrono::steady_clock::time_point started_at();

    // While true, Register calls are accepted and never answered (until set false or stop()).
    void hang_register(bool hang);
    // Register calls hanging right now, and those whose caller gave up (deadline, cancel) while
    // they hung.
    int hung_registers();
    int abandoned_registers();
    // While true, a client whose Register was answered waits before opening its ListAndWatch
    // stream (until set false or stop()): holds the kubelet in the window between its answer to
    // Register and its stream, where another client's stream may open first. held_streams(): the
    // clients waiting there right now.
    void hold_streams(bool hold);
    int held_streams();
    // While true, a Register is taken (the client connected, its stream opened) and its answer
    // held until the call is cancelled (by stop()'s shutdown: a kubelet that exits before
    // answering). held_answers(): the calls held right now.
    void hold_answers(bool hold);
    int held_answers();

    // Serves PodResources v1 on `path`: GetAllocatableResources answers the healthy devices of
    // every resource (one ContainerDevices per device, as the kubelet does); List answers no pod.
    bool serve_pod_resources(const std::string& path);

    // Blocks until `resource` has been registered successfully at least `generation` times in
    // all (and its first ListAndWatch list arrived), or the timeout. Returns the registration.
    std::optional<Registration> wait_registered(const std::string& resource, int generation,
                                                std::chrono::milliseconds timeout);
    // Blocks until the kubelet's view of `resource`'s devices satisfies `pred`.
    bool wait_devices(const std::string& resource, const std::function<bool(const Devices&)>& pred,
                      std::chrono::milliseconds timeout);
    // Every ListAndWatch message this fake processes gets the next number of one sequence (over
    // all resources and kubelet restarts); sequence() is the latest (0: none yet).
    std::uint64_t sequence();
    // Blocks until a ListAndWatch message of `resource` numbered above `after` (this instance's
    // messages, in order) satisfies `pred`, and sets `after` to its number: each message is looked
    // at, so a state the plugin left again before the caller woke up is seen as well.
    bool wait_message(const std::string& resource, const std::function<bool(const Devices&)>& pred,
                      std::uint64_t& after, std::chrono::milliseconds timeout);
    // Polls `pred` (called without the fake's lock, so it may use the counters below) every 5 ms
    // until it holds or the timeout passes; returns its last value.
    bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

    // The kubelet's view of `resource`'s devices (its healthy and unhealthy sets).
    Devices devices(const std::string& resource);
    // The device lists processed for `resource` by this kubelet instance, in order (from any stream).
    std::vector<Devices> messages(const std::string& resource);
    // Those numbered above `after` in sequence().
    std::vector<Devices> messages(const std::string& resource, std::uint64_t after);
    // Number of ListAndWatch messages processed for `resource`, over every stream and restart.
    int updates(const std::string& resource);
    // True when no ListAndWatch stream of `resource` is open.
    bool stream_ended(const std::string& resource);
    // Every resource registered with this kubelet instance (sorted).
    std::vector<std::string> resources();
    // The number of devices in each ListAndWatch message processed for `resource` (this instance).
    std::vector<size_t> history(const std::string& resource);
    // The encoded size in bytes of the latest ListAndWatch message of `resource` (0: none).
    size_t last_message_bytes(const std::string& resource);

    // Register calls for `resource` received by this kubelet instance (valid or not, answered or not).
    int register_calls(const std::string& resource);
    // ListAndWatch streams of `resource` this kubelet instance holds open.
    int open_streams(const std::string& resource);
    // True while `resource` has a current client (registered and not cut off).
    bool connected(const std::string& resource);
    // Healthy devices of `resource`: the node's allocatable count (0 once cut off).
    int allocatable(const std::string& resource);
    // The endpoint (socket file name) of `resource`'s current client ("" when none).
    std::string endpoint(const std::string& resource);

    // Through the endpoint of the latest registration, as the kubelet admits a pod; refused with
    // UNAVAILABLE "endpoint stopped" once the resource was cut off, NOT_FOUND if never registered.
    grpc::Status allocate(const std::string& resource, const std::vector<std::vector<std::string>>& containers,
                          v1beta1::AllocateResponse* out);
    grpc::Status prefer(const std::string& resource, const std::vector<std::string>& available,
                        const std::vector<std::string>& must_include, int size, std::vector<std::string>* out);
    // GetDevicePluginOptions through the same endpoint: a call the plugin answers without work
    // (the gRPC round trip alone, a baseline for the two above).
    grpc::Status options(const std::string& resource, v1beta1::DevicePluginOptions* out);

private:
    class RegistrationService;
    class PodResourcesService;
    struct Client;
    struct Resource {
        int registers = 0;  // Register calls, this instance
        std::shared_ptr<Client> endpoint;  // from the latest successful registration
        bool stopped = false;              // cut off: Allocate refused
        Devices devices;
        struct Message {
            std::uint64_t number;  // in sequence()
            Devices devices;
        };
        std::vector<Message> messages;
        std::vector<size_t> history;
        size_t last_bytes = 0;
    };

    grpc::Status on_register(grpc::ServerContext* ctx, const v1beta1::RegisterRequest& req);
    void run_client(const std::shared_ptr<Client>& c);
    void disconnect(const std::shared_ptr<Client>& c);
    std::shared_ptr<Client> endpoint_for(const std::string& resource, grpc::Status* err);

    std::string dir_;
    std::unique_ptr<RegistrationService> service_;
    std::unique_ptr<grpc::Server> server_;
    std::unique_ptr<PodResourcesService> pod_service_;
    std::unique_ptr<grpc::Server> pod_server_;

    std::mutex mu_;
    std::condition_variable cv_;
    int instance_ = 0;  // bumped by every start(): clients of older instances are dead
    std::uint64_t sequence_ = 0;  // the latest message's number
    std::chrono::steady_clock::time_point started_at_{};
    bool hang_ = false;
    bool hold_ = false;
    int held_ = 0;
    bool hold_answers_ = false;
    int held_answers_ = 0;
    bool stopping_ = false;
    int hung_ = 0;
    int abandoned_ = 0;
    std::map<std::string, std::shared_ptr<Client>> clients_;  // the current client per resource
    std::map<std::string, Resource> resources_;               // this instance's device manager state
    std::map<std::string, int> generations_;                  // over every instance
    std::map<std::string, int> updates_;                      // over every instance
    std::vector<std::shared_ptr<Client>> all_;                // every client of this instance (threads)
};

}  // namespace kgpu::test
