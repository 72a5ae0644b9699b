#include "support/fake_kubelet.h"

#include <unistd.h>

#include <filesystem>

#include <grpcpp/grpcpp.h>

namespace kgpu::test {

class FakeKubelet::RegistrationService : public v1beta1::Registration::Service {
public:
    explicit RegistrationService(FakeKubelet* k) : k_(k) {}
    grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* req, v1beta1::Empty*) override {
        if (req->version() != "v1beta1")
            return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unsupported version " + req->version());
        if (req->resource_name().find('/') == std::string::npos)
            return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "invalid resource name " + req->resource_name());
        k_->on_register(*req);
        return grpc::Status::OK;
    }

private:
    FakeKubelet* k_;
};

FakeKubelet::FakeKubelet(std::string dir) : dir_(std::move(dir)) {}

FakeKubelet::~FakeKubelet() { stop(); }

bool FakeKubelet::start() {
    if (server_) return true;
    ::unlink(socket_path().c_str());
    service_ = std::make_unique<RegistrationService>(this);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("unix://" + socket_path(), grpc::InsecureServerCredentials(), &port);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    return server_ != nullptr && port != 0;
}

void FakeKubelet::close_plugins() {
    std::map<std::string, std::unique_ptr<Plugin>> plugins;
    {
        std::lock_guard lk(mu_);
        plugins.swap(plugins_);
    }
    for (auto& [name, p] : plugins) {
        if (p->stream_ctx) p->stream_ctx->TryCancel();
        if (p->reader.joinable()) p->reader.join();
    }
}

void FakeKubelet::stop() {
    if (server_) {
        server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
        server_->Wait();
        server_.reset();
    }
    close_plugins();
    std::lock_guard lk(mu_);
    for (auto& p : retired_)
        if (p->reader.joinable()) p->reader.join();
    retired_.clear();
}

bool FakeKubelet::restart() {
    stop();
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
        if (entry.is_socket(ec)) std::filesystem::remove(entry.path(), ec);
    }
    return start();
}

void FakeKubelet::on_register(const v1beta1::RegisterRequest& req) {
    auto p = std::make_unique<Plugin>();
    p->reg.resource_name = req.resource_name();
    p->reg.endpoint = req.endpoint();
    p->reg.version = req.version();
    p->reg.preferred_allocation_available = req.options().get_preferred_allocation_available();
    p->channel = grpc::CreateChannel("unix://" + dir_ + "/" + req.endpoint(), grpc::InsecureChannelCredentials());
    p->stub = v1beta1::DevicePlugin::NewStub(p->channel);
    // The kubelet asks for the options first.
    {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        v1beta1::DevicePluginOptions opts;
        v1beta1::Empty empty;
        if (!p->stub->GetDevicePluginOptions(&ctx, empty, &opts).ok()) return;
        p->reg.preferred_allocation_available = opts.get_preferred_allocation_available();
    }
    p->stream_ctx = std::make_unique<grpc::ClientContext>();
    Plugin* raw = p.get();
    std::unique_ptr<Plugin> old;
    {
        std::lock_guard lk(mu_);
        raw->reg.generation = ++generations_[req.resource_name()];
        auto it = plugins_.find(req.resource_name());
        if (it != plugins_.end()) old = std::move(it->second);  // a newer registration replaces it
        plugins_[req.resource_name()] = std::move(p);
    }
    if (old) {
        if (old->stream_ctx) old->stream_ctx->TryCancel();
        std::lock_guard lk(mu_);
        retired_.push_back(std::move(old));
    }
    raw->reader = std::thread([this, raw] {
        v1beta1::Empty empty;
        auto reader = raw->stub->ListAndWatch(raw->stream_ctx.get(), empty);
        v1beta1::ListAndWatchResponse resp;
        while (reader->Read(&resp)) {
            std::lock_guard lk(mu_);
            raw->devices.clear();
            raw->history.push_back(static_cast<size_t>(resp.devices_size()));
            raw->last_bytes = resp.ByteSizeLong();
            for (const auto& d : resp.devices()) {
                DeviceState s;
                s.health = d.health();
                for (const auto& n : d.topology().nodes()) s.numa.push_back(n.id());
                raw->devices[d.id()] = s;
            }
            ++raw->updates;
            cv_.notify_all();
        }
        reader->Finish();
        std::lock_guard lk(mu_);
        raw->ended = true;
        cv_.notify_all();
    });
}

