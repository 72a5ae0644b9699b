#include "deviceplugin/server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>

#include <grpcpp/grpcpp.h>

#include "common/grpc_error.h"
#include "common/log.h"

namespace kgpu::deviceplugin {

// One open ListAndWatch stream. Writes the latest snapshot; if a newer one arrives while a write
// is in flight, only the newest is written next (every message is a full list, so skipping an
// intermediate one loses nothing). Deletes itself in OnDone, telling the server whether the peer
// ended it.
class ListAndWatchReactor : public grpc::ServerWriteReactor<v1beta1::ListAndWatchResponse> {
public:
    ListAndWatchReactor(ResourceServer* server, bool probe) : server_(server) {
        id_ = server_->attach(this, probe);  // sends the current list
    }

    void push(const v1beta1::ListAndWatchResponse& list) {
        std::lock_guard lk(mu_);
        if (done_ || finishing_) return;
        pending_ = list;
        has_pending_ = true;
        if (!writing_) write_locked();
    }

    // Ends the stream with OK once the pending write (if any) went out.
    void end() {
        std::lock_guard lk(mu_);
        if (done_ || finishing_) return;
        finishing_ = true;
        if (!writing_ && !has_pending_) finish_locked(grpc::Status::OK);
    }

    void OnWriteDone(bool ok) override {
        std::lock_guard lk(mu_);
        writing_ = false;
        if (!ok) {
            // The kubelet went away; OnDone follows once we finish.
            if (!finishing_) by_peer_ = true;
            finish_locked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream broken"));
            return;
        }
        if (has_pending_) {
            write_locked();
        } else if (finishing_) {
            finish_locked(grpc::Status::OK);
        }
    }

    void OnCancel() override {
        std::lock_guard lk(mu_);
        if (!finishing_) by_peer_ = true;
        finishing_ = true;
        if (!writing_) finish_locked(grpc::Status::CANCELLED);
    }

    void OnDone() override {
        bool by_peer = false;
        {
            std::lock_guard lk(mu_);
            done_ = true;
            by_peer = by_peer_;
        }
        server_->detach(id_, by_peer);
        delete this;
    }

private:
    void write_locked() {
        current_ = std::move(pending_);
        has_pending_ = false;
        writing_ = true;
        StartWrite(&current_);
    }
    void finish_locked(const grpc::Status& st) {
        if (finished_) return;
        finished_ = true;
        Finish(st);
    }

    ResourceServer* server_;
    std::uint64_t id_ = 0;
    std::mutex mu_;
    v1beta1::ListAndWatchResponse current_;
    v1beta1::ListAndWatchResponse pending_;
    bool has_pending_ = false;
    bool writing_ = false;
    bool finishing_ = false;
    bool finished_ = false;
    bool done_ = false;
    bool by_peer_ = false;
};

class ResourceServer::Service : public v1beta1::DevicePlugin::CallbackService {
public:
    explicit Service(ResourceServer* s) : s_(s) {}

    grpc::ServerUnaryReactor* GetDevicePluginOptions(grpc::CallbackServerContext* ctx, const v1beta1::Empty*,
                                                     v1beta1::DevicePluginOptions* out) override {
        out->set_pre_start_required(false);
        out->set_get_preferred_allocation_available(true);
        auto* r = ctx->DefaultReactor();
        r->Finish(grpc::Status::OK);
        return r;
    }

    grpc::ServerWriteReactor<v1beta1::ListAndWatchResponse>* ListAndWatch(grpc::CallbackServerContext* ctx,
                                                                         const v1beta1::Empty*) override {
        const bool probe = ctx->client_metadata().contains(kProbeMetadataKey);
        return new ListAndWatchReactor(s_, probe);
    }

