// `kgpu doctor pending`: why a GPU pod is Pending, from `kubectl get -o json` output (offline,
// deterministic). Mirrors the scheduler's filters that matter for GPU pods: node unschedulable,
// nodeSelector, required node affinity, taints/tolerations, nvidia.com/gpu allocatable and free,
// CPU/memory/pod count; plus pod-level problems (GPU request != limit, ResourceQuota exhausted)
// and the NVIDIA_VISIBLE_DEVICES warning (the seed's §4.2 example).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace kgpu::doctor::pending {

// Each document may also be a List of mixed kinds (`kubectl get pods,nodes,events -A -o json`):
// its items are taken by their `kind` (Node, Pod, ResourceQuota, Event), whichever file they come
// in; an item without `kind` is of the kind its option names; other kinds are skipped with a
// warning. An object given twice (the same file for two options) counts once.
struct Inputs {
    std::string pod;     // a Pod object
    std::string nodes;   // a List of Nodes (or one Node); must hold at least one Node when not empty
    std::string pods;    // optional: a List of Pods (what already runs on each node)
    std::string quotas;  // optional: a List of ResourceQuotas
    std::string events;  // optional: a List of Events (kubectl get events -n <ns> -o json)
};

// The device IDs a node's device plugin lists as Unhealthy for nvidia.com/gpu, by node name: what
// kgpu's own plugin on this node says (the CLI asks it when it runs there). Nodes not listed are
// unknown, and the explanation says where to look.
using UnhealthyDevices = std::map<std::string, std::vector<std::string>>;

struct NodeVerdict {
    std::string node;
    bool fits = true;
    std::vector<std::string> reasons;  // why it does not fit, one sentence each
};

// One of the pod's Warning events, e.g. the scheduler's FailedScheduling.
struct PodEvent {
    std::string reason;   // FailedScheduling, UnexpectedAdmissionError, ...
    std::string source;   // default-scheduler, kubelet, ...
    std::string message;  // as the component wrote it
    long count = 1;
    std::string last_seen;  // RFC 3339, as in the Event ("" when it has none)
};

struct Explanation {
    std::string pod;                          // namespace/name
    double gpus = 0;                          // nvidia.com/gpu requested
    std::vector<std::string> pod_problems;    // block the pod on every node
    std::vector<std::string> warnings;
    std::vector<NodeVerdict> nodes;
    std::string scheduler;                    // the pod's PodScheduled=False condition: "<reason>: <message>"
    std::vector<PodEvent> events;             // the pod's Warning events, oldest first
    bool fits_somewhere() const;
};

// A Kubernetes quantity in base units: "500m" -> 0.5, "1Gi" -> 1073741824, "2" -> 2.
// Errors: parse.
Result<double> parse_quantity(std::string_view q);

// How error messages name the four documents: "<name>: <JSON path>: expected ...".
struct Names {
    std::string pod = "--pod", nodes = "--nodes", pods = "--pods", quotas = "--quotas", events = "--events";
};

// A null `pods`, `quotas` or `events` means none were given. Each document may be a List
// (`items`), a bare array, or one object, of mixed kinds (see Inputs). Errors: parse, naming the
// document and the JSON path of the first value of the wrong shape ("nodes.json: .items[0].metadata:
// expected an object, found an array") or the quantity that does not parse; --pod not a Pod;
// --nodes with objects but no Node (e.g. a Pod list given as --nodes).
//
// Per node, beyond the scheduler's filters: a request above the node's capacity (it can never
// fit there), and capacity above allocatable (GPUs the device plugin reports Unhealthy), named
// from `unhealthy` when known. The scheduler's own message is quoted: the pod's PodScheduled=False
// condition, and its Warning events (FailedScheduling, the kubelet's admission errors) when given.
Result<Explanation> explain(const nlohmann::json& pod, const nlohmann::json& nodes, const nlohmann::json& pods,
                            const nlohmann::json& quotas, const Names& names = {},
                            const nlohmann::json& events = nlohmann::json(), const UnhealthyDevices& unhealthy = {});
// Reads the files of `in` and explains; errors name the file as given.
Result<Explanation> explain(const Inputs& in, const UnhealthyDevices& unhealthy = {});

void print_text(const Explanation& e, std::ostream& out);
// {"pod", "gpus", "fits", "pod_problems": [], "warnings": [], "nodes": [{"node", "fits", "reasons": []}],
//  "scheduler": "<reason>: <message>" ("" when the pod has no PodScheduled=False condition),
//  "events": [{"reason", "source", "message", "count", "last_seen"}]}
nlohmann::json to_json(const Explanation& e);

}  // namespace kgpu::doctor::pending
