#include "support/fake_kubelet.h"

#include <unistd.h>

#include <filesystem>

#include <grpcpp/grpcpp.h>

#include "podresources_v1.grpc.pb.h"

namespace kgpu::test {

using namespace std::chrono_literals;

// One device-plugin client of the kubelet (v1.26 plugin/v1beta1/client.go): its own connection to
// the plugin's socket and, once running, one ListAndWatch stream read on its own thread.
struct FakeKubelet::Client {
    int instance = 0;
    std::string resource;
    Registration reg;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
    grpc::ClientContext stream_ctx;  // TryCancel: the kubelet closes this client's connection
    std::thread reader;
    bool open = false;  // its ListAndWatch stream is running
    int updates = 0;    // messages it received
};

class FakeKubelet::RegistrationService : public v1beta1::Registration::Service {
public:
    explicit RegistrationService(FakeKubelet* k) : k_(k) {}
    grpc::Status Register(grpc::ServerContext* ctx, const v1beta1::RegisterRequest* req, v1beta1::Empty*) override {
        return k_->on_register(ctx, *req);
    }

private:
    FakeKubelet* k_;
};

class FakeKubelet::PodResourcesService : public v1::PodResourcesLister::Service {
public:
    explicit PodResourcesService(FakeKubelet* k) : k_(k) {}
    grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*, v1::ListPodResourcesResponse*) override {
        return grpc::Status::OK;
    }
    // The kubelet's GetAllocatableDevices: every known device filtered by the healthy sets.
    grpc::Status GetAllocatableResources(grpc::ServerContext*, const v1::AllocatableResourcesRequest*,
                                         v1::AllocatableResourcesResponse* out) override {
        std::lock_guard lk(k_->mu_);
        for (const auto& [name, r] : k_->resources_) {
            for (const auto& [id, d] : r.devices) {
                if (d.health != "Healthy") continue;
                auto* cd = out->add_devices();
                cd->set_resource_name(name);
                cd->add_device_ids(id);
                for (long n : d.numa) cd->mutable_topology()->add_nodes()->set_id(n);
            }
        }
        return grpc::Status::OK;
    }

private:
    FakeKubelet* k_;
};

FakeKubelet::FakeKubelet(std::string dir) : dir_(std::move(dir)) {}

FakeKubelet::~FakeKubelet() {
    stop();
    if (pod_server_) {
        pod_server_->Shutdown(std::chrono::system_clock::now() + 1s);
        pod_server_->Wait();
    }
}

bool FakeKubelet::start() {
    if (server_) return true;
    {
        std::lock_guard lk(mu_);
        ++instance_;
        stopping_ = false;
        clients_.clear();
        resources_.clear();
    }
    ::unlink(socket_path().c_str());
    service_ = std::make_unique<RegistrationService>(this);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("unix://" + socket_path(), grpc::InsecureServerCredentials(), &port);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    {
        std::lock_guard lk(mu_);
        started_at_ = std::chrono::steady_clock::now();
    }
    return server_ != nullptr && port != 0;
}

std::chrono::steady_clock::time_point FakeKubelet::started_at() {
    std::lock_guard lk(mu_);
    return started_at_;
}

void FakeKubelet::stop() {
    bool held = false;
    {
        std::lock_guard lk(mu_);
        stopping_ = true;
        held = held_answers_ > 0;
        cv_.notify_all();
    }
    if (server_) {
        // Handlers see stopping_ and return; Wait() returns once none runs, so no handler touches
        // all_ below. A held answer ends only when its call is cancelled, at the deadline.
        server_->Shutdown(std::chrono::system_clock::now() + (held ? 100ms : 1s));
        server_->Wait();
        server_.reset();
    }
    std::vector<std::shared_ptr<Client>> all;
    {
        std::lock_guard lk(mu_);
        all.swap(all_);
        clients_.clear();
    }
    for (auto& c : all) c->stream_ctx.TryCancel();
    for (auto& c : all)
        if (c->reader.joinable()) c->reader.join();
}

// v1.26 CleanupPluginDirectory: every file but the checkpoint and directories, in directory
// order (so kubelet.sock may go before or after a plugin's socket); then serve kubelet.sock.
bool FakeKubelet::restart() {
    stop();
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
        if (entry.path().filename() == "kubelet_internal_checkpoint" || entry.is_directory(ec)) continue;
        std::filesystem::remove(entry.path(), ec);
    }
    return start();
}

void FakeKubelet::hang_register(bool hang) {
    std::lock_guard lk(mu_);
    hang_ = hang;
    cv_.notify_all();
}

