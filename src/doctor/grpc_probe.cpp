#include "doctor/grpc_probe.h"

#include <chrono>

#include <grpcpp/grpcpp.h>

#include "common/grpc_error.h"
#include "deviceplugin_v1beta1.grpc.pb.h"
#include "podresources_v1.grpc.pb.h"

namespace kgpu::doctor {
namespace {

std::shared_ptr<grpc::Channel> channel(const std::filesystem::path& socket) {
    return grpc::CreateChannel("unix://" + socket.string(), grpc::InsecureChannelCredentials());
}

void deadline(grpc::ClientContext& ctx, int timeout_ms) {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
}

}  // namespace

Result<std::string> probe_device_plugin(const std::filesystem::path& socket, int timeout_ms) {
    auto stub = v1beta1::DevicePlugin::NewStub(channel(socket));
    grpc::ClientContext ctx;
    deadline(ctx, timeout_ms);
    v1beta1::Empty req;
    v1beta1::DevicePluginOptions opts;
    grpc::Status st = stub->GetDevicePluginOptions(&ctx, req, &opts);
    if (!st.ok())
        return fail(grpc_error::code_of(st.error_code()), "{}: GetDevicePluginOptions failed: {}", socket.string(),
                    grpc_error::describe(st));
    return fmt::format("{}: GetDevicePluginOptions answered (pre_start_required={}, get_preferred_allocation_available={})",
                       socket.string(), opts.pre_start_required(), opts.get_preferred_allocation_available());
}

Result<PodResourcesSummary> probe_pod_resources(const std::filesystem::path& socket, int timeout_ms) {
    auto stub = v1::PodResourcesLister::NewStub(channel(socket));
    grpc::ClientContext ctx;
    deadline(ctx, timeout_ms);
    v1::ListPodResourcesRequest req;
    v1::ListPodResourcesResponse resp;
    grpc::Status st = stub->List(&ctx, req, &resp);
    if (!st.ok())
        return fail(grpc_error::code_of(st.error_code()), "{}: List failed: {}", socket.string(), grpc_error::describe(st));
    PodResourcesSummary s;
    s.pods = static_cast<size_t>(resp.pod_resources_size());
    for (const auto& pod : resp.pod_resources())
        for (const auto& c : pod.containers())
            for (const auto& d : c.devices())
                if (d.resource_name().starts_with("nvidia.com/")) {
                    ++s.gpu_containers;
                    break;
                }
    return s;
}

Result<std::map<std::string, std::string>> probe_device_list(const std::filesystem::path& socket, int timeout_ms) {
    auto stub = v1beta1::DevicePlugin::NewStub(channel(socket));
    grpc::ClientContext ctx;
    deadline(ctx, timeout_ms);
    // Marks the stream as a probe (kProbeMetadataKey in src/deviceplugin/server.h): kgpu does not
    // take it for the kubelet's stream of a registration, so opening and closing it between a
    // Register and the kubelet's stream does not make kgpu register again (issue #12).
    ctx.AddMetadata("kgpu-probe", "1");
    v1beta1::Empty req;
    auto reader = stub->ListAndWatch(&ctx, req);
    v1beta1::ListAndWatchResponse resp;
    if (!reader->Read(&resp)) {
        grpc::Status st = reader->Finish();
        return fail(grpc_error::code_of(st.error_code()), "{}: ListAndWatch sent no device list: {}", socket.string(),
                    grpc_error::describe(st));
    }
    ctx.TryCancel();
    (void)reader->Finish();
    std::map<std::string, std::string> out;
    for (const auto& d : resp.devices()) out[d.id()] = d.health();
    return out;
}

Result<std::map<std::string, std::set<std::string>>> probe_allocatable(const std::filesystem::path& socket,
                                                                       int timeout_ms) {
    auto stub = v1::PodResourcesLister::NewStub(channel(socket));
    grpc::ClientContext ctx;
    deadline(ctx, timeout_ms);
    v1::AllocatableResourcesRequest req;
    v1::AllocatableResourcesResponse resp;
    grpc::Status st = stub->GetAllocatableResources(&ctx, req, &resp);
    if (!st.ok()) {
        // The kubelet answers "PodResources API GetAllocatableResources disabled" with the gate off.
        const bool absent = st.error_code() == grpc::StatusCode::UNIMPLEMENTED ||
                            st.error_message().find("disabled") != std::string::npos;
        return fail(absent ? Code::not_supported : grpc_error::code_of(st.error_code()),
                    "{}: GetAllocatableResources failed: {}", socket.string(), grpc_error::describe(st));
    }
    std::map<std::string, std::set<std::string>> out;
    for (const auto& d : resp.devices()) out[d.resource_name()].insert(d.device_ids().begin(), d.device_ids().end());
    return out;
}

}  // namespace kgpu::doctor
