// MIG management on a GPU (declared in device.h): its mode, its GPU instance profiles and their
// placements, and GPU instances made with one full-size compute instance each, as mig-parted and
// `nvidia-smi mig -cgi ... -C` make them. Profile ids are the GPU's own (info.id), which every
// call after nvmlDeviceGetGpuInstanceProfileInfo takes; the NVML_*_PROFILE_* indices only select.
#include <algorithm>

#include "nvml/context.h"
#include "nvml/device.h"
#include "nvml/error.h"
#include "nvml/library.h"
#include "nvml/nvml_abi.h"

namespace kgpu::nvml {

namespace {

// The compute instance profile index of a compute instance of `slices` slices.
unsigned ci_index_for(unsigned slices) {
    switch (slices) {
        case 1: return NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE;
        case 2: return NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE;
        case 3: return NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE;
        case 4: return NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE;
        case 7: return NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE;
        case 8: return NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE;
        case 6: return NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE;
        default: return NVML_COMPUTE_INSTANCE_PROFILE_COUNT;
    }
}

}  // namespace

Result<MigActivation> Device::set_mig_mode(bool enabled) const {
    nvmlReturn_t activation = NVML_SUCCESS;
    KGPU_DEVICE_CALL(DeviceSetMigMode, enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE, &activation);
    if (activation == NVML_SUCCESS) return MigActivation::now;
    if (activation == NVML_ERROR_IN_USE) return MigActivation::needs_reset;
    if (activation == NVML_ERROR_RESET_REQUIRED) return MigActivation::needs_reboot;
    return failed(*ctx_, "DeviceSetMigMode", activation);
}

Result<std::vector<GpuInstanceProfile>> Device::gpu_instance_profiles() const {
    std::vector<GpuInstanceProfile> out;
    for (unsigned index = 0; index < NVML_GPU_INSTANCE_PROFILE_COUNT; ++index) {
        nvmlGpuInstanceProfileInfo_t info{};
        auto r = call(ctx_->api().DeviceGetGpuInstanceProfileInfo, index, &info);
        if (!r) return std::unexpected(r.error());
        if (*r == NVML_ERROR_NOT_SUPPORTED || *r == NVML_ERROR_INVALID_ARGUMENT) continue;  // not on this GPU
        if (*r != NVML_SUCCESS) return failed(*ctx_, "DeviceGetGpuInstanceProfileInfo", *r);
        GpuInstanceProfile p;
        p.index = index;
        p.id = info.id;
        p.slices = info.sliceCount;
        p.instance_count = info.instanceCount;
        p.memory_mb = info.memorySizeMB;
        unsigned count = 0;
        KGPU_DEVICE_CALL(DeviceGetGpuInstancePossiblePlacements, info.id, nullptr, &count);
        std::vector<nvmlGpuInstancePlacement_t> placements(count);
        if (count) KGPU_DEVICE_CALL(DeviceGetGpuInstancePossiblePlacements, info.id, placements.data(), &count);
        for (unsigned i = 0; i < count; ++i) p.placements.emplace_back(placements[i].start, placements[i].size);
        out.push_back(std::move(p));
    }
    return out;
}

Result<std::vector<GpuInstanceInfo>> Device::gpu_instances(const GpuInstanceProfile& profile) const {
    std::vector<nvmlGpuInstance_t> handles(std::max(profile.instance_count, 1u) + 8);
    unsigned count = static_cast<unsigned>(handles.size());
    KGPU_DEVICE_CALL(DeviceGetGpuInstances, profile.id, handles.data(), &count);
    std::vector<GpuInstanceInfo> out;
    for (unsigned i = 0; i < count && i < handles.size(); ++i) {
        nvmlGpuInstanceInfo_t info{};
        if (nvmlReturn_t r = ctx_->api().GpuInstanceGetInfo(handles[i], &info); r != NVML_SUCCESS)
            return failed(*ctx_, "GpuInstanceGetInfo", r);
        GpuInstanceInfo gi{handles[i], info.id, info.profileId, info.placement.start, info.placement.size, 0};
        for (unsigned ci = 0; ci < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ++ci) {
            nvmlComputeInstance_t cis[8] = {};
            unsigned n = 8;
            const nvmlReturn_t r = ctx_->api().GpuInstanceGetComputeInstances(handles[i], ci, cis, &n);
            if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT) continue;
            if (r != NVML_SUCCESS) return failed(*ctx_, "GpuInstanceGetComputeInstances", r);
            gi.compute_instances += n;
        }
        out.push_back(gi);
    }
    return out;
}

Result<GpuInstanceInfo> Device::create_gpu_instance(const GpuInstanceProfile& profile, unsigned start) const {
    auto placement = std::find_if(profile.placements.begin(), profile.placements.end(),
                                  [&](const auto& p) { return p.first == start; });
    if (placement == profile.placements.end())
        return std::unexpected(Error{Code::invalid_argument, "no placement at memory slice " + std::to_string(start)});
    const nvmlGpuInstancePlacement_t where{placement->first, placement->second};
    nvmlGpuInstance_t gi = nullptr;
    KGPU_DEVICE_CALL(DeviceCreateGpuInstanceWithPlacement, profile.id, &where, &gi);
    nvmlGpuInstanceInfo_t info{};
    nvmlReturn_t r = ctx_->api().GpuInstanceGetInfo(gi, &info);
    if (r != NVML_SUCCESS) return failed(*ctx_, "GpuInstanceGetInfo", r);
    GpuInstanceInfo out{gi, info.id, info.profileId, info.placement.start, info.placement.size, 0};
    // One compute instance of the whole GPU instance: the profile whose slice count is the GI's.
    nvmlComputeInstanceProfileInfo_t ci{};
    r = ctx_->api().GpuInstanceGetComputeInstanceProfileInfo(gi, ci_index_for(profile.slices),
                                                             NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci);
    nvmlComputeInstance_t made = nullptr;
    if (r == NVML_SUCCESS) r = ctx_->api().GpuInstanceCreateComputeInstance(gi, ci.id, &made);
    if (r != NVML_SUCCESS) {
        ctx_->api().GpuInstanceDestroy(gi);  // nothing half made is left behind
        return failed(*ctx_, "GpuInstanceCreateComputeInstance", r);
    }
    out.compute_instances = 1;
    return out;
}

Status Device::destroy_gpu_instance(const GpuInstanceInfo& instance) const {
    if (auto st = live(); !st) return st;  // its calls take the instance's handles, not the device's
    for (unsigned ci = 0; ci < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ++ci) {
        nvmlComputeInstance_t cis[8] = {};
        unsigned n = 8;
        nvmlReturn_t r = ctx_->api().GpuInstanceGetComputeInstances(instance.handle, ci, cis, &n);
        if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_INVALID_ARGUMENT) continue;
        if (r != NVML_SUCCESS) return failed(*ctx_, "GpuInstanceGetComputeInstances", r);
        for (unsigned i = 0; i < n && i < 8; ++i)
            if (r = ctx_->api().ComputeInstanceDestroy(cis[i]); r != NVML_SUCCESS)
                return failed(*ctx_, "ComputeInstanceDestroy", r);
    }
    if (nvmlReturn_t r = ctx_->api().GpuInstanceDestroy(instance.handle); r != NVML_SUCCESS)
        return failed(*ctx_, "GpuInstanceDestroy", r);
    return {};
}

}  // namespace kgpu::nvml
