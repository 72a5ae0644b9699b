#include "support/fake_pod_resources.h"

#include <unistd.h>

#include <grpcpp/grpcpp.h>

namespace kgpu::test {

class FakePodResources::Service : public v1::PodResourcesLister::Service {
public:
    grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*, v1::ListPodResourcesResponse* out) override {
        std::lock_guard lk(mu);
        *out = list;
        return grpc::Status::OK;
    }
    std::mutex mu;
    v1::ListPodResourcesResponse list;
};

FakePodResources::FakePodResources(std::string socket_path)
    : path_(std::move(socket_path)), service_(std::make_unique<Service>()) {}

FakePodResources::~FakePodResources() {
    if (server_) {
        server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
        server_->Wait();
    }
    ::unlink(path_.c_str());
}

bool FakePodResources::start() {
    ::unlink(path_.c_str());
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("unix://" + path_, grpc::InsecureServerCredentials(), &port);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    return server_ != nullptr && port != 0;
}

void FakePodResources::set(v1::ListPodResourcesResponse list) {
    std::lock_guard lk(service_->mu);
    service_->list = std::move(list);
}

void FakePodResources::add_pod(const std::string& ns, const std::string& pod, const std::string& container,
                               const std::string& resource, const std::vector<std::string>& device_ids) {
    std::lock_guard lk(service_->mu);
    auto* p = service_->list.add_pod_resources();
    p->set_name(pod);
    p->set_namespace_(ns);
    auto* c = p->add_containers();
    c->set_name(container);
    auto* d = c->add_devices();
    d->set_resource_name(resource);
    for (const auto& id : device_ids) d->add_device_ids(id);
}

}  // namespace kgpu::test
