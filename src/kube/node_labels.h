// kgpu labels --write-node-labels (issue #27 part 3): the node's nvidia.com/* labels patched
// directly, for clusters without NFD.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "kube/client.h"

namespace kgpu::kube {

// The annotation that lists (comma-separated, sorted) the label keys kgpu set on the node, so a
// later run removes those that no longer apply and never touches labels it did not set.
inline constexpr const char* kNodeLabelsAnnotation = "kgpu/node-labels";

// The JSON merge patch (RFC 7386) that takes `node` (a Node object) to `want` for kgpu's labels:
// each wanted label set when different, each label kgpu set before (the annotation) and no
// longer wants removed (null), the annotation updated. An empty object when nothing changes.
nlohmann::json node_labels_patch(const nlohmann::json& node, const std::map<std::string, std::string>& want);

// GETs the node, PATCHes it with node_labels_patch when that is not empty. Returns how many
// labels were set or removed. Errors name the node, the call and the API server's reason.
Result<std::size_t> write_node_labels(Client& client, const std::string& node_name,
                                      const std::map<std::string, std::string>& want);

}  // namespace kgpu::kube
