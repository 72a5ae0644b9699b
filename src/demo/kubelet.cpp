#include "demo/kubelet.h"

#include <unistd.h>

#include <algorithm>

#include <grpcpp/grpcpp.h>

#include "common/grpc_error.h"

namespace kgpu::demo {

namespace {

constexpr auto kRpcDeadline = std::chrono::seconds(10);

std::chrono::system_clock::time_point deadline() { return std::chrono::system_clock::now() + kRpcDeadline; }

}  // namespace

int DeviceList::healthy() const {
    return static_cast<int>(std::count_if(devices.begin(), devices.end(), [](const DeviceState& d) { return d.health == "Healthy"; }));
}

struct KubeletEmulator::Plugin {
    PluginRegistration reg;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
    grpc::ClientContext stream_ctx;
    std::thread reader;
    DeviceList list;
    bool ended = false;
};

class KubeletEmulator::RegistrationService final : public v1beta1::Registration::Service {
public:
    explicit RegistrationService(KubeletEmulator* k) : k_(k) {}
    grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* req, v1beta1::Empty*) override {
        // The kubelet's checks (pkg/kubelet/cm/devicemanager): the API version it speaks, and an
        // extended resource name with a domain.
        if (req->version() != "v1beta1")
            return {grpc::StatusCode::INVALID_ARGUMENT, "unsupported API version " + req->version()};
        if (req->resource_name().find('/') == std::string::npos)
            return {grpc::StatusCode::INVALID_ARGUMENT, "invalid resource name " + req->resource_name()};
        // The endpoint is a socket file name in the device-plugin directory: a path that leaves it
        // ("../x", "/run/x", "sub/x") would have the kubelet dial a socket it does not own.
        const std::string& ep = req->endpoint();
        if (ep.empty() || ep.find('/') != std::string::npos || ep.find("..") != std::string::npos)
            return {grpc::StatusCode::INVALID_ARGUMENT,
                    "invalid endpoint '" + ep + "': expected a socket file name in the device-plugin directory"};
        auto st = k_->on_register(*req);
        if (!st) return {grpc::StatusCode::UNAVAILABLE, st.error().message};
        return grpc::Status::OK;
    }

private:
    KubeletEmulator* k_;
};

class KubeletEmulator::PodResourcesService final : public v1::PodResourcesLister::Service {
public:
    explicit PodResourcesService(KubeletEmulator* k) : k_(k) {}
    grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*, v1::ListPodResourcesResponse* out) override {
        std::lock_guard lk(mu);
        ++calls;
        for (const auto& p : pods) {
            auto* pr = out->add_pod_resources();
            pr->set_name(p.pod);
            pr->set_namespace_(p.namespace_name);
            auto* c = pr->add_containers();
            c->set_name(p.container);
            auto* d = c->add_devices();
            d->set_resource_name(p.resource);
            for (const auto& id : p.device_ids) d->add_device_ids(id);
        }
        return grpc::Status::OK;
    }
    grpc::Status GetAllocatableResources(grpc::ServerContext*, const v1::AllocatableResourcesRequest*,
                                         v1::AllocatableResourcesResponse* out) override {
        std::lock_guard lk(k_->mu_);
        for (const auto& [name, p] : k_->plugins_) {
            auto* d = out->add_devices();
            d->set_resource_name(name);
            for (const auto& dev : p->list.devices)
                if (dev.health == "Healthy") d->add_device_ids(dev.id);
        }
        return grpc::Status::OK;
    }
    std::mutex mu;
    std::vector<PodAllocation> pods;
    int calls = 0;

private:
    KubeletEmulator* k_;
};

KubeletEmulator::KubeletEmulator(std::string device_plugin_dir, std::string pod_resources_socket)
    : dir_(std::move(device_plugin_dir)), pod_resources_path_(std::move(pod_resources_socket)) {}

KubeletEmulator::~KubeletEmulator() { stop(); }

