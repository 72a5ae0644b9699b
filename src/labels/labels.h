// `kgpu labels`: the node labels gpu-feature-discovery publishes (facts/device-plugin-anchor.md),
// computed from the inventory, as an NFD feature file ("key=value" lines).
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "common/error.h"
#include "inventory/node.h"

namespace kgpu::labels {

enum class MigStrategy { none, single, mixed };
std::string_view to_string(MigStrategy s);
// "none", "single", "mixed". Errors: invalid_argument naming the value and the accepted ones.
Result<MigStrategy> parse_mig_strategy(std::string_view text);

// What the device plugin's config says about sharing (same file, same meaning).
struct Sharing {
    std::string strategy = "none";              // none | time-slicing | mps
    bool rename_by_default = false;
    std::map<std::string, unsigned> replicas;   // resource name ("nvidia.com/gpu") -> replicas
};

struct Options {
    MigStrategy mig_strategy = MigStrategy::none;
    Sharing sharing;
    std::string machine;                        // DMI product name; empty: no gpu.machine label
};

using Labels = std::map<std::string, std::string>;

// Labels for `node`. GPU properties come from the first GPU (as gpu-feature-discovery does);
// lost GPUs are not counted. A node with no GPUs gets gpu.present=false, gpu.count=0 and the
// driver labels. Errors: mig strategy `single` on a node whose MIG GPUs
// disagree (a GPU with MIG off next to one with MIG on, or different profiles).
Result<Labels> generate(const inventory::Node& node, const Options& options);

// A label value as Kubernetes accepts it: at most 63 characters of [A-Za-z0-9-_.], starting and
// ending with an alphanumeric; other characters become '-' ("NVIDIA A100 (80GB)" ->
// "NVIDIA-A100-80GB").
std::string sanitize_value(std::string_view value);

// "key=value\n" lines, sorted by key.
std::string to_feature_file(const Labels& labels);

}  // namespace kgpu::labels