int FakeKubelet::hung_registers() {
    std::lock_guard lk(mu_);
    return hung_;
}

int FakeKubelet::abandoned_registers() {
    std::lock_guard lk(mu_);
    return abandoned_;
}

void FakeKubelet::hold_streams(bool hold) {
    std::lock_guard lk(mu_);
    hold_ = hold;
    cv_.notify_all();
}

void FakeKubelet::hold_answers(bool hold) {
    std::lock_guard lk(mu_);
    hold_answers_ = hold;
    cv_.notify_all();
}

int FakeKubelet::held_answers() {
    std::lock_guard lk(mu_);
    return held_answers_;
}

int FakeKubelet::held_streams() {
    std::lock_guard lk(mu_);
    return held_;
}

bool FakeKubelet::serve_pod_resources(const std::string& path) {
    ::unlink(path.c_str());
    pod_service_ = std::make_unique<PodResourcesService>(this);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("unix://" + path, grpc::InsecureServerCredentials(), &port);
    b.RegisterService(pod_service_.get());
    pod_server_ = b.BuildAndStart();
    return pod_server_ != nullptr && port != 0;
}

grpc::Status FakeKubelet::on_register(grpc::ServerContext* ctx, const v1beta1::RegisterRequest& req) {
    const std::string& name = req.resource_name();
    int instance = 0;
    {
        std::unique_lock lk(mu_);
        instance = instance_;
        ++resources_[name].registers;  // the kubelet counts a registration before checking it
        cv_.notify_all();
        if (hang_) {
            ++hung_;
            cv_.notify_all();
            while (hang_ && !stopping_ && !ctx->IsCancelled()) cv_.wait_for(lk, 10ms);
            --hung_;
            if (ctx->IsCancelled()) ++abandoned_;
            cv_.notify_all();
            if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "the caller gave up");
        }
        if (stopping_ || instance != instance_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "kubelet stopping");
    }
    if (req.version() != "v1beta1")
        return grpc::Status(grpc::StatusCode::UNKNOWN, "unsupported version " + req.version());
    const auto slash = name.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == name.size())
        return grpc::Status(grpc::StatusCode::UNKNOWN, "invalid resource name " + name);

    // connectClient: the new client becomes THE client of this name first (the older one, if
    // any, is only forgotten: its connection and stream stay open), then it connects.
    auto c = std::make_shared<Client>();
    c->instance = instance;
    c->resource = name;
    c->reg.resource_name = name;
    c->reg.endpoint = req.endpoint();
    c->reg.version = req.version();
    {
        std::lock_guard lk(mu_);
        clients_[name] = c;
    }
    c->channel = grpc::CreateChannel("unix://" + dir_ + "/" + req.endpoint(), grpc::InsecureChannelCredentials());
    c->stub = v1beta1::DevicePlugin::NewStub(c->channel);
    // Dial with a 10 s timeout (in slices, so that stop() is not held up), then the options.
    bool ok = false;
    for (auto deadline = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < deadline;) {
        if (c->channel->WaitForConnected(std::chrono::system_clock::now() + 50ms)) {
            ok = true;
            break;
        }
        std::lock_guard lk(mu_);
        if (stopping_) break;
    }
    v1beta1::DevicePluginOptions opts;
    if (ok) {
        grpc::ClientContext octx;
        octx.set_deadline(std::chrono::system_clock::now() + 10s);
        v1beta1::Empty empty;
        ok = c->stub->GetDevicePluginOptions(&octx, empty, &opts).ok();
    }
    std::unique_lock lk(mu_);
    if (!ok || stopping_ || instance != instance_) {
        clients_.erase(name);  // v1.26 deregisters the name, whichever client it holds now
        return grpc::Status(grpc::StatusCode::UNKNOWN, "failed to dial device plugin at " + req.endpoint());
    }
    // PluginConnected: this endpoint serves the resource from now on.
    c->reg.preferred_allocation_available = opts.get_preferred_allocation_available();
    c->reg.generation = ++generations_[name];
    Resource& r = resources_[name];
    r.endpoint = c;
    r.stopped = false;
    all_.push_back(c);
    c->reader = std::thread([this, c] { run_client(c); });
    cv_.notify_all();
    if (hold_answers_) {
        ++held_answers_;
        cv_.notify_all();
        lk.unlock();
        while (!ctx->IsCancelled()) std::this_thread::sleep_for(5ms);
        lk.lock();
        --held_answers_;
        cv_.notify_all();
        return grpc::Status(grpc::StatusCode::CANCELLED, "the kubelet exited before answering");
    }
    return grpc::Status::OK;
}

