// Node labels patched by kgpu (node_labels.h).
#include "kube/node_labels.h"

#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/json.h"
#include "common/strings.h"
#include "kube/api_stats.h"

namespace kgpu::kube {

nlohmann::json node_labels_patch(const nlohmann::json& node, const std::map<std::string, std::string>& want) {
    const nlohmann::json empty = nlohmann::json::object();
    const auto& meta = node.is_object() && node.contains("metadata") && node["metadata"].is_object() ? node["metadata"] : empty;
    const auto& have = meta.contains("labels") && meta["labels"].is_object() ? meta["labels"] : empty;
    const auto& notes = meta.contains("annotations") && meta["annotations"].is_object() ? meta["annotations"] : empty;
    std::set<std::string> owned;
    if (auto it = notes.find(kNodeLabelsAnnotation); it != notes.end() && it->is_string())
        for (auto key : strings::split(it->get_ref<const std::string&>(), ','))
            if (!strings::trim(key).empty()) owned.emplace(strings::trim(key));

    nlohmann::json labels = nlohmann::json::object();
    for (const auto& [k, v] : want)
        if (auto it = have.find(k); it == have.end() || !it->is_string() || it->get_ref<const std::string&>() != v) labels[k] = v;
    for (const auto& k : owned)
        if (!want.contains(k) && have.contains(k)) labels[k] = nullptr;

    std::vector<std::string> keys;
    for (const auto& [k, v] : want) keys.push_back(k);
    const std::string record = fmt::format("{}", fmt::join(keys, ","));
    nlohmann::json patch = nlohmann::json::object();
    if (!labels.empty()) patch["metadata"]["labels"] = std::move(labels);
    const auto it = notes.find(kNodeLabelsAnnotation);
    if (it == notes.end() || !it->is_string() || it->get_ref<const std::string&>() != record)
        patch["metadata"]["annotations"][kNodeLabelsAnnotation] = record;
    return patch;
}

Result<std::size_t> write_node_labels(Client& client, const std::string& node_name,
                                      const std::map<std::string, std::string>& want) {
    if (node_name.empty())
        return fail(Code::invalid_argument, "no node name: set NODE_NAME (the downward API's spec.nodeName) or --node-name");
    if (auto st = check_node_name(node_name); !st) return std::unexpected(st.error());
    const std::string path = "/api/v1/nodes/" + node_name;
    auto got = client.request("GET", path);
    if (!got) return std::unexpected(got.error());
    if (got->status != 200) return fail(Code::unavailable, "{}", describe_failure("GET", path, *got));
    nlohmann::json node;
    try {
        node = nlohmann::json::parse(got->body);
    } catch (const nlohmann::json::exception& e) {
        ApiStats::global().malformed();
        return fail(Code::parse, "GET {}: not JSON: {}", path, e.what());
    }
    const auto patch = node_labels_patch(node, want);
    if (patch.empty()) return 0;
    const std::size_t changed = patch["metadata"].contains("labels") ? patch["metadata"]["labels"].size() : 0;
    auto put = client.request("PATCH", path, kgpu::json::dump_text(patch), "application/merge-patch+json");
    if (!put) return std::unexpected(put.error());
    if (put->status != 200) return fail(Code::unavailable, "{}", describe_failure("PATCH", path, *put));
    return changed;
}

}  // namespace kgpu::kube
