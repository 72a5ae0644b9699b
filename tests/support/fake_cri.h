// A CRI runtime (runtime.v1 RuntimeService) on a unix socket that answers ListContainers and
// ListPodSandbox with lists the test sets, and counts the calls (tests check that callers cache).
// For exporter tests.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "cri_runtime_v1.grpc.pb.h"

namespace grpc {
class Server;
}

namespace kgpu::test {

class FakeCri {
public:
    explicit FakeCri(std::string socket_path);
    ~FakeCri();
    FakeCri(const FakeCri&) = delete;
    FakeCri& operator=(const FakeCri&) = delete;

    bool start();
    // Stops serving and removes the socket (a runtime that went away); start() serves again.
    void stop();
    void set(runtime::v1::ListContainersResponse list);
    // Adds a running container with the labels the kubelet sets.
    void add_container(const std::string& id, const std::string& ns, const std::string& pod,
                       const std::string& container);
    // Adds a pod sandbox with the pod's labels and those the kubelet adds (io.kubernetes.pod.*).
    void add_sandbox(const std::string& ns, const std::string& pod, const std::string& uid,
                     const std::map<std::string, std::string>& pod_labels = {}, bool ready = true);
    // ListPodSandbox calls answered so far.
    int sandbox_calls() const;
    // Adds a container without io.kubernetes.* labels (made by ctr or nerdctl, not the kubelet).
    void add_unlabelled_container(const std::string& id);
    // From now on ListContainers answers with this gRPC status code (OK = answer normally).
    void fail_with(int grpc_status_code);
    // ListContainers calls answered so far (failed ones included).
    int calls() const;

private:
    class Service;
    std::string path_;
    std::unique_ptr<Service> service_;
    std::unique_ptr<grpc::Server> server_;
};

}  // namespace kgpu::test
