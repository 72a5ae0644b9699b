#include "support/fake_nvml.h"

#include <cstdint>

namespace kgpu::test {
namespace {

FakeGpu* gpu_of(nvmlDevice_t d) {
    auto i = reinterpret_cast<std::uintptr_t>(d);
    if (i == 0 || i > fake_node().gpus.size()) return nullptr;
    return &fake_node().gpus[i - 1];
}

nvmlReturn_t copy(const std::string& s, char* buf, unsigned len) {
    if (s.size() + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    std::memcpy(buf, s.c_str(), s.size() + 1);
    return NVML_SUCCESS;
}

#define FAKE_GPU_OR_FAIL(d)                                   \
    FakeGpu* g = gpu_of(d);                                   \
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;               \
    if (g->lost) return NVML_ERROR_GPU_IS_LOST

}  // namespace

FakeNode& fake_node() {
    static FakeNode node;
    return node;
}

nvml::EntryPoints fake_table() {
    nvml::EntryPoints t{};
    t.Init = [] {
        ++fake_node().init_calls;
        return fake_node().init_result;
    };
    t.Shutdown = [] {
        ++fake_node().shutdown_calls;
        return NVML_SUCCESS;
    };
    t.ErrorString = [](nvmlReturn_t r) -> const char* { return r == NVML_ERROR_GPU_IS_LOST ? "GPU is lost" : "fake error"; };
    t.SystemGetDriverVersion = [](char* b, unsigned n) { return copy(fake_node().driver, b, n); };
    t.SystemGetCudaDriverVersion = [](int* v) {
        *v = fake_node().cuda;
        return NVML_SUCCESS;
    };
    t.DeviceGetCount = [](unsigned* n) {
        *n = static_cast<unsigned>(fake_node().gpus.size());
        return NVML_SUCCESS;
    };
    t.DeviceGetHandleByIndex = [](unsigned i, nvmlDevice_t* d) {
        if (i >= fake_node().gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
        *d = reinterpret_cast<nvmlDevice_t>(static_cast<std::uintptr_t>(i + 1));
        return NVML_SUCCESS;
    };
    t.DeviceGetUUID = [](nvmlDevice_t d, char* b, unsigned n) {
        FAKE_GPU_OR_FAIL(d);
        return copy(g->uuid, b, n);
    };
    t.DeviceGetName = [](nvmlDevice_t d, char* b, unsigned n) {
        FAKE_GPU_OR_FAIL(d);
        return copy(g->name, b, n);
    };
    t.DeviceGetPciInfo = [](nvmlDevice_t d, nvmlPciInfo_t* p) {
        FAKE_GPU_OR_FAIL(d);
        *p = {};
        std::strncpy(p->busId, g->bus_id.c_str(), sizeof p->busId - 1);
        p->bus = g->bus;
        p->pciDeviceId = 0x20B510DE;
        return NVML_SUCCESS;
    };
    t.DeviceGetNumaNodeId = [](nvmlDevice_t d, unsigned* n) {
        FAKE_GPU_OR_FAIL(d);
        *n = static_cast<unsigned>(g->numa);
        return NVML_SUCCESS;
    };
    t.DeviceGetMemoryInfo = [](nvmlDevice_t d, nvmlMemory_t* m) {
        FAKE_GPU_OR_FAIL(d);
        *m = {g->memory_bytes, g->memory_bytes, 0};
        return NVML_SUCCESS;
    };
    t.DeviceGetNvLinkState = [](nvmlDevice_t d, unsigned link, nvmlEnableState_t* s) {
        FAKE_GPU_OR_FAIL(d);
        if (link >= g->nvlink_remote.size()) return NVML_ERROR_NOT_SUPPORTED;
        *s = NVML_FEATURE_ENABLED;
        return NVML_SUCCESS;
    };
    t.DeviceGetNvLinkRemotePciInfo = [](nvmlDevice_t d, unsigned link, nvmlPciInfo_t* p) {
        FAKE_GPU_OR_FAIL(d);
        if (link >= g->nvlink_remote.size()) return NVML_ERROR_NOT_SUPPORTED;
        *p = {};
        std::strncpy(p->busId, g->nvlink_remote[link].c_str(), sizeof p->busId - 1);
        return NVML_SUCCESS;
    };
    t.DeviceGetNvLinkRemoteDeviceType = [](nvmlDevice_t d, unsigned link, nvmlIntNvLinkDeviceType_t* type) {
        FAKE_GPU_OR_FAIL(d);
        if (link >= g->nvlink_remote.size()) return NVML_ERROR_NOT_SUPPORTED;
        *type = link < g->nvlink_is_switch.size() && g->nvlink_is_switch[link] ? NVML_NVLINK_DEVICE_TYPE_SWITCH
                                                                               : NVML_NVLINK_DEVICE_TYPE_GPU;
        return NVML_SUCCESS;
    };
    t.DeviceGetTopologyCommonAncestor = [](nvmlDevice_t a, nvmlDevice_t b, nvmlGpuTopologyLevel_t* level) {
        if (!gpu_of(a) || !gpu_of(b)) return NVML_ERROR_INVALID_ARGUMENT;
        if (gpu_of(a)->lost || gpu_of(b)->lost) return NVML_ERROR_GPU_IS_LOST;
        *level = static_cast<nvmlGpuTopologyLevel_t>(fake_node().default_level);
        return NVML_SUCCESS;
    };
    return t;
}

}  // namespace kgpu::test
