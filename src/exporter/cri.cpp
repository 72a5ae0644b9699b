// CriClient (attribution.h): CRI runtime.v1 RuntimeService/ListContainers and ListPodSandbox on a
// unix socket.
#include <utility>

#include <grpcpp/grpcpp.h>

#include "common/grpc_error.h"
#include "cri_runtime_v1.grpc.pb.h"
#include "exporter/attribution.h"
#include "exporter/attribution_log.h"

namespace kgpu::exporter {
namespace {

// The labels the kubelet puts on every container it creates (facts/cri-and-process-attribution.md).
constexpr std::string_view kPodName = "io.kubernetes.pod.name";
constexpr std::string_view kPodNamespace = "io.kubernetes.pod.namespace";
constexpr std::string_view kContainerName = "io.kubernetes.container.name";

std::string label(const google::protobuf::Map<std::string, std::string>& labels, std::string_view key) {
    auto it = labels.find(std::string(key));
    return it == labels.end() ? std::string() : it->second;
}

}  // namespace

struct CriClient::Impl {
    std::string endpoint;  // as given, for messages
    std::string path;      // the socket path; empty when the endpoint is not a unix socket
    std::chrono::milliseconds timeout;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<runtime::v1::RuntimeService::Stub> stub;
};

CriClient::CriClient(std::string endpoint, std::chrono::milliseconds timeout) : impl_(std::make_unique<Impl>()) {
    auto& im = *impl_;
    im.endpoint = std::move(endpoint);
    im.timeout = timeout;
    std::string_view e = im.endpoint;
    if (e.starts_with("unix://")) e.remove_prefix(7);
    else if (e.starts_with("unix:")) e.remove_prefix(5);
    else if (e.find("://") != std::string_view::npos) return;  // tcp:// and friends: list_containers says so
    im.path = std::string(e);
    if (im.path.empty()) return;
    // As for PodResources: a restarted runtime re-creates its socket; retry it within a second
    // rather than after gRPC's default backoff of up to two minutes. crictl allows 16 MiB answers.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetMaxReceiveMessageSize(16 * 1024 * 1024);
    im.channel = grpc::CreateCustomChannel("unix:" + im.path, grpc::InsecureChannelCredentials(), args);
    im.stub = runtime::v1::RuntimeService::NewStub(im.channel);
}

CriClient::~CriClient() = default;

namespace {

// A failed CRI call as an Error naming the method and the socket.
std::unexpected<Error> cri_failure(std::string_view method, const std::string& path, const grpc::Status& st) {
    const char* hint = st.error_code() == grpc::StatusCode::UNIMPLEMENTED
                           ? " (the runtime does not serve CRI runtime.v1: is its CRI plugin disabled?)"
                           : "";
    return fail(grpc_error::code_of(st.error_code()), "CRI {} on {} failed: {}{}", method, path, grpc_error::describe(st),
                hint);
}

}  // namespace

Result<std::unordered_map<std::string, PodRef>> CriClient::list_containers() {
    auto& im = *impl_;
    if (!im.stub)
        return fail(Code::invalid_argument, "CRI endpoint '{}': expected unix:///path/to/runtime.sock or a socket path",
                    im.endpoint);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + im.timeout);
    runtime::v1::ListContainersRequest req;  // no filter: every container, whatever its state
    runtime::v1::ListContainersResponse resp;
    grpc::Status st = im.stub->ListContainers(&ctx, req, &resp);
    if (!st.ok()) return cri_failure("ListContainers", im.path, st);
    std::unordered_map<std::string, PodRef> out;
    out.reserve(static_cast<size_t>(resp.containers_size()));
    for (const auto& c : resp.containers()) {
        PodRef ref{label(c.labels(), kPodName), label(c.labels(), kPodNamespace), label(c.labels(), kContainerName)};
        // Containers the kubelet did not create (ctr, nerdctl, a docker run) have no pod.
        if (c.id().empty() || ref.pod.empty() || ref.namespace_name.empty()) continue;
        if (ref.container.empty() && c.has_metadata()) ref.container = c.metadata().name();
        out.emplace(c.id(), std::move(ref));
    }
    return out;
}

Result<std::vector<CriClient::Sandbox>> CriClient::list_pod_sandboxes() {
    auto& im = *impl_;
    if (!im.stub)
        return fail(Code::invalid_argument, "CRI endpoint '{}': expected unix:///path/to/runtime.sock or a socket path",
                    im.endpoint);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + im.timeout);
    runtime::v1::ListPodSandboxRequest req;  // every sandbox, ready or not
    runtime::v1::ListPodSandboxResponse resp;
    grpc::Status st = im.stub->ListPodSandbox(&ctx, req, &resp);
    if (!st.ok()) return cri_failure("ListPodSandbox", im.path, st);
    std::vector<Sandbox> out;
    out.reserve(static_cast<size_t>(resp.items_size()));
    for (const auto& p : resp.items()) {
        Sandbox s;
        s.name = p.metadata().name();
        s.namespace_name = p.metadata().namespace_();
        s.uid = p.metadata().uid();
        s.ready = p.state() == runtime::v1::SANDBOX_READY;
        // Sandboxes the kubelet did not make (no pod metadata) name no pod.
        if (s.name.empty() || s.namespace_name.empty()) continue;
        for (const auto& [k, v] : p.labels())
            if (!k.starts_with("io.kubernetes.pod.")) s.labels.emplace(k, v);
        out.push_back(std::move(s));
    }
    return out;
}

}  // namespace kgpu::exporter
