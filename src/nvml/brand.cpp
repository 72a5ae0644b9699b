#include "nvml/brand.h"

#include <iterator>

namespace kgpu::nvml {

BrandName brand_name(unsigned nvml_brand) {
    // Indexed by NVML_BRAND_* value (nvml.h), 0 = NVML_BRAND_UNKNOWN.
    static constexpr BrandName kNames[] = {
        {"unknown", "Unknown"},
        {"quadro", "Quadro"},
        {"tesla", "Tesla"},
        {"nvs", "NVS"},
        {"grid", "Grid"},
        {"geforce", "GeForce"},
        {"titan", "Titan"},
        {"vapps", "NVIDIA Virtual Applications"},
        {"vpc", "NVIDIA Virtual PC"},
        {"vcs", "NVIDIA Virtual Compute Server"},
        {"vws", "NVIDIA RTX Virtual Workstation"},
        {"cloudgaming", "NVIDIA vGaming"},
        {"quadrortx", "Quadro RTX"},
        {"nvidiartx", "NVIDIA RTX"},
        {"nvidia", "NVIDIA"},
        {"geforcertx", "GeForce RTX"},
        {"titanrtx", "Titan RTX"},
    };
    return nvml_brand < std::size(kNames) ? kNames[nvml_brand] : kNames[0];
}

}  // namespace kgpu::nvml
