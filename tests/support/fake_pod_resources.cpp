#include "support/fake_pod_resources.h"

#include <unistd.h>

#include <optional>

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

namespace kgpu::test {

// List is served raw (bytes in, bytes out) with the callback API, so it can answer what a
// real message could not hold, and hold a call open without pinning a thread.
class FakePodResources::Service : public v1::PodResourcesLister::WithRawCallbackMethod_List<v1::PodResourcesLister::Service> {
public:
    explicit Service(std::atomic<int>& calls) : calls_(calls) {}

    grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer*,
                                   grpc::ByteBuffer* out) override {
        ++calls_;
        std::string bytes;
        {
            std::lock_guard lk(mu);
            if (hang) return new Hung();
            if (raw) {
                bytes = *raw;
            } else {
                if (dirty) {
                    serialized = list.SerializeAsString();
                    dirty = false;
                }
                bytes = serialized;
            }
        }
        grpc::Slice slice(bytes);
        *out = grpc::ByteBuffer(&slice, 1);
        auto* r = ctx->DefaultReactor();
        r->Finish(grpc::Status::OK);
        return r;
    }

    // Finishes only when the call is cancelled (the client's deadline, or the server stopping).
    class Hung : public grpc::ServerUnaryReactor {
        void OnCancel() override { Finish(grpc::Status::CANCELLED); }
        void OnDone() override { delete this; }
    };

    std::mutex mu;
    v1::ListPodResourcesResponse list;
    std::string serialized;
    bool dirty = true;
    std::optional<std::string> raw;
    bool hang = false;

private:
    std::atomic<int>& calls_;
};

namespace {
// gRPC shuts itself down when its last object goes (a test's fake server or client); Debian's
// 1.51 then waits for its last pending timer, up to a call's whole deadline (seconds). Tests make
// and drop servers and channels all the time: keep the library up for the whole process.
void keep_grpc_up() {
    static const bool up = (grpc_init(), true);
    (void)up;
}
}  // namespace

FakePodResources::FakePodResources(std::string socket_path)
    : path_(std::move(socket_path)), service_(std::make_unique<Service>(calls_)) {
    keep_grpc_up();
}

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
    service_->dirty = true;
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
    service_->dirty = true;
}

void FakePodResources::set_raw(std::string bytes) {
    std::lock_guard lk(service_->mu);
    service_->raw = std::move(bytes);
}

void FakePodResources::set_hang(bool hang) {
    std::lock_guard lk(service_->mu);
    service_->hang = hang;
}

void FakePodResources::reset() {
    std::lock_guard lk(service_->mu);
    service_->raw.reset();
    service_->hang = false;
}

}  // namespace kgpu::test
