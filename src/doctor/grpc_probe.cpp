#include "doctor/grpc_probe.h"

#include <chrono>

#include <grpcpp/grpcpp.h>

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
        return fail(Code::unavailable, "{}: GetDevicePluginOptions failed: {} (gRPC code {})", socket.string(),
                    st.error_message(), static_cast<int>(st.error_code()));
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
        return fail(Code::unavailable, "{}: List failed: {} (gRPC code {})", socket.string(), st.error_message(),
                    static_cast<int>(st.error_code()));
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

}  // namespace kgpu::doctor