// runClient: read the stream; when it ends, drop the resource's CURRENT client (v1.26 looks it up
// by name, so an older stream ending cuts off the newest registration).
void FakeKubelet::run_client(const std::shared_ptr<Client>& c) {
    {
        std::unique_lock lk(mu_);
        if (hold_) {
            ++held_;
            cv_.notify_all();
            cv_.wait(lk, [&] { return !hold_ || stopping_; });
            --held_;
            cv_.notify_all();
        }
    }
    v1beta1::Empty empty;
    auto reader = c->stub->ListAndWatch(&c->stream_ctx, empty);
    {
        std::lock_guard lk(mu_);
        c->open = true;
        cv_.notify_all();
    }
    v1beta1::ListAndWatchResponse resp;
    while (reader->Read(&resp)) {
        std::lock_guard lk(mu_);
        ++updates_[c->resource];
        ++c->updates;
        if (c->instance != instance_) continue;
        Resource& r = resources_[c->resource];
        Devices devices;
        for (const auto& d : resp.devices()) {
            DeviceState s;
            s.health = d.health() == "Healthy" ? "Healthy" : "Unhealthy";
            for (const auto& n : d.topology().nodes()) s.numa.push_back(n.id());
            devices[d.id()] = std::move(s);
        }
        r.devices = devices;
        r.messages.push_back({++sequence_, std::move(devices)});
        r.history.push_back(static_cast<size_t>(resp.devices_size()));
        r.last_bytes = resp.ByteSizeLong();
        cv_.notify_all();
    }
    reader->Finish();
    std::shared_ptr<Client> current;
    {
        std::lock_guard lk(mu_);
        c->open = false;
        if (c->instance == instance_ && !stopping_) {
            auto it = clients_.find(c->resource);
            if (it != clients_.end()) {
                current = it->second;
                clients_.erase(it);
            }
        }
        cv_.notify_all();
    }
    if (current) disconnect(current);
}

// Client.Disconnect: close its connection (its stream ends), then PluginDisconnected: every
// device of the resource Unhealthy and its endpoint stopped.
void FakeKubelet::disconnect(const std::shared_ptr<Client>& c) {
    c->stream_ctx.TryCancel();
    std::lock_guard lk(mu_);
    if (c->instance != instance_) return;
    Resource& r = resources_[c->resource];
    if (r.endpoint) {
        for (auto& [id, d] : r.devices) d.health = "Unhealthy";
        r.stopped = true;
    }
    cv_.notify_all();
}

std::optional<FakeKubelet::Registration> FakeKubelet::wait_registered(const std::string& resource, int generation,
                                                                      std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    std::optional<Registration> out;
    cv_.wait_for(lk, timeout, [&] {
        auto it = resources_.find(resource);
        if (it == resources_.end() || !it->second.endpoint) return false;
        const Client& c = *it->second.endpoint;
        if (c.reg.generation < generation || c.updates == 0) return false;
        out = c.reg;
        return true;
    });
    return out;
}

bool FakeKubelet::wait_devices(const std::string& resource, const std::function<bool(const Devices&)>& pred,
                               std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, timeout, [&] {
        auto it = resources_.find(resource);
        return it != resources_.end() && !it->second.messages.empty() && pred(it->second.devices);
    });
}

std::uint64_t FakeKubelet::sequence() {
    std::lock_guard lk(mu_);
    return sequence_;
}

bool FakeKubelet::wait_message(const std::string& resource, const std::function<bool(const Devices&)>& pred,
                               std::uint64_t& after, std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, timeout, [&] {
        auto it = resources_.find(resource);
        if (it == resources_.end()) return false;
        const Resource& r = it->second;
        for (const auto& m : r.messages) {
            if (m.number <= after || !pred(m.devices)) continue;
            after = m.number;
            return true;
        }
        return false;
    });
}

bool FakeKubelet::wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (pred()) return true;
        std::this_thread::sleep_for(5ms);
    }
    return pred();
}

FakeKubelet::Devices FakeKubelet::devices(const std::string& resource) {
    std::lock_guard lk(mu_);
    auto it = resources_.find(resource);
    return it == resources_.end() ? Devices{} : it->second.devices;
}

std::vector<FakeKubelet::Devices> FakeKubelet::messages(const std::string& resource) {
    return messages(resource, 0);  // numbers start at 1
}

std::vector<FakeKubelet::Devices> FakeKubelet::messages(const std::string& resource, std::uint64_t after) {
    std::lock_guard lk(mu_);
    std::vector<Devices> out;
    auto it = resources_.find(resource);
    if (it == resources_.end()) return out;
    for (const auto& m : it->second.messages)
        if (m.number > after) out.push_back(m.devices);
    return out;
}

