#include "nvml/error.h"

#include "nvml/library.h"

namespace kgpu::nvml {

std::string_view return_name(int r) {
    switch (r) {
        case NVML_SUCCESS: return "SUCCESS";
        case NVML_ERROR_UNINITIALIZED: return "UNINITIALIZED";
        case NVML_ERROR_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
        case NVML_ERROR_NOT_SUPPORTED: return "NOT_SUPPORTED";
        case NVML_ERROR_NO_PERMISSION: return "NO_PERMISSION";
        case NVML_ERROR_ALREADY_INITIALIZED: return "ALREADY_INITIALIZED";
        case NVML_ERROR_NOT_FOUND: return "NOT_FOUND";
        case NVML_ERROR_INSUFFICIENT_SIZE: return "INSUFFICIENT_SIZE";
        case NVML_ERROR_INSUFFICIENT_POWER: return "INSUFFICIENT_POWER";
        case NVML_ERROR_DRIVER_NOT_LOADED: return "DRIVER_NOT_LOADED";
        case NVML_ERROR_TIMEOUT: return "TIMEOUT";
        case NVML_ERROR_IRQ_ISSUE: return "IRQ_ISSUE";
        case NVML_ERROR_LIBRARY_NOT_FOUND: return "LIBRARY_NOT_FOUND";
        case NVML_ERROR_FUNCTION_NOT_FOUND: return "FUNCTION_NOT_FOUND";
        case NVML_ERROR_CORRUPTED_INFOROM: return "CORRUPTED_INFOROM";
        case NVML_ERROR_GPU_IS_LOST: return "GPU_IS_LOST";
        case NVML_ERROR_RESET_REQUIRED: return "RESET_REQUIRED";
        case NVML_ERROR_OPERATING_SYSTEM: return "OPERATING_SYSTEM";
        case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "LIB_RM_VERSION_MISMATCH";
        case NVML_ERROR_IN_USE: return "IN_USE";
        case NVML_ERROR_MEMORY: return "MEMORY";
        case NVML_ERROR_NO_DATA: return "NO_DATA";
        case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "VGPU_ECC_NOT_SUPPORTED";
        case NVML_ERROR_INSUFFICIENT_RESOURCES: return "INSUFFICIENT_RESOURCES";
        case NVML_ERROR_FREQ_NOT_SUPPORTED: return "FREQ_NOT_SUPPORTED";
        case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "ARGUMENT_VERSION_MISMATCH";
        case NVML_ERROR_DEPRECATED: return "DEPRECATED";
        case NVML_ERROR_NOT_READY: return "NOT_READY";
        case NVML_ERROR_GPU_NOT_FOUND: return "GPU_NOT_FOUND";
        case NVML_ERROR_INVALID_STATE: return "INVALID_STATE";
        case NVML_ERROR_UNKNOWN: return "UNKNOWN";
        default: return "UNRECOGNISED";
    }
}

Code code_for(int r) {
    switch (r) {
        case NVML_ERROR_GPU_IS_LOST:
        case NVML_ERROR_RESET_REQUIRED: return Code::gpu_lost;
        case NVML_ERROR_NOT_SUPPORTED:
        case NVML_ERROR_FUNCTION_NOT_FOUND: return Code::not_supported;
        case NVML_ERROR_DRIVER_NOT_LOADED:
        case NVML_ERROR_LIBRARY_NOT_FOUND:
        case NVML_ERROR_UNINITIALIZED:
        case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return Code::unavailable;
        case NVML_ERROR_NO_PERMISSION: return Code::no_permission;
        case NVML_ERROR_NOT_FOUND:
        case NVML_ERROR_GPU_NOT_FOUND: return Code::not_found;
        case NVML_ERROR_TIMEOUT: return Code::timeout;
        case NVML_ERROR_INVALID_ARGUMENT: return Code::invalid_argument;
        default: return Code::internal;
    }
}

Error make_error(const Library& lib, std::string_view symbol, int r) {
    const char* text = lib.api().ErrorString(r);
    Error e = Error::make(code_for(r), "{} failed: {} ({}): {}", symbol, return_name(r), r,
                          text ? text : "no description");
    e.nvml_return = r;
    return e;
}

std::string_view init_failure_hint(int r) {
    switch (r) {
        case NVML_ERROR_DRIVER_NOT_LOADED:
            return "the NVIDIA kernel module is not loaded (check `lsmod | grep nvidia` and dmesg)";
        case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
            return "libnvidia-ml does not match the loaded kernel module: the driver was upgraded without "
                   "a reboot or module reload";
        case NVML_ERROR_NO_PERMISSION:
            return "no permission to open /dev/nvidiactl: run as root or give the container the NVIDIA devices";
        case NVML_ERROR_LIBRARY_NOT_FOUND:
            return "a library NVML depends on is missing";
        default:
            return "";
    }
}

}  // namespace kgpu::nvml