std::optional<FakeKubelet::Registration> FakeKubelet::wait_registered(const std::string& resource, int generation,
                                                                      std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    std::optional<Registration> out;
    cv_.wait_for(lk, timeout, [&] {
        auto it = plugins_.find(resource);
        if (it == plugins_.end() || it->second->reg.generation < generation || it->second->updates == 0) return false;
        out = it->second->reg;
        return true;
    });
    return out;
}

bool FakeKubelet::wait_devices(const std::string& resource,
                               const std::function<bool(const std::map<std::string, DeviceState>&)>& pred,
                               std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, timeout, [&] {
        auto it = plugins_.find(resource);
        return it != plugins_.end() && it->second->updates > 0 && pred(it->second->devices);
    });
}

std::map<std::string, FakeKubelet::DeviceState> FakeKubelet::devices(const std::string& resource) {
    std::lock_guard lk(mu_);
    auto it = plugins_.find(resource);
    return it == plugins_.end() ? std::map<std::string, DeviceState>{} : it->second->devices;
}

int FakeKubelet::updates(const std::string& resource) {
    std::lock_guard lk(mu_);
    auto it = plugins_.find(resource);
    return it == plugins_.end() ? 0 : it->second->updates;
}

bool FakeKubelet::stream_ended(const std::string& resource) {
    std::lock_guard lk(mu_);
    auto it = plugins_.find(resource);
    return it == plugins_.end() || it->second->ended;
}

std::vector<std::string> FakeKubelet::resources() {
    std::lock_guard lk(mu_);
    std::vector<std::string> out;
    for (const auto& [name, p] : plugins_) out.push_back(name);
    return out;
}

std::vector<size_t> FakeKubelet::history(const std::string& resource) {
    std::lock_guard lk(mu_);
    auto it = plugins_.find(resource);
    return it == plugins_.end() ? std::vector<size_t>{} : it->second->history;
}

size_t FakeKubelet::last_message_bytes(const std::string& resource) {
    std::lock_guard lk(mu_);
    auto it = plugins_.find(resource);
    return it == plugins_.end() ? 0 : it->second->last_bytes;
}

grpc::Status FakeKubelet::allocate(const std::string& resource, const std::vector<std::vector<std::string>>& containers,
                                   v1beta1::AllocateResponse* out) {
    v1beta1::DevicePlugin::Stub* stub = nullptr;
    {
        std::lock_guard lk(mu_);
        auto it = plugins_.find(resource);
        if (it == plugins_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "not registered");
        stub = it->second->stub.get();
    }
    v1beta1::AllocateRequest req;
    for (const auto& ids : containers) {
        auto* c = req.add_container_requests();
        for (const auto& id : ids) c->add_devices_ids(id);
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return stub->Allocate(&ctx, req, out);
}

grpc::Status FakeKubelet::prefer(const std::string& resource, const std::vector<std::string>& available,
                                 const std::vector<std::string>& must_include, int size, std::vector<std::string>* out) {
    v1beta1::DevicePlugin::Stub* stub = nullptr;
    {
        std::lock_guard lk(mu_);
        auto it = plugins_.find(resource);
        if (it == plugins_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "not registered");
        stub = it->second->stub.get();
    }
    v1beta1::PreferredAllocationRequest req;
    auto* c = req.add_container_requests();
    for (const auto& id : available) c->add_available_deviceids(id);
    for (const auto& id : must_include) c->add_must_include_deviceids(id);
    c->set_allocation_size(size);
    v1beta1::PreferredAllocationResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto st = stub->GetPreferredAllocation(&ctx, req, &resp);
    if (st.ok() && resp.container_responses_size() > 0)
        out->assign(resp.container_responses(0).deviceids().begin(), resp.container_responses(0).deviceids().end());
    return st;
}

}  // namespace kgpu::test
