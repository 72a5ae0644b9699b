#include "support/fake_device_plugin.h"

#include <unistd.h>

#include <cstdlib>

#include <chrono>
#include <condition_variable>

#include <grpcpp/grpcpp.h>

#include "deviceplugin_v1beta1.grpc.pb.h"

namespace kgpu::test {

using namespace std::chrono_literals;

class FakeDevicePlugin::Service : public v1beta1::DevicePlugin::Service {
public:
    explicit Service(std::vector<std::string> ids) {
        for (const auto& id : ids) {
            auto* d = list.add_devices();
            d->set_id(id);
            d->set_health("Healthy");
        }
    }
    grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                        v1beta1::DevicePluginOptions* out) override {
        out->set_get_preferred_allocation_available(true);
        return grpc::Status::OK;
    }
    grpc::Status ListAndWatch(grpc::ServerContext* ctx, const v1beta1::Empty*,
                              grpc::ServerWriter<v1beta1::ListAndWatchResponse>* w) override {
        std::unique_lock lk(mu);
        ++open;
        lk.unlock();
        w->Write(list);
        lk.lock();
        while (!stopping && !ctx->IsCancelled()) cv.wait_for(lk, 10ms);
        --open;
        return grpc::Status::OK;
    }
    grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* req,
                          v1beta1::AllocateResponse* out) override {
        for (int i = 0; i < req->container_requests_size(); ++i)
            (*out->add_container_responses()->mutable_envs())["NVIDIA_VISIBLE_DEVICES"] = "from-the-other-plugin";
        return grpc::Status::OK;
    }

    std::mutex mu;
    std::condition_variable cv;
    bool stopping = false;
    int open = 0;
    v1beta1::ListAndWatchResponse list;
};

FakeDevicePlugin::FakeDevicePlugin(std::string dir, std::string resource, std::vector<std::string> device_ids)
    : dir_(std::move(dir)), resource_(std::move(resource)), service_(std::make_unique<Service>(std::move(device_ids))) {
    socket_ = dir_ + "/nvidia-" + resource_.substr(resource_.find('/') + 1) + ".sock";
}

FakeDevicePlugin::~FakeDevicePlugin() {
    stop();
    if (!private_dir_.empty()) ::rmdir(private_dir_.c_str());
}

bool FakeDevicePlugin::start() {
    ::unlink(socket_.c_str());
    {
        std::lock_guard lk(service_->mu);
        service_->stopping = false;
    }
    if (private_dir_.empty()) {
        std::string tmpl = dir_ + "/../fake-plugin-XXXXXX";
        if (::mkdtemp(tmpl.data()) == nullptr) return false;
        private_dir_ = tmpl;
    }
    const std::string bound = private_dir_ + "/s";
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("unix://" + bound, grpc::InsecureServerCredentials(), &port);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    return server_ != nullptr && port != 0 && ::link(bound.c_str(), socket_.c_str()) == 0;
}

grpc::Status FakeDevicePlugin::register_with(const std::string& kubelet_socket) {
    auto stub = v1beta1::Registration::NewStub(
        grpc::CreateChannel("unix://" + kubelet_socket, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    v1beta1::RegisterRequest req;
    req.set_version("v1beta1");
    req.set_endpoint(socket_.substr(socket_.rfind('/') + 1));
    req.set_resource_name(resource_);
    req.mutable_options()->set_get_preferred_allocation_available(true);
    v1beta1::Empty resp;
    return stub->Register(&ctx, req, &resp);
}

void FakeDevicePlugin::shutdown() {
    {
        std::lock_guard lk(service_->mu);
        service_->stopping = true;
        service_->cv.notify_all();
    }
    server_->Shutdown(std::chrono::system_clock::now() + 1s);
    server_->Wait();
    server_.reset();
    ::unlink((private_dir_ + "/s").c_str());
}

void FakeDevicePlugin::stop() {
    if (!server_) return;
    shutdown();
    ::unlink(socket_.c_str());
}

void FakeDevicePlugin::kill() {
    if (server_) shutdown();
}

int FakeDevicePlugin::open_streams() {
    std::lock_guard lk(service_->mu);
    return service_->open;
}

}  // namespace kgpu::test
