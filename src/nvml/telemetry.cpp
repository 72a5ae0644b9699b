// Device telemetry getters used by the exporter (declared in device.h). Kept apart from
// device.cpp, whose getters serve discovery.
#include "nvml/context.h"
#include "nvml/device.h"
#include "nvml/error.h"
#include "nvml/library.h"

namespace kgpu::nvml {

#define KGPU_TRY(field, ...)                                                                       \
    do {                                                                                           \
        if (nvmlReturn_t r_ = ctx_->api().field(__VA_ARGS__); r_ != NVML_SUCCESS)                  \
            return failed(*ctx_, #field, r_);                                                      \
    } while (0)

Result<Utilization> Device::utilization() const {
    KGPU_NVML_LIVE();
    nvmlUtilization_t u{};
    KGPU_TRY(DeviceGetUtilizationRates, handle_, &u);
    return Utilization{u.gpu, u.memory};
}

Result<unsigned> Device::encoder_utilization() const {
    KGPU_NVML_LIVE();
    unsigned util = 0, period_us = 0;
    KGPU_TRY(DeviceGetEncoderUtilization, handle_, &util, &period_us);
    return util;
}

Result<unsigned> Device::decoder_utilization() const {
    KGPU_NVML_LIVE();
    unsigned util = 0, period_us = 0;
    KGPU_TRY(DeviceGetDecoderUtilization, handle_, &util, &period_us);
    return util;
}

Result<unsigned> Device::temperature_c() const {
    KGPU_NVML_LIVE();
    unsigned t = 0;
    KGPU_TRY(DeviceGetTemperature, handle_, NVML_TEMPERATURE_GPU, &t);
    return t;
}

Result<unsigned> Device::memory_temperature_c() const {
    KGPU_NVML_LIVE();
    nvmlFieldValue_t v{};
    v.fieldId = NVML_FI_DEV_MEMORY_TEMP;
    KGPU_TRY(DeviceGetFieldValues, handle_, 1, &v);
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
    KGPU_NVML_LIVE();
    unsigned mw = 0;
    KGPU_TRY(DeviceGetPowerUsage, handle_, &mw);
    return mw;
}

Result<std::uint64_t> Device::total_energy_mj() const {
    KGPU_NVML_LIVE();
    unsigned long long mj = 0;
    KGPU_TRY(DeviceGetTotalEnergyConsumption, handle_, &mj);
    return mj;
}

Result<unsigned> Device::sm_clock_mhz() const {
    KGPU_NVML_LIVE();
    unsigned mhz = 0;
    KGPU_TRY(DeviceGetClockInfo, handle_, NVML_CLOCK_SM, &mhz);
    return mhz;
}

Result<unsigned> Device::memory_clock_mhz() const {
    KGPU_NVML_LIVE();
    unsigned mhz = 0;
    KGPU_TRY(DeviceGetClockInfo, handle_, NVML_CLOCK_MEM, &mhz);
    return mhz;
}

Result<unsigned> Device::pcie_replay_counter() const {
    KGPU_NVML_LIVE();
    unsigned n = 0;
    KGPU_TRY(DeviceGetPcieReplayCounter, handle_, &n);
    return n;
}

Result<std::uint64_t> Device::ecc_volatile_total(bool corrected) const {
    KGPU_NVML_LIVE();
    unsigned long long n = 0;
    KGPU_TRY(DeviceGetTotalEccErrors, handle_,
             corrected ? NVML_MEMORY_ERROR_TYPE_CORRECTED : NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &n);
    return n;
}

#undef KGPU_TRY

}  // namespace kgpu::nvml