    grpc::ServerUnaryReactor* GetPreferredAllocation(grpc::CallbackServerContext* ctx,
                                                     const v1beta1::PreferredAllocationRequest* req,
                                                     v1beta1::PreferredAllocationResponse* out) override {
        auto* r = ctx->DefaultReactor();
        auto res = s_->handlers_.prefer(*req);
        if (!res) {
            log::warn("{}: GetPreferredAllocation refused: {}", s_->resource_name_, res.error().message);
            r->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, res.error().message));
        } else {
            *out = std::move(*res);
            r->Finish(grpc::Status::OK);
        }
        return r;
    }

    grpc::ServerUnaryReactor* Allocate(grpc::CallbackServerContext* ctx, const v1beta1::AllocateRequest* req,
                                       v1beta1::AllocateResponse* out) override {
        auto* r = ctx->DefaultReactor();
        auto res = s_->handlers_.allocate(*req);
        if (!res) {
            log::warn("{}: Allocate refused: {}", s_->resource_name_, res.error().message);
            r->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, res.error().message));
        } else {
            *out = std::move(*res);
            r->Finish(grpc::Status::OK);
        }
        return r;
    }

    grpc::ServerUnaryReactor* PreStartContainer(grpc::CallbackServerContext* ctx, const v1beta1::PreStartContainerRequest*,
                                                v1beta1::PreStartContainerResponse*) override {
        auto* r = ctx->DefaultReactor();
        r->Finish(grpc::Status::OK);
        return r;
    }

private:
    ResourceServer* s_;
};

ResourceServer::ResourceServer(std::string resource_name, std::string socket_path, Handlers handlers)
    : resource_name_(std::move(resource_name)), socket_path_(std::move(socket_path)), handlers_(std::move(handlers)) {}

ResourceServer::~ResourceServer() { stop(); }

namespace {

// Sets the umask for the current scope. The umask is per process; the only other file a thread
// may create meanwhile gets a stricter mode, never a looser one.
class UmaskScope {
public:
    explicit UmaskScope(mode_t mask) : old_(::umask(mask)) {}
    ~UmaskScope() { ::umask(old_); }
    UmaskScope(const UmaskScope&) = delete;
    UmaskScope& operator=(const UmaskScope&) = delete;

private:
    mode_t old_;
};

}  // namespace

Status ResourceServer::start() {
    std::lock_guard life(life_mu_);
    if (server_) return {};
    if (::unlink(socket_path_.c_str()) != 0 && errno != ENOENT)
        return fail(Code::io, "cannot remove the stale socket {}: {}", socket_path_, std::strerror(errno));
    {
        std::lock_guard lk(mu_);
        stopping_ = false;
        start_id_ = next_id_;
    }
    service_ = std::make_unique<Service>(this);
    grpc::ServerBuilder builder;
    int bound = 0;
    builder.AddListeningPort("unix://" + socket_path_, grpc::InsecureServerCredentials(), &bound);
    builder.RegisterService(service_.get());
    {
        // The socket is bound inside BuildAndStart: 0600 whatever the caller's umask (issue #14).
        UmaskScope mask(0177);
        server_ = builder.BuildAndStart();
    }
    if (!server_ || bound == 0) {
        server_.reset();
        return fail(Code::io, "cannot serve {} on {}: bind failed (does the directory exist and is it writable?)",
                    resource_name_, socket_path_);
    }
    if (::chmod(socket_path_.c_str(), 0600) != 0)
        log::warn("cannot set mode 0600 on {}: {}", socket_path_, std::strerror(errno));
    return {};
}

bool ResourceServer::running() const {
    std::lock_guard life(life_mu_);
    return server_ != nullptr;
}

void ResourceServer::stop(bool empty_list_first) {
    std::lock_guard life(life_mu_);
    if (!server_) return;
    // The socket goes first: nothing new connects while the streams end.
    ::unlink(socket_path_.c_str());
    {
        std::lock_guard lk(mu_);
        stopping_ = true;
        // Reactors stay alive until OnDone, which needs mu_ to detach: calling into them while
        // holding mu_ is safe only because push/end never take mu_.
        for (auto& [id, r] : streams_) {
            if (empty_list_first) r->push(v1beta1::ListAndWatchResponse{});
            r->end();
        }
    }
    // Calls still running after the deadline (a peer that does not read its stream) are
    // cancelled.
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    server_->Wait();
    server_.reset();
    service_.reset();
}

