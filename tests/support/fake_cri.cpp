#include "support/fake_cri.h"

#include <unistd.h>

#include <mutex>

#include <grpcpp/grpcpp.h>

namespace kgpu::test {

class FakeCri::Service : public runtime::v1::RuntimeService::Service {
public:
    grpc::Status ListContainers(grpc::ServerContext*, const runtime::v1::ListContainersRequest*,
                                runtime::v1::ListContainersResponse* out) override {
        std::lock_guard lk(mu);
        ++calls;
        if (status != 0) return grpc::Status(static_cast<grpc::StatusCode>(status), "fake CRI failure");
        *out = list;
        return grpc::Status::OK;
    }
    grpc::Status ListPodSandbox(grpc::ServerContext*, const runtime::v1::ListPodSandboxRequest*,
                                runtime::v1::ListPodSandboxResponse* out) override {
        std::lock_guard lk(mu);
        ++sandbox_calls;
        if (status != 0) return grpc::Status(static_cast<grpc::StatusCode>(status), "fake CRI failure");
        *out = sandboxes;
        return grpc::Status::OK;
    }
    mutable std::mutex mu;
    runtime::v1::ListContainersResponse list;
    runtime::v1::ListPodSandboxResponse sandboxes;
    int status = 0;
    int calls = 0;
    int sandbox_calls = 0;
};

FakeCri::FakeCri(std::string socket_path) : path_(std::move(socket_path)), service_(std::make_unique<Service>()) {}

FakeCri::~FakeCri() { stop(); }

bool FakeCri::start() {
    stop();
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("unix://" + path_, grpc::InsecureServerCredentials(), &port);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    return server_ != nullptr && port != 0;
}

void FakeCri::stop() {
    if (server_) {
        server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
        server_->Wait();
        server_.reset();
    }
    ::unlink(path_.c_str());
}

void FakeCri::set(runtime::v1::ListContainersResponse list) {
    std::lock_guard lk(service_->mu);
    service_->list = std::move(list);
}

void FakeCri::add_container(const std::string& id, const std::string& ns, const std::string& pod,
                            const std::string& container) {
    std::lock_guard lk(service_->mu);
    auto* c = service_->list.add_containers();
    c->set_id(id);
    c->set_pod_sandbox_id("sandbox-" + pod);
    c->mutable_metadata()->set_name(container);
    c->set_state(runtime::v1::CONTAINER_RUNNING);
    auto& labels = *c->mutable_labels();
    labels["io.kubernetes.pod.name"] = pod;
    labels["io.kubernetes.pod.namespace"] = ns;
    labels["io.kubernetes.pod.uid"] = "uid-" + pod;
    labels["io.kubernetes.container.name"] = container;
}

void FakeCri::add_sandbox(const std::string& ns, const std::string& pod, const std::string& uid,
                          const std::map<std::string, std::string>& pod_labels, bool ready) {
    std::lock_guard lk(service_->mu);
    auto* s = service_->sandboxes.add_items();
    s->set_id("sandbox-" + pod + "-" + std::to_string(service_->sandboxes.items_size()));
    s->mutable_metadata()->set_name(pod);
    s->mutable_metadata()->set_namespace_(ns);
    s->mutable_metadata()->set_uid(uid);
    s->set_state(ready ? runtime::v1::SANDBOX_READY : runtime::v1::SANDBOX_NOTREADY);
    auto& labels = *s->mutable_labels();
    for (const auto& [k, v] : pod_labels) labels[k] = v;
    // What the kubelet adds to every sandbox.
    labels["io.kubernetes.pod.name"] = pod;
    labels["io.kubernetes.pod.namespace"] = ns;
    labels["io.kubernetes.pod.uid"] = uid;
}

int FakeCri::sandbox_calls() const {
    std::lock_guard lk(service_->mu);
    return service_->sandbox_calls;
}

void FakeCri::add_unlabelled_container(const std::string& id) {
    std::lock_guard lk(service_->mu);
    auto* c = service_->list.add_containers();
    c->set_id(id);
    c->mutable_metadata()->set_name("adhoc");
    c->set_state(runtime::v1::CONTAINER_RUNNING);
}

void FakeCri::fail_with(int grpc_status_code) {
    std::lock_guard lk(service_->mu);
    service_->status = grpc_status_code;
}

int FakeCri::calls() const {
    std::lock_guard lk(service_->mu);
    return service_->calls;
}

}  // namespace kgpu::test