Status KubeletEmulator::start() {
    auto serve = [](const std::string& path, grpc::Service* service) -> Result<std::unique_ptr<grpc::Server>> {
        ::unlink(path.c_str());
        grpc::ServerBuilder b;
        int port = 0;
        b.AddListeningPort("unix://" + path, grpc::InsecureServerCredentials(), &port);
        b.RegisterService(service);
        auto server = b.BuildAndStart();
        if (!server || port == 0) return fail(Code::io, "cannot serve gRPC on unix socket {}", path);
        return server;
    };
    registration_ = std::make_unique<RegistrationService>(this);
    pod_resources_ = std::make_unique<PodResourcesService>(this);
    auto reg = serve(kubelet_socket(), registration_.get());
    if (!reg) return std::unexpected(reg.error());
    registration_server_ = std::move(*reg);
    auto pods = serve(pod_resources_path_, pod_resources_.get());
    if (!pods) return std::unexpected(pods.error());
    pod_resources_server_ = std::move(*pods);
    return {};
}

void KubeletEmulator::stop() {
    for (auto* s : {&registration_server_, &pod_resources_server_}) {
        if (*s) {
            (*s)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
            (*s)->Wait();
            s->reset();
        }
    }
    std::vector<std::shared_ptr<Plugin>> all;
    {
        std::lock_guard lk(mu_);
        for (auto& [name, p] : plugins_) all.push_back(p);
        for (auto& p : retired_) all.push_back(p);
        plugins_.clear();
        retired_.clear();
    }
    for (auto& p : all) {
        p->stream_ctx.TryCancel();
        if (p->reader.joinable()) p->reader.join();
    }
}

Status KubeletEmulator::on_register(const v1beta1::RegisterRequest& req) {
    auto p = std::make_shared<Plugin>();
    p->reg.resource_name = req.resource_name();
    p->reg.endpoint = req.endpoint();
    p->reg.version = req.version();
    p->reg.when = std::chrono::steady_clock::now();
    p->channel = grpc::CreateChannel("unix://" + dir_ + "/" + req.endpoint(), grpc::InsecureChannelCredentials());
    p->stub = v1beta1::DevicePlugin::NewStub(p->channel);
    {
        // The kubelet asks for the options before it opens ListAndWatch.
        grpc::ClientContext ctx;
        ctx.set_deadline(deadline());
        v1beta1::DevicePluginOptions opts;
        auto st = p->stub->GetDevicePluginOptions(&ctx, v1beta1::Empty{}, &opts);
        if (!st.ok())
            return fail(grpc_error::code_of(st.error_code()), "GetDevicePluginOptions on {}: {}", req.endpoint(), grpc_error::describe(st));
        p->reg.preferred_allocation = opts.get_preferred_allocation_available();
    }
    Plugin* raw = p.get();
    {
        std::lock_guard lk(mu_);
        auto it = plugins_.find(req.resource_name());
        if (it != plugins_.end()) {  // a re-registration replaces the old stream
            it->second->stream_ctx.TryCancel();
            retired_.push_back(it->second);
        }
        plugins_[req.resource_name()] = p;
    }
    raw->reader = std::thread([this, raw] {
        auto reader = raw->stub->ListAndWatch(&raw->stream_ctx, v1beta1::Empty{});
        v1beta1::ListAndWatchResponse resp;
        while (reader->Read(&resp)) {
            DeviceList list;
            for (const auto& d : resp.devices()) {
                DeviceState s{d.id(), d.health(), {}};
                for (const auto& n : d.topology().nodes()) s.numa.push_back(n.id());
                list.devices.push_back(std::move(s));
            }
            list.when = std::chrono::steady_clock::now();
            std::lock_guard lk(mu_);
            list.update = raw->list.update + 1;
            raw->list = std::move(list);
            cv_.notify_all();
        }
        reader->Finish();
        std::lock_guard lk(mu_);
        raw->ended = true;
        cv_.notify_all();
    });
    return {};
}

