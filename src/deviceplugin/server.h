// One gRPC DevicePlugin server per resource, on its own unix socket, using the callback API so
// a ListAndWatch stream does not pin a thread (STYLE.md #9).
//
// The server only reads: device lists come from publish() (a full snapshot each time, as the
// kubelet expects), and unary calls are answered by the Handlers given at construction.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "deviceplugin_v1beta1.grpc.pb.h"

namespace grpc {
class Server;
}

namespace kgpu::deviceplugin {

struct Handlers {
    // Both return an error (answered as INVALID_ARGUMENT with the message) or the response.
    std::function<Result<v1beta1::AllocateResponse>(const v1beta1::AllocateRequest&)> allocate;
    std::function<Result<v1beta1::PreferredAllocationResponse>(const v1beta1::PreferredAllocationRequest&)> prefer;
};

class ListAndWatchReactor;

class ResourceServer {
public:
    ResourceServer(std::string resource_name, std::string socket_path, Handlers handlers);
    ~ResourceServer();
    ResourceServer(const ResourceServer&) = delete;
    ResourceServer& operator=(const ResourceServer&) = delete;

    // Removes a stale socket file, binds and starts serving. Errors name the socket path.
    Status start();
    // Ends every ListAndWatch stream cleanly, stops the server and removes the socket file.
    // With `empty_list_first`, every stream is first sent an empty device list (so the kubelet
    // drops the devices) — used when a resource disappears.
    void stop(bool empty_list_first = false);
    bool running() const;

    // A new full device list: sent to every open stream and to streams opened later. A list equal
    // to the current one is not sent again.
    void publish(v1beta1::ListAndWatchResponse list);

    const std::string& resource_name() const { return resource_name_; }
    const std::string& socket_path() const { return socket_path_; }
    // Number of ListAndWatch streams currently open (tests, logs).
    size_t open_streams() const;

private:
    friend class ListAndWatchReactor;
    class Service;

    v1beta1::ListAndWatchResponse current() const;
    void attach(ListAndWatchReactor* r);
    void detach(ListAndWatchReactor* r);

    std::string resource_name_;
    std::string socket_path_;
    Handlers handlers_;
    std::unique_ptr<Service> service_;
    std::unique_ptr<grpc::Server> server_;

    mutable std::mutex mu_;
    v1beta1::ListAndWatchResponse list_;
    bool published_ = false;
    std::set<ListAndWatchReactor*> streams_;
    bool stopping_ = false;
};

// Calls Register on the kubelet socket. Errors carry the gRPC status message.
Status register_with_kubelet(const std::string& kubelet_socket, const std::string& endpoint,
                             const std::string& resource_name, int timeout_ms = 5000);

}  // namespace kgpu::deviceplugin
