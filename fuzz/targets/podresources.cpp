// The kubelet's PodResources List answer, as the exporter receives it: the input is the raw
// ListPodResourcesResponse bytes (protobuf wire format), walked by the exporter's own wire reader
// (map_pod_resources: the answer is never parsed into messages, issue #14). Any bytes either map
// or are refused with a message; every DeviceUse names a device of the node, the list is sorted
// without duplicates, and no GPU gets more than max_pods_per_gpu containers.
#include <algorithm>
#include <map>
#include <set>

#include "exporter/attribution.h"
#include "fuzz.h"
#include "node.h"

using namespace kgpu;

KGPU_FUZZ_TARGET(podresources) {
    exporter::PodResourcesOptions o;
    o.extra_resources = {"example.com/shared-gpu"};
    o.max_pods_per_gpu = 3;  // small, so that the limit is reached by short inputs
    const auto& node = fuzz::attribution_node();
    auto m = exporter::map_pod_resources(fuzz::text(data, size), node, o);
    if (!m) {
        KGPU_FUZZ_CHECK(!m.error().message.empty(), "an error without a message");
        return 0;
    }
    const auto& uses = m->uses;
    KGPU_FUZZ_CHECK(std::ranges::is_sorted(uses) && std::ranges::adjacent_find(uses) == uses.end(),
                    "not sorted and unique");
    std::map<unsigned, std::set<exporter::PodRef>> per_gpu;
    for (const auto& u : uses) {
        KGPU_FUZZ_CHECK(fuzz::names_a_device(node, u.target.gpu_index, u.target.gpu_instance_id), u.pod.pod);
        KGPU_FUZZ_CHECK(!u.pod.pod.empty() && !u.pod.namespace_name.empty() && !u.pod.container.empty(),
                        "an empty name became a label value");
        per_gpu[u.target.gpu_index].insert(u.pod);
    }
    for (const auto& [gpu, pods] : per_gpu) KGPU_FUZZ_CHECK(pods.size() <= o.max_pods_per_gpu, "over max_pods_per_gpu");
    for (const auto& over : m->overflow) KGPU_FUZZ_CHECK(over.left_out > 0, "an overflow with nothing left out");
    return 0;
}
