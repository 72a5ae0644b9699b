// PodDirectory (attribution.h): pod UID and labels by namespace/name from CRI ListPodSandbox.
#include <set>
#include <utility>

#include "exporter/attribution.h"
#include "exporter/attribution_log.h"

namespace kgpu::exporter {
namespace {

using Key = std::pair<std::string, std::string>;  // namespace, name

}  // namespace

struct PodDirectory::Impl {
    std::string endpoint;
    CriClient cri;
    std::map<Key, PodMetadata> known;
    std::map<Key, std::chrono::steady_clock::time_point> unlisted;
    detail::FailureLog failures;

    explicit Impl(std::string e) : endpoint(std::move(e)), cri(endpoint) {}
};

PodDirectory::PodDirectory(std::string cri_endpoint) : impl_(std::make_unique<Impl>(std::move(cri_endpoint))) {}

PodDirectory::~PodDirectory() = default;

std::map<std::pair<std::string, std::string>, PodMetadata> PodDirectory::lookup(std::span<const PodRef> pods) {
    auto& im = *impl_;
    const auto now = std::chrono::steady_clock::now();
    std::set<Key> asked;
    for (const auto& p : pods) asked.emplace(p.namespace_name, p.pod);

    bool refresh = false;
    for (const auto& k : asked) {
        if (im.known.contains(k)) continue;
        auto u = im.unlisted.find(k);
        if (u == im.unlisted.end() || now - u->second >= detail::kUnlistedRetry) {
            refresh = true;
            break;
        }
    }
    if (refresh) {
        auto listed = im.cri.list_pod_sandboxes();
        if (!listed) {
            im.failures.failed(fmt::format("{}; pod UIDs and pod labels are left out for pods not seen before",
                                           listed.error().message));
        } else {
            im.failures.ok(fmt::format("pod metadata: the CRI runtime on {} answers again", im.endpoint));
            std::map<Key, const CriClient::Sandbox*> best;
            for (const auto& s : *listed) {
                const Key k{s.namespace_name, s.name};
                auto& b = best[k];
                if (!b || (s.ready && !b->ready)) b = &s;  // the running sandbox, not an old stopped one
            }
            for (const auto& k : asked) {
                if (auto it = best.find(k); it != best.end()) {
                    im.known.insert_or_assign(k, PodMetadata{it->second->uid, it->second->labels});
                    im.unlisted.erase(k);
                } else {
                    // Not there (any more): forget what we knew, ask again later.
                    im.known.erase(k);
                    if (!im.unlisted.contains(k)) im.unlisted.emplace(k, now);
                }
            }
            // Pods we knew whose sandbox changed (a re-created pod has a new UID) are refreshed too.
            for (auto& [k, md] : im.known)
                if (auto it = best.find(k); it != best.end()) md = PodMetadata{it->second->uid, it->second->labels};
        }
    }

    std::map<Key, PodMetadata> out;
    for (const auto& k : asked)
        if (auto it = im.known.find(k); it != im.known.end()) out.emplace(k, it->second);
    // Only the pods asked about now are kept.
    std::erase_if(im.known, [&](const auto& kv) { return !asked.contains(kv.first); });
    std::erase_if(im.unlisted, [&](const auto& kv) { return !asked.contains(kv.first); });
    return out;
}

}  // namespace kgpu::exporter
