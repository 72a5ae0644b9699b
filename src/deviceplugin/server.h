// One gRPC DevicePlugin server per resource, on its own unix socket, using the callback API so
// a ListAndWatch stream does not pin a thread (STYLE.md #9).
//
// The server only reads: device lists come from publish() (a full snapshot each time, as the
// kubelet expects), and unary calls are answered by the Handlers given at construction.
//
// Streams are numbered in the order they open (0, 1, 2, ...): the registrar tells the kubelet's
// stream for a registration (the first one opened after its Register began) from others, ends
// the streams of earlier registrations, and hears when the peer ends a stream.
// A stream whose client sends the metadata `kgpu-probe` (kgpu doctor's look at the device list)
// is served like any other but is not numbered among them: it gets a number with kProbeStreamBit
// set, is never ended by end_streams_before, and its end is not reported to stream_ended. So a
// probe opened between a Register and the kubelet's stream cannot pass for the kubelet's
// (issue #12: closing it looked like the kubelet dropping us, and kgpu registered again).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"
#include "deviceplugin_v1beta1.grpc.pb.h"

namespace grpc {
class ClientContext;
class Server;
}

namespace kgpu::deviceplugin {

// The metadata key (any value) that marks a ListAndWatch client as a probe, not a kubelet; sent
// by src/doctor/grpc_probe.cpp (which does not link this library: keep the two in step).
inline constexpr char kProbeMetadataKey[] = "kgpu-probe";
// Set in the numbers of probe streams.
inline constexpr std::uint64_t kProbeStreamBit = std::uint64_t{1} << 63;

struct Handlers {
    // Both return an error (answered as INVALID_ARGUMENT with the message) or the response.
    std::function<Result<v1beta1::AllocateResponse>(const v1beta1::AllocateRequest&)> allocate;
    std::function<Result<v1beta1::PreferredAllocationResponse>(const v1beta1::PreferredAllocationRequest&)> prefer;
    // Optional: a ListAndWatch stream ended; `by_peer` when the client (the kubelet) ended it or
    // went away, not when we did (end_streams_before, stop). Called on a gRPC thread, with no
    // lock of the server held.
    std::function<void(std::uint64_t stream, bool by_peer)> stream_ended;
};

class ListAndWatchReactor;

class ResourceServer {
public:
    ResourceServer(std::string resource_name, std::string socket_path, Handlers handlers);
    ~ResourceServer();
    ResourceServer(const ResourceServer&) = delete;
    ResourceServer& operator=(const ResourceServer&) = delete;

    // Removes a stale socket file, binds and starts serving. The socket is mode 0600 whatever the
    // umask (only root, like the kubelet, may connect). Errors name the socket path.
    // start() and stop() may be called from any thread.
    Status start();
    // Ends every ListAndWatch stream cleanly, stops the server and removes the socket file.
    // With `empty_list_first`, every stream is first sent an empty device list (so the kubelet
    // drops the devices) — used when a resource disappears.
    void stop(bool empty_list_first = false);
    bool running() const;

    // The number the next ListAndWatch stream (not a probe) will get, and the first number of
    // such streams served since the latest start().
    std::uint64_t next_stream_id() const;
    std::uint64_t first_stream_of_start() const;
    // Ends (status OK) every open stream numbered below `id`, then waits up to `timeout` until
    // they are done. Returns how many were open.
    size_t end_streams_before(std::uint64_t id, std::chrono::milliseconds timeout);
    // True while stream `id` is open.
    bool stream_open(std::uint64_t id) const;

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
    std::uint64_t attach(ListAndWatchReactor* r, bool probe);
    void detach(std::uint64_t id, bool by_peer);

    std::string resource_name_;
    std::string socket_path_;
    Handlers handlers_;

    mutable std::mutex life_mu_;  // start/stop and the two below
    std::unique_ptr<Service> service_;
    std::unique_ptr<grpc::Server> server_;

    mutable std::mutex mu_;
    std::condition_variable cv_;  // a stream detached
    v1beta1::ListAndWatchResponse list_;
    bool published_ = false;
    std::map<std::uint64_t, ListAndWatchReactor*> streams_;
    std::uint64_t next_id_ = 0;
    std::uint64_t next_probe_id_ = kProbeStreamBit;
    std::uint64_t start_id_ = 0;
    bool stopping_ = false;
};

// Lets another thread cancel a Register call: cancel() ends the call in flight, and a call that
// has not published its context yet does not start at all. The flag stays set until reset(), so
// a cancel() that lands between a caller's last check and the call is not lost (issue #12: a
// SIGTERM there waited out the whole Register deadline against a hung kubelet).
class RegisterCancel {
public:
    void cancel();
    void reset();
    bool cancelled() const;

private:
    friend Status register_with_kubelet(const std::string&, const std::string&, const std::string&, int,
                                        RegisterCancel*);
    mutable std::mutex mu_;
    grpc::ClientContext* ctx_ = nullptr;
    bool cancelled_ = false;
};

// Calls Register on the kubelet socket. Errors carry the gRPC status as common/grpc_error.h maps
// and names it, or are unavailable "cancelled" when `cancel` was cancelled before the call.
Status register_with_kubelet(const std::string& kubelet_socket, const std::string& endpoint,
                             const std::string& resource_name, int timeout_ms = 5000,
                             RegisterCancel* cancel = nullptr);

}  // namespace kgpu::deviceplugin
