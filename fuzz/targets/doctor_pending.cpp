// `kgpu doctor pending`: kubectl's JSON for the pod, the nodes, all pods, the quotas and the
// events, as five documents separated by lines "---8<---" (any of them may be a List of mixed
// kinds). Every input either explains or is refused with an error naming the document (issue
// #14: valid JSON of the wrong shape aborted).
#include "common/json.h"
#include "doctor/pending.h"
#include "fuzz.h"

using namespace kgpu;

KGPU_FUZZ_TARGET(doctor_pending) {
    const auto docs = fuzz::split_documents(fuzz::text(data, size), "---8<---", 5);
    const char* names[] = {"pod.json", "nodes.json", "pods.json", "quotas.json", "events.json"};
    nlohmann::json parsed[5];
    for (size_t i = 0; i < docs.size(); ++i) {
        auto j = json::parse(docs[i], names[i]);
        if (!j) return 0;
        parsed[i] = std::move(*j);
    }
    auto e = doctor::pending::explain(parsed[0], parsed[1], parsed[2], parsed[3],
                                      {names[0], names[1], names[2], names[3], names[4]}, parsed[4],
                                      {{"gpu-a", {"GPU-0"}}});
    if (!e) {
        KGPU_FUZZ_CHECK(e.error().message.find(".json") != std::string::npos, e.error().message);
        return 0;
    }
    (void)doctor::pending::to_json(*e).dump();
    return 0;
}
