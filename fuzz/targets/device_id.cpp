// Device IDs as the kubelet reports them in PodResources answers: "GPU-<uuid>", an index, a
// replica "<id>::<n>", "MIG-<uuid>", "<gpu>:<mig>". Whatever resolves must exist on the node.
#include "exporter/attribution.h"
#include "fuzz.h"
#include "node.h"

using namespace kgpu;

KGPU_FUZZ_TARGET(device_id) {
    const auto text = fuzz::text(data, size);
    const auto& node = fuzz::attribution_node();
    if (auto t = exporter::resolve_device_id(text, node))
        KGPU_FUZZ_CHECK(fuzz::names_a_device(node, t->gpu_index, t->gpu_instance_id), text);
    (void)exporter::is_gpu_resource(text);
    return 0;
}
