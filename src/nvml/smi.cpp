// Device getters for `kgpu smi` (nvidia-smi's table) and the container runtime's `brand`
// requirement (declared in device.h).
#include "nvml/context.h"
#include "nvml/device.h"
#include "nvml/error.h"
#include "nvml/library.h"

namespace kgpu::nvml {

Result<unsigned> Device::brand() const {
    KGPU_NVML_LIVE();
    nvmlBrandType_t b = 0;
    if (nvmlReturn_t r = ctx_->api().DeviceGetBrand(handle_, &b); r != NVML_SUCCESS) return failed(*ctx_, "DeviceGetBrand", r);
    return static_cast<unsigned>(b);
}

Result<unsigned> Device::performance_state() const {
    KGPU_NVML_LIVE();
    nvmlPstates_t p{};
    if (nvmlReturn_t r = ctx_->api().DeviceGetPerformanceState(handle_, &p); r != NVML_SUCCESS)
        return failed(*ctx_, "DeviceGetPerformanceState", r);
    return static_cast<unsigned>(p);
}

}  // namespace kgpu::nvml
