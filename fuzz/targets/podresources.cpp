// The kubelet's PodResources List answer, as the exporter receives it: the input is the
// ListPodResourcesResponse message (protobuf wire format), served by a fake kubelet on a unix
// socket and read by the real PodResourcesClient. Every DeviceUse it maps must name a device of
// the node, and the list must be sorted without duplicates.
#include <algorithm>
#include <memory>

#include "common/log.h"
#include "exporter/attribution.h"
#include "fuzz.h"
#include "node.h"
#include "podresources_v1.pb.h"
#include "support/fake_pod_resources.h"

using namespace kgpu;

namespace {

struct Kubelet {
    std::string socket = (fuzz::scratch_dir() / "pod-resources.sock").string();
    test::FakePodResources server{socket};
    std::unique_ptr<exporter::PodResourcesClient> client;
    Kubelet() {
        log::set_level(log::Level::off);  // unknown IDs are logged; not what is fuzzed here
        if (!server.start()) fuzz::check_failed("server.start()", __FILE__, __LINE__, socket);
        exporter::PodResourcesOptions o;
        o.socket = socket;
        o.extra_resources = {"example.com/shared-gpu"};
        client = std::make_unique<exporter::PodResourcesClient>(o);
    }
};

}  // namespace

KGPU_FUZZ_TARGET(podresources) {
    v1::ListPodResourcesResponse answer;
    if (!answer.ParseFromArray(data, static_cast<int>(size))) return -1;
    static Kubelet kubelet;
    kubelet.server.set(std::move(answer));
    auto uses = kubelet.client->list(fuzz::attribution_node());
    KGPU_FUZZ_CHECK(uses.has_value(), uses ? "" : uses.error().message);
    KGPU_FUZZ_CHECK(std::ranges::is_sorted(*uses) && std::ranges::adjacent_find(*uses) == uses->end(),
                    "not sorted and unique");
    for (const auto& u : *uses)
        KGPU_FUZZ_CHECK(fuzz::names_a_device(fuzz::attribution_node(), u.target.gpu_index, u.target.gpu_instance_id),
                        u.pod.pod);
    return 0;
}
