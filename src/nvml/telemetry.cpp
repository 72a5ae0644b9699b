// Device telemetry getters used by the exporter (declared in device.h). Kept apart from
// device.cpp, whose getters serve discovery.
#include "nvml/context.h"
#include "nvml/device.h"
#include "nvml/error.h"
#include "nvml/library.h"

namespace kgpu::nvml {

Result<Utilization> Device::utilization() const {
    nvmlUtilization_t u{};
    KGPU_DEVICE_CALL(DeviceGetUtilizationRates, &u);
    return Utilization{u.gpu, u.memory};
}

Result<unsigned> Device::encoder_utilization() const {
    unsigned util = 0, period_us = 0;
    KGPU_DEVICE_CALL(DeviceGetEncoderUtilization, &util, &period_us);
    return util;
}

Result<unsigned> Device::decoder_utilization() const {
    unsigned util = 0, period_us = 0;
    KGPU_DEVICE_CALL(DeviceGetDecoderUtilization, &util, &period_us);
    return util;
}

Result<unsigned> Device::temperature_c() const {
    unsigned t = 0;
    KGPU_DEVICE_CALL(DeviceGetTemperature, NVML_TEMPERATURE_GPU, &t);
    return t;
}

Result<unsigned> Device::memory_temperature_c() const {
    nvmlFieldValue_t v{};
    v.fieldId = NVML_FI_DEV_MEMORY_TEMP;
    KGPU_DEVICE_CALL(DeviceGetFieldValues, 1, &v);
    // The call succeeds as a whole; each field carries its own return code.
    if (v.nvmlReturn != NVML_SUCCESS) return failed(*ctx_, "DeviceGetFieldValues", v.nvmlReturn);
    switch (v.valueType) {
        case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: return static_cast<unsigned>(v.value.ullVal);
        case NVML_VALUE_TYPE_SIGNED_LONG_LONG: return static_cast<unsigned>(v.value.sllVal);
        case NVML_VALUE_TYPE_UNSIGNED_LONG: return static_cast<unsigned>(v.value.ulVal);
        case NVML_VALUE_TYPE_DOUBLE: return static_cast<unsigned>(v.value.dVal);
        default: return v.value.uiVal;
    }
}

Result<unsigned> Device::power_usage_mw() const {
    unsigned mw = 0;
    KGPU_DEVICE_CALL(DeviceGetPowerUsage, &mw);
    return mw;
}

Result<std::uint64_t> Device::total_energy_mj() const {
    unsigned long long mj = 0;
    KGPU_DEVICE_CALL(DeviceGetTotalEnergyConsumption, &mj);
    return mj;
}

Result<unsigned> Device::sm_clock_mhz() const {
    unsigned mhz = 0;
    KGPU_DEVICE_CALL(DeviceGetClockInfo, NVML_CLOCK_SM, &mhz);
    return mhz;
}

Result<unsigned> Device::memory_clock_mhz() const {
    unsigned mhz = 0;
    KGPU_DEVICE_CALL(DeviceGetClockInfo, NVML_CLOCK_MEM, &mhz);
    return mhz;
}

Result<unsigned> Device::pcie_replay_counter() const {
    unsigned n = 0;
    KGPU_DEVICE_CALL(DeviceGetPcieReplayCounter, &n);
    return n;
}

Result<std::uint64_t> Device::ecc_volatile_total(bool corrected) const {
    unsigned long long n = 0;
    KGPU_DEVICE_CALL(DeviceGetTotalEccErrors,
                     corrected ? NVML_MEMORY_ERROR_TYPE_CORRECTED : NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &n);
    return n;
}

}  // namespace kgpu::nvml
