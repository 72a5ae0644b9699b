// The doctor's kube.api check (kube_api.h).
#include "doctor/kube_api.h"

#include "kube/client.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace kgpu::doctor {
namespace {

void worse(CheckResult& r, Status s, const std::string& fix) {
    if (s == Status::fail || (s == Status::warn && r.status == Status::ok)) r.status = s;
    if (!fix.empty()) r.fix += (r.fix.empty() ? "" : "\n") + fix;
}

}  // namespace

const std::vector<ApiNeed>& api_needs() {
    static const std::vector<ApiNeed> needs = {
        {"create", "events", "default", "GPU health Events on the Node (device-plugin --node-health-events)"},
        {"patch", "events", "default", "GPU health Events on the Node (their count)"},
        {"get", "nodes", "", "per-node configs, --write-node-labels"},
        {"list", "nodes", "", "per-node configs (the watch of the Node's config label)"},
        {"watch", "nodes", "", "per-node configs (the watch of the Node's config label)"},
        {"patch", "nodes", "", "the config state label, --node-health-annotation, --write-node-labels"},
    };
    return needs;
}

namespace {

// The Node kgpu runs on: NODE_NAME well-formed and the Node there.
void check_node(const kube::Requester& request, const std::string& node, CheckResult& r) {
    if (auto st = node.empty() ? kgpu::Status{} : kube::check_node_name(node); !st) {
        note(r, "{}", st.error().message);
        worse(r, Status::warn, "set NODE_NAME (or --node-name) to the downward API's spec.nodeName");
    } else if (!node.empty()) {
        const std::string path = "/api/v1/nodes/" + node;
        auto n = request("GET", path, {}, {});
        if (!n) {
            note(r, "{}", n.error().message);
            worse(r, Status::warn, "");
        } else if (n->status == 200) {
            note(r, "GET {}: 200 (the Node exists)", path);
        } else {
            note(r, "{}", kube::describe_failure("GET", path, *n));
            if (n->status == 404)
                worse(r, Status::warn, fmt::format("no Node named {}: NODE_NAME must be the downward API's spec.nodeName", node));
            else
                worse(r, Status::warn, "");
        }
    } else {
        note(r, "no node name (NODE_NAME, --node-name): the Node is not looked at");
    }
}

}  // namespace

void check_kube_api(const kube::Requester& request, const std::string& server, const std::string& node, CheckResult& r) {
    r.status = Status::ok;
    auto version = request("GET", "/version", {}, {});
    if (!version) {
        note(r, "{}", version.error().message);
        worse(r, Status::fail,
              fmt::format("kgpu cannot reach the API server {}: check the address, the network policy and the CA; "
                          "node Events, per-node configs and --write-node-labels do nothing until it can",
                          server));
        return;
    }
    if (version->status == 401) {
        note(r, "{}", kube::describe_failure("GET", "/version", *version));
        worse(r, Status::fail, "the API server refuses kgpu's credentials: check the kubeconfig's token or certificate, or "
                               "that the pod mounts its service account's token (automountServiceAccountToken)");
        return;
    }
    auto v = nlohmann::json::parse(version->body, nullptr, false);
    std::string git = "(not JSON)";
    if (v.is_object()) git = v.contains("gitVersion") && v["gitVersion"].is_string() ? v["gitVersion"].get<std::string>() : "(no gitVersion)";
    note(r, "GET {}/version: {} {}", server, version->status, git);

    check_node(request, node, r);

    std::vector<std::string> denied, unknown;
    for (const auto& need : api_needs()) {
        nlohmann::json attrs = {{"verb", need.verb}, {"resource", need.resource}};
        if (!need.ns.empty()) attrs["namespace"] = need.ns;
        const nlohmann::json review = {{"apiVersion", "authorization.k8s.io/v1"},
                                       {"kind", "SelfSubjectAccessReview"},
                                       {"spec", {{"resourceAttributes", attrs}}}};
        const std::string path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
        auto a = request("POST", path, review.dump(), "application/json");
        const std::string what = fmt::format("{} {}{}", need.verb, need.resource, need.ns.empty() ? "" : " in " + need.ns);
        if (!a || (a->status != 201 && a->status != 200)) {
            if (a && a->status == 404) {
                note(r, "the API server does not serve SelfSubjectAccessReview (404): RBAC not checked");
                return;
            }
            unknown.push_back(fmt::format("{} ({})", what, a ? kube::describe_failure("POST", path, *a) : a.error().message));
            continue;
        }
        auto j = nlohmann::json::parse(a->body, nullptr, false);
        const bool allowed = j.is_object() && j.contains("status") && j["status"].is_object() &&
                             j["status"].contains("allowed") && j["status"]["allowed"].is_boolean() &&
                             j["status"]["allowed"].get<bool>();
        if (!allowed) denied.push_back(fmt::format("{} (for {})", what, need.why));
    }
    if (denied.empty() && unknown.empty()) {
        note(r, "RBAC: every verb kgpu needs is allowed ({} SelfSubjectAccessReviews)", api_needs().size());
        return;
    }
    if (!denied.empty()) {
        note(r, "RBAC denies: {}", fmt::join(denied, "; "));
        worse(r, Status::warn, "apply deploy/kubernetes/rbac.yaml (or the chart with rbac.create=true): it grants kgpu's "
                               "ServiceAccount exactly these");
    }
    if (!unknown.empty()) {
        note(r, "RBAC not known for: {}", fmt::join(unknown, "; "));
        worse(r, Status::warn, "");
    }
}

}  // namespace kgpu::doctor
