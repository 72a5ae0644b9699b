// NVML_BRAND_* (nvmlBrandType_t) and the two ways kgpu's peers spell each brand: the container
// toolkit's (libnvidia-container: `brand=` in NVIDIA_REQUIRE_* rules, lowercase, no blanks) and
// DCGM's (the text of DCGM_FI_DEV_BRAND, which dcgm-exporter puts in its label).
#pragma once

#include <string_view>

namespace kgpu::nvml {

struct BrandName {
    std::string_view toolkit;  // "tesla", "nvidiartx"; "unknown" for values nvml.h does not define
    std::string_view dcgm;     // "Tesla", "NVIDIA RTX"; "Unknown" likewise
};

BrandName brand_name(unsigned nvml_brand);

}  // namespace kgpu::nvml
