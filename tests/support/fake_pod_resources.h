// A kubelet PodResources server (v1 PodResourcesLister) on a unix socket, answering List with a
// list the test sets. For doctor and exporter tests. It can also misbehave as a broken or
// hostile kubelet would: answer bytes that are not a message, or never answer.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "podresources_v1.grpc.pb.h"

namespace grpc {
class Server;
}

namespace kgpu::test {

class FakePodResources {
public:
    explicit FakePodResources(std::string socket_path);
    ~FakePodResources();
    bool start();
    void set(v1::ListPodResourcesResponse list);
    // Adds one pod with one container holding `device_ids` of `resource`.
    void add_pod(const std::string& ns, const std::string& pod, const std::string& container,
                 const std::string& resource, const std::vector<std::string>& device_ids);
    // Answers List with these bytes as they are (garbage, or a hand-made message) until reset().
    void set_raw(std::string bytes);
    // List does not answer until the caller gives up (its deadline) or the server stops.
    void set_hang(bool hang);
    // Back to answering the list.
    void reset();
    // List calls received so far.
    int calls() const { return calls_.load(); }

private:
    class Service;
    std::string path_;
    std::unique_ptr<Service> service_;
    std::unique_ptr<grpc::Server> server_;
    std::atomic<int> calls_{0};
};

}  // namespace kgpu::test
