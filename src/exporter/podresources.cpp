// PodResourcesClient (attribution.h): kubelet PodResources v1 List -> DeviceUse per GPU.
#include <algorithm>
#include <set>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "common/log.h"
#include "exporter/attribution.h"
#include "exporter/attribution_log.h"
#include "podresources_v1.grpc.pb.h"

namespace kgpu::exporter {
namespace {

Code code_of(grpc::StatusCode c) {
    switch (c) {
    case grpc::StatusCode::DEADLINE_EXCEEDED: return Code::timeout;
    case grpc::StatusCode::UNIMPLEMENTED: return Code::not_supported;
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED: return Code::no_permission;
    default: return Code::unavailable;
    }
}

// Caps the memory spent on remembering which unresolvable IDs were already logged; past it the
// set starts over (a node does not have thousands of device IDs, so this only guards against a
// kubelet that keeps inventing them).
constexpr size_t kMaxLoggedIds = 4096;

}  // namespace

struct PodResourcesClient::Impl {
    PodResourcesOptions options;
    std::string path;  // the socket path, as messages name it
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::PodResourcesLister::Stub> stub;
    detail::FailureLog failures;
    std::set<std::string> logged_ids;  // "<resource> <id>" already warned about
};

PodResourcesClient::PodResourcesClient(PodResourcesOptions options) : impl_(std::make_unique<Impl>()) {
    auto& im = *impl_;
    im.options = std::move(options);
    std::string_view s = im.options.socket;
    if (s.starts_with("unix://")) s.remove_prefix(7);
    else if (s.starts_with("unix:")) s.remove_prefix(5);
    im.path = std::string(s);
    if (im.path.empty()) return;  // list() reports it
    // A kubelet restart removes and re-creates the socket. gRPC's default reconnect backoff grows
    // to 120 s, which would hide pod labels for minutes after the kubelet is back; a local socket
    // is cheap to retry, so cap it at one second.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // Kubernetes' own PodResources client allows 16 MiB: a node with many pods can exceed gRPC's 4 MiB.
    args.SetMaxReceiveMessageSize(16 * 1024 * 1024);
    im.channel = grpc::CreateCustomChannel("unix:" + im.path, grpc::InsecureChannelCredentials(), args);
    im.stub = v1::PodResourcesLister::NewStub(im.channel);
}

PodResourcesClient::~PodResourcesClient() = default;

Result<std::vector<DeviceUse>> PodResourcesClient::list(const inventory::Node& node) {
    auto& im = *impl_;
    if (!im.stub) {
        auto err = Error::make(Code::invalid_argument, "PodResources socket '{}': expected a path or unix:///path",
                               im.options.socket);
        im.failures.failed(err.message);
        return std::unexpected(err);
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + im.options.timeout);
    v1::ListPodResourcesRequest req;
    v1::ListPodResourcesResponse resp;
    grpc::Status st = im.stub->List(&ctx, req, &resp);
    if (!st.ok()) {
        const auto c = st.error_code();
        auto err = Error::make(code_of(c), "PodResources List on {} failed: {}{}{}{}; pod labels are left out until it answers",
                               im.path, detail::grpc_code_name(static_cast<int>(c)),
                               st.error_message().empty() ? "" : ": ", st.error_message(),
                               c == grpc::StatusCode::UNIMPLEMENTED ? " (the socket does not serve the PodResources v1 API)" : "");
        im.failures.failed(err.message);
        return std::unexpected(err);
    }
    im.failures.ok(fmt::format("PodResources List on {} answers again", im.path));

    std::vector<DeviceUse> out;
    for (const auto& pod : resp.pod_resources()) {
        for (const auto& c : pod.containers()) {
            for (const auto& d : c.devices()) {
                if (!is_gpu_resource(d.resource_name(), im.options.extra_resources)) continue;
                for (const auto& id : d.device_ids()) {
                    if (auto t = resolve_device_id(id, node)) {
                        out.push_back(DeviceUse{*t, PodRef{pod.name(), pod.namespace_(), c.name()}, replica_of(id)});
                        continue;
                    }
                    if (im.logged_ids.size() >= kMaxLoggedIds) im.logged_ids.clear();
                    if (im.logged_ids.insert(d.resource_name() + " " + id).second)
                        log::warn("PodResources on {}: device ID '{}' of {} (pod {}/{}, container {}) matches no GPU on this "
                                  "node; skipped",
                                  im.path, id, d.resource_name(), pod.namespace_(), pod.name(), c.name());
                }
            }
        }
    }
    std::ranges::sort(out);
    // Two replicas of one GPU in one container are one use (the lower replica number names it).
    auto dup = std::ranges::unique(out, [](const DeviceUse& a, const DeviceUse& b) {
        return a.target == b.target && a.pod == b.pod;
    });
    out.erase(dup.begin(), dup.end());
    return out;
}

}  // namespace kgpu::exporter
