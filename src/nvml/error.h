// The one mapping from nvmlReturn_t to kgpu::Error.
#pragma once

#include <string_view>

#include "common/error.h"

namespace kgpu::nvml {

class Library;

// The name NVML gives a return code ("GPU_IS_LOST"), or "UNKNOWN(<n>)".
std::string_view return_name(int nvml_return);

// Code for an NVML return code: GPU_IS_LOST/RESET_REQUIRED -> gpu_lost, NOT_SUPPORTED and
// FUNCTION_NOT_FOUND -> not_supported, DRIVER_NOT_LOADED/LIBRARY_NOT_FOUND/UNINITIALIZED ->
// unavailable, NO_PERMISSION -> no_permission, NOT_FOUND -> not_found, TIMEOUT -> timeout,
// INVALID_ARGUMENT -> invalid_argument, everything else -> internal.
Code code_for(int nvml_return);

// "nvmlDeviceGetUUID failed: GPU_IS_LOST (15): GPU is lost", with nvml_return set.
Error make_error(const Library& lib, std::string_view symbol, int nvml_return);

// What an nvmlInit failure usually means on a node, in one sentence, or "" when nothing useful
// can be said.
std::string_view init_failure_hint(int nvml_return);

}  // namespace kgpu::nvml