void ResourceServer::publish(v1beta1::ListAndWatchResponse list) {
    std::lock_guard lk(mu_);
    // Every message is a full snapshot: an identical one tells the kubelet nothing.
    if (published_ && list.SerializeAsString() == list_.SerializeAsString()) return;
    published_ = true;
    list_ = std::move(list);
    for (auto& [id, r] : streams_) r->push(list_);
}

v1beta1::ListAndWatchResponse ResourceServer::current() const {
    std::lock_guard lk(mu_);
    return list_;
}

std::uint64_t ResourceServer::attach(ListAndWatchReactor* r, bool probe) {
    std::lock_guard lk(mu_);
    // Probes take numbers of their own (above every other stream's), so the next number stays
    // the one the registrar reserved for the kubelet.
    const std::uint64_t id = probe ? next_probe_id_++ : next_id_++;
    streams_.emplace(id, r);
    r->push(list_);
    if (stopping_) r->end();
    return id;
}

void ResourceServer::detach(std::uint64_t id, bool by_peer) {
    {
        std::lock_guard lk(mu_);
        streams_.erase(id);
        cv_.notify_all();
    }
    if (handlers_.stream_ended && !(id & kProbeStreamBit)) handlers_.stream_ended(id, by_peer);
}

size_t ResourceServer::open_streams() const {
    std::lock_guard lk(mu_);
    return streams_.size();
}

std::uint64_t ResourceServer::next_stream_id() const {
    std::lock_guard lk(mu_);
    return next_id_;
}

std::uint64_t ResourceServer::first_stream_of_start() const {
    std::lock_guard lk(mu_);
    return start_id_;
}

bool ResourceServer::stream_open(std::uint64_t id) const {
    std::lock_guard lk(mu_);
    return streams_.contains(id);
}

size_t ResourceServer::end_streams_before(std::uint64_t id, std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    size_t n = 0;
    for (auto& [sid, r] : streams_) {
        if (sid >= id) break;
        r->end();
        ++n;
    }
    if (n > 0)
        cv_.wait_for(lk, timeout, [&] { return streams_.empty() || streams_.begin()->first >= id; });
    return n;
}

void RegisterCancel::cancel() {
    std::lock_guard lk(mu_);
    cancelled_ = true;
    if (ctx_) ctx_->TryCancel();
}

void RegisterCancel::reset() {
    std::lock_guard lk(mu_);
    cancelled_ = false;
}

bool RegisterCancel::cancelled() const {
    std::lock_guard lk(mu_);
    return cancelled_;
}

Status register_with_kubelet(const std::string& kubelet_socket, const std::string& endpoint,
                             const std::string& resource_name, int timeout_ms, RegisterCancel* cancel) {
    auto channel = grpc::CreateChannel("unix://" + kubelet_socket, grpc::InsecureChannelCredentials());
    auto stub = v1beta1::Registration::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
    // Published under the cancel's lock, checked there too: a cancel() before this point stops
    // the call here, one after it cancels the context.
    struct Publish {
        RegisterCancel* c;
        bool cancelled = false;
        Publish(RegisterCancel* cancel, grpc::ClientContext* ctx) : c(cancel) {
            if (!c) return;
            std::lock_guard lk(c->mu_);
            cancelled = c->cancelled_;
            if (!cancelled) c->ctx_ = ctx;
        }
        ~Publish() {
            if (!c) return;
            std::lock_guard lk(c->mu_);
            c->ctx_ = nullptr;
        }
    } publish(cancel, &ctx);
    if (publish.cancelled)
        return fail(Code::unavailable, "registering {} with the kubelet at {}: cancelled", resource_name, kubelet_socket);
    v1beta1::RegisterRequest req;
    req.set_version("v1beta1");
    req.set_endpoint(endpoint);
    req.set_resource_name(resource_name);
    req.mutable_options()->set_pre_start_required(false);
    req.mutable_options()->set_get_preferred_allocation_available(true);
    v1beta1::Empty resp;
    grpc::Status st = stub->Register(&ctx, req, &resp);
    if (!st.ok())
        return fail(grpc_error::code_of(st.error_code()), "registering {} with the kubelet at {}: {}", resource_name,
                    kubelet_socket, grpc_error::describe(st));
    return {};
}

}  // namespace kgpu::deviceplugin
