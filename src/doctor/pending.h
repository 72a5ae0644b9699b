// `kgpu doctor pending`: why a GPU pod is Pending, from `kubectl get -o json` output (offline,
// deterministic). Mirrors the scheduler's filters that matter for GPU pods: node unschedulable,
// nodeSelector, required node affinity, taints/tolerations, nvidia.com/gpu allocatable and free,
// CPU/memory/pod count; plus pod-level problems (GPU request != limit, ResourceQuota exhausted)
// and the NVIDIA_VISIBLE_DEVICES warning (the seed's §4.2 example).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace kgpu::doctor::pending {

struct Inputs {
    std::string pod;     // a Pod object
    std::string nodes;   // a List of Nodes (or one Node)
    std::string pods;    // optional: a List of Pods (what already runs on each node)
    std::string quotas;  // optional: a List of ResourceQuotas
};

struct NodeVerdict {
    std::string node;
    bool fits = true;
    std::vector<std::string> reasons;  // why it does not fit, one sentence each
};

struct Explanation {
    std::string pod;                          // namespace/name
    double gpus = 0;                          // nvidia.com/gpu requested
    std::vector<std::string> pod_problems;    // block the pod on every node
    std::vector<std::string> warnings;
    std::vector<NodeVerdict> nodes;
    bool fits_somewhere() const;
};

// A Kubernetes quantity in base units: "500m" -> 0.5, "1Gi" -> 1073741824, "2" -> 2.
// Errors: parse.
Result<double> parse_quantity(std::string_view q);

// How error messages name the four documents: "<name>: <JSON path>: expected ...".
struct Names {
    std::string pod = "--pod", nodes = "--nodes", pods = "--pods", quotas = "--quotas";
};

// A null `pods` or `quotas` means none were given. Each document may be a List (`items`), a bare
// array, or one object. Errors: parse, naming the document and the JSON path of the first value
// of the wrong shape ("nodes.json: .items[0].metadata: expected an object, found an array") or
// the quantity that does not parse; --pod not a Pod.
Result<Explanation> explain(const nlohmann::json& pod, const nlohmann::json& nodes, const nlohmann::json& pods,
                            const nlohmann::json& quotas, const Names& names = {});
// Reads the files of `in` and explains; errors name the file as given.
Result<Explanation> explain(const Inputs& in);

void print_text(const Explanation& e, std::ostream& out);
// {"pod", "gpus", "fits", "pod_problems": [], "warnings": [], "nodes": [{"node", "fits", "reasons": []}]}
nlohmann::json to_json(const Explanation& e);

}  // namespace kgpu::doctor::pending
