// A kubelet PodResources server (v1 PodResourcesLister) on a unix socket, answering List with a
// list the test sets. For doctor and exporter tests.
#pragma once

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

private:
    class Service;
    std::string path_;
    std::unique_ptr<Service> service_;
    std::unique_ptr<grpc::Server> server_;
};

}  // namespace kgpu::test
