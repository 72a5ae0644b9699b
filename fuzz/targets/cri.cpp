// The container runtime's CRI ListContainers answer, as the exporter's process attribution
// receives it: the input is the ListContainersResponse message (protobuf wire format), served by
// a fake runtime on a unix socket and read by the real CriClient. Only containers the kubelet
// made (with pod, namespace and an ID) may come back.
#include <memory>

#include "cri_runtime_v1.pb.h"
#include "exporter/attribution.h"
#include "fuzz.h"
#include "support/fake_cri.h"

using namespace kgpu;

namespace {

struct Runtime {
    std::string socket = (fuzz::scratch_dir() / "containerd.sock").string();
    test::FakeCri server{socket};
    std::unique_ptr<exporter::CriClient> client;
    Runtime() {
        if (!server.start()) fuzz::check_failed("server.start()", __FILE__, __LINE__, socket);
        client = std::make_unique<exporter::CriClient>("unix://" + socket);
    }
};

}  // namespace

KGPU_FUZZ_TARGET(cri) {
    ::runtime::v1::ListContainersResponse answer;
    if (!answer.ParseFromArray(data, static_cast<int>(size))) return -1;
    static Runtime rt;
    rt.server.set(std::move(answer));
    auto containers = rt.client->list_containers();
    KGPU_FUZZ_CHECK(containers.has_value(), containers ? "" : containers.error().message);
    for (const auto& [id, ref] : *containers)
        KGPU_FUZZ_CHECK(!id.empty() && !ref.pod.empty() && !ref.namespace_name.empty(), id);
    return 0;
}
