// The exporter's reading of the Kubernetes API status files kgpu's other processes keep
// (exporter::parse_kube_api_status, kube_status.h), fed what a file under --kube-api-status-dir
// holds. Must hold: a refusal names "kube API status"; an accepted status has a component of
// lower-case letters, digits and '-', whole counts from 0 to 2^53, no repeated entry and at most
// 256 per list (what keeps the exposition free of duplicate series); and written back as JSON it
// reads as the same status.
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "exporter/kube_status.h"
#include "fuzz.h"

using namespace kgpu;

KGPU_FUZZ_TARGET(kube_status) {
    const std::string_view in = fuzz::text(data, size);
    auto s = exporter::parse_kube_api_status(in);
    if (!s) {
        KGPU_FUZZ_CHECK(s.error().message.starts_with("kube API status"), s.error().message);
        return 0;
    }
    KGPU_FUZZ_CHECK(!s->component.empty() && s->component.size() <= 63, s->component);
    for (char c : s->component)
        KGPU_FUZZ_CHECK((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-', s->component);
    auto whole = [](double v) { return std::isfinite(v) && v >= 0 && v <= 9007199254740992.0 && v == std::floor(v); };
    std::set<std::string> keys;
    nlohmann::json requests = nlohmann::json::array(), errors = nlohmann::json::array(), events = nlohmann::json::array();
    for (const auto& q : s->requests) {
        KGPU_FUZZ_CHECK(whole(q.count), q.method);
        KGPU_FUZZ_CHECK(keys.insert("r " + q.method + " " + q.code).second, "a repeated request entry");
        requests.push_back({{"method", q.method}, {"code", q.code}, {"count", q.count}});
    }
    for (const auto& [kind, n] : s->errors) {
        KGPU_FUZZ_CHECK(whole(n), kind);
        KGPU_FUZZ_CHECK(keys.insert("e " + kind).second, "a repeated error entry");
        errors.push_back({{"kind", kind}, {"count", n}});
    }
    for (const auto& [result, n] : s->events) {
        KGPU_FUZZ_CHECK(whole(n), result);
        KGPU_FUZZ_CHECK(keys.insert("v " + result).second, "a repeated event entry");
        events.push_back({{"result", result}, {"count", n}});
    }
    KGPU_FUZZ_CHECK(s->requests.size() <= 256 && s->errors.size() <= 256 && s->events.size() <= 256, "a list over 256");
    nlohmann::json back = {{"component", s->component}, {"requests", requests}, {"errors", errors}, {"events", events}};
    if (s->last_success) back["last_success"] = *s->last_success;
    auto again = exporter::parse_kube_api_status(back.dump());
    KGPU_FUZZ_CHECK(again.has_value(), again ? "" : again.error().message);
    KGPU_FUZZ_CHECK(again->component == s->component && again->requests.size() == s->requests.size() &&
                        again->errors == s->errors && again->events == s->events && again->last_success == s->last_success,
                    "written back, read differently");
    return 0;
}