std::optional<PluginRegistration> KubeletEmulator::wait_registered(const std::string& resource,
                                                                   std::chrono::milliseconds timeout,
                                                                   const std::function<bool()>& cancelled) {
    auto end = std::chrono::steady_clock::now() + timeout;
    std::unique_lock lk(mu_);
    while (std::chrono::steady_clock::now() < end) {
        auto it = plugins_.find(resource);
        if (it != plugins_.end() && it->second->list.update > 0) return it->second->reg;
        cv_.wait_for(lk, std::chrono::milliseconds(50));
        if (cancelled && cancelled()) return std::nullopt;
    }
    return std::nullopt;
}

std::optional<DeviceList> KubeletEmulator::wait_devices(const std::string& resource,
                                                        const std::function<bool(const DeviceList&)>& pred,
                                                        std::chrono::milliseconds timeout,
                                                        const std::function<bool()>& cancelled) {
    auto end = std::chrono::steady_clock::now() + timeout;
    std::unique_lock lk(mu_);
    while (std::chrono::steady_clock::now() < end) {
        auto it = plugins_.find(resource);
        if (it != plugins_.end() && it->second->list.update > 0 && pred(it->second->list)) return it->second->list;
        cv_.wait_for(lk, std::chrono::milliseconds(50));
        if (cancelled && cancelled()) return std::nullopt;
    }
    return std::nullopt;
}

DeviceList KubeletEmulator::devices(const std::string& resource) {
    std::lock_guard lk(mu_);
    auto it = plugins_.find(resource);
    return it == plugins_.end() ? DeviceList{} : it->second->list;
}

v1beta1::DevicePlugin::Stub* KubeletEmulator::stub(const std::string& resource) {
    std::lock_guard lk(mu_);
    auto it = plugins_.find(resource);
    return it == plugins_.end() ? nullptr : it->second->stub.get();
}

Result<std::vector<std::string>> KubeletEmulator::prefer(const std::string& resource,
                                                         const std::vector<std::string>& available, int size) {
    auto* s = stub(resource);
    if (!s) return fail(Code::unavailable, "{} is not registered", resource);
    v1beta1::PreferredAllocationRequest req;
    auto* c = req.add_container_requests();
    for (const auto& id : available) c->add_available_deviceids(id);
    c->set_allocation_size(size);
    v1beta1::PreferredAllocationResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    auto st = s->GetPreferredAllocation(&ctx, req, &resp);
    if (!st.ok())
        return fail(grpc_error::code_of(st.error_code()), "GetPreferredAllocation: {}", grpc_error::describe(st));
    if (resp.container_responses_size() != 1)
        return fail(Code::parse, "GetPreferredAllocation: {} container responses for 1 request",
                    resp.container_responses_size());
    const auto& ids = resp.container_responses(0).deviceids();
    return std::vector<std::string>(ids.begin(), ids.end());
}

Result<v1beta1::ContainerAllocateResponse> KubeletEmulator::allocate(const std::string& resource,
                                                                     const std::vector<std::string>& ids) {
    auto* s = stub(resource);
    if (!s) return fail(Code::unavailable, "{} is not registered", resource);
    v1beta1::AllocateRequest req;
    auto* c = req.add_container_requests();
    for (const auto& id : ids) c->add_devices_ids(id);
    v1beta1::AllocateResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    auto st = s->Allocate(&ctx, req, &resp);
    if (!st.ok())
        return fail(grpc_error::code_of(st.error_code()), "Allocate: {}", grpc_error::describe(st));
    if (resp.container_responses_size() != 1)
        return fail(Code::parse, "Allocate: {} container responses for 1 request", resp.container_responses_size());
    return resp.container_responses(0);
}

void KubeletEmulator::add_pod(PodAllocation pod) {
    std::lock_guard lk(pod_resources_->mu);
    pod_resources_->pods.push_back(std::move(pod));
}

int KubeletEmulator::pod_resources_calls() const {
    std::lock_guard lk(pod_resources_->mu);
    return pod_resources_->calls;
}

}  // namespace kgpu::demo