int FakeKubelet::updates(const std::string& resource) {
    std::lock_guard lk(mu_);
    auto it = updates_.find(resource);
    return it == updates_.end() ? 0 : it->second;
}

bool FakeKubelet::stream_ended(const std::string& resource) {
    std::lock_guard lk(mu_);
    for (const auto& c : all_)
        if (c->resource == resource && c->open) return false;
    return true;
}

std::vector<std::string> FakeKubelet::resources() {
    std::lock_guard lk(mu_);
    std::vector<std::string> out;
    for (const auto& [name, r] : resources_)
        if (r.endpoint) out.push_back(name);
    return out;
}

std::vector<size_t> FakeKubelet::history(const std::string& resource) {
    std::lock_guard lk(mu_);
    auto it = resources_.find(resource);
    return it == resources_.end() ? std::vector<size_t>{} : it->second.history;
}

size_t FakeKubelet::last_message_bytes(const std::string& resource) {
    std::lock_guard lk(mu_);
    auto it = resources_.find(resource);
    return it == resources_.end() ? 0 : it->second.last_bytes;
}

int FakeKubelet::register_calls(const std::string& resource) {
    std::lock_guard lk(mu_);
    auto it = resources_.find(resource);
    return it == resources_.end() ? 0 : it->second.registers;
}

int FakeKubelet::open_streams(const std::string& resource) {
    std::lock_guard lk(mu_);
    int n = 0;
    for (const auto& c : all_) n += c->resource == resource && c->open;
    return n;
}

bool FakeKubelet::connected(const std::string& resource) {
    std::lock_guard lk(mu_);
    return clients_.contains(resource);
}

int FakeKubelet::allocatable(const std::string& resource) {
    std::lock_guard lk(mu_);
    auto it = resources_.find(resource);
    if (it == resources_.end()) return 0;
    int n = 0;
    for (const auto& [id, d] : it->second.devices) n += d.health == "Healthy";
    return n;
}

std::string FakeKubelet::endpoint(const std::string& resource) {
    std::lock_guard lk(mu_);
    auto it = clients_.find(resource);
    return it == clients_.end() ? std::string() : it->second->reg.endpoint;
}

std::shared_ptr<FakeKubelet::Client> FakeKubelet::endpoint_for(const std::string& resource, grpc::Status* err) {
    std::lock_guard lk(mu_);
    auto it = resources_.find(resource);
    if (it == resources_.end() || !it->second.endpoint) {
        *err = grpc::Status(grpc::StatusCode::NOT_FOUND, "not registered");
        return nullptr;
    }
    if (it->second.stopped) {
        *err = grpc::Status(grpc::StatusCode::UNAVAILABLE, "endpoint stopped");
        return nullptr;
    }
    return it->second.endpoint;
}

grpc::Status FakeKubelet::allocate(const std::string& resource, const std::vector<std::vector<std::string>>& containers,
                                   v1beta1::AllocateResponse* out) {
    grpc::Status err;
    auto c = endpoint_for(resource, &err);
    if (!c) return err;
    v1beta1::AllocateRequest req;
    for (const auto& ids : containers) {
        auto* cr = req.add_container_requests();
        for (const auto& id : ids) cr->add_devices_ids(id);
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    return c->stub->Allocate(&ctx, req, out);
}

grpc::Status FakeKubelet::options(const std::string& resource, v1beta1::DevicePluginOptions* out) {
    grpc::Status err;
    auto c = endpoint_for(resource, &err);
    if (!c) return err;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    return c->stub->GetDevicePluginOptions(&ctx, v1beta1::Empty(), out);
}

grpc::Status FakeKubelet::prefer(const std::string& resource, const std::vector<std::string>& available,
                                 const std::vector<std::string>& must_include, int size, std::vector<std::string>* out) {
    grpc::Status err;
    auto c = endpoint_for(resource, &err);
    if (!c) return err;
    v1beta1::PreferredAllocationRequest req;
    auto* cr = req.add_container_requests();
    for (const auto& id : available) cr->add_available_deviceids(id);
    for (const auto& id : must_include) cr->add_must_include_deviceids(id);
    cr->set_allocation_size(size);
    v1beta1::PreferredAllocationResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    auto st = c->stub->GetPreferredAllocation(&ctx, req, &resp);
    if (st.ok() && resp.container_responses_size() > 0)
        out->assign(resp.container_responses(0).deviceids().begin(), resp.container_responses(0).deviceids().end());
    return st;
}

}  // namespace kgpu::test
