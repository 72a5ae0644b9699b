// NVIDIA_REQUIRE_* checks, with libnvidia-container's and nvidia-container-toolkit's semantics:
// within one variable, space-separated terms are ORed and comma-separated constraints ANDed
// ("cuda>=12.4 brand=tesla,driver>=535" is cuda>=12.4 OR (brand=tesla AND driver>=535));
// separate variables are ANDed. Properties: cuda and driver (the node's), arch (compute
// capability) and brand (per selected GPU: a requirement must hold for every selected GPU).
// Operators = != < <= > >=; versions compare numerically by dotted parts ("12.4" == "12.4.0");
// brand compares case-insensitively with = and != only. A constraint on a property kgpu does not
// know is skipped, as nvidia-container-toolkit does.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"

namespace kgpu::toolkit {

struct GpuProperties {
    unsigned index = 0;
    std::string name;   // for messages
    std::string arch;   // compute capability, "9.0"
    std::string brand;  // NVML brand, lower case: "tesla", "nvidia", "geforce", ...
};

struct NodeProperties {
    std::string cuda;    // "12.4"
    std::string driver;  // "550.54.15"
    std::vector<GpuProperties> gpus;  // the selected GPUs (empty: device rules see no GPU)
};

struct Unmet {
    std::string variable;       // "NVIDIA_REQUIRE_CUDA"
    std::string value;          // the variable's whole value
    std::vector<std::string> failed;  // per ORed term, the first constraint that failed ("cuda>=12.8")
    std::optional<unsigned> gpu;      // the selected GPU the requirement failed on, for arch/brand
};

// Evaluates the (variable, value) pairs of requirements() in order. nullopt: all met. Errors
// (invalid_argument, naming the variable and the constraint): a constraint without an operator,
// a version that is not dotted numbers, an ordering operator on brand.
Result<std::optional<Unmet>> check_requirements(const std::vector<std::pair<std::string, std::string>>& reqs,
                                                const NodeProperties& node);

// One message for the pod's event: the requirement, the node's driver and CUDA version, and the
// fix from the compatibility tables `kgpu doctor compat` answers from.
std::string explain(const Unmet& unmet, const NodeProperties& node);

}  // namespace kgpu::toolkit
