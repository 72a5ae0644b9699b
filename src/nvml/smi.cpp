// Device getters for `kgpu smi` (nvidia-smi's table) and the container runtime's `brand`
// requirement (declared in device.h).
#include "nvml/context.h"
#include "nvml/device.h"
#include "nvml/error.h"
#include "nvml/library.h"

namespace kgpu::nvml {

Result<unsigned> Device::brand() const {
    nvmlBrandType_t b = 0;
    KGPU_DEVICE_CALL(DeviceGetBrand, &b);
    return static_cast<unsigned>(b);
}

Result<unsigned> Device::performance_state() const {
    nvmlPstates_t p{};
    KGPU_DEVICE_CALL(DeviceGetPerformanceState, &p);
    return static_cast<unsigned>(p);
}

}  // namespace kgpu::nvml
