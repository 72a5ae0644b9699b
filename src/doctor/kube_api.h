// The doctor's view of the Kubernetes API (issue #27): does kgpu reach the API server with the
// credentials its features would use, is this node's Node there, and may kgpu do what they need
// (asked with SelfSubjectAccessReviews, one per verb and resource).
#pragma once

#include <string>
#include <vector>

#include "doctor/report.h"
#include "kube/events.h"

namespace kgpu::doctor {

struct ApiNeed {
    std::string verb, resource, ns;  // ns "" for cluster-scoped
    std::string why;                 // the feature that needs it
};

// What kgpu's features ask of the API server; deploy/kubernetes/rbac.yaml grants exactly these.
const std::vector<ApiNeed>& api_needs();

// Fills `r` (kube.api) through `request` (kube::Client::request): GET /version, GET the node when
// `node` is set, then a SelfSubjectAccessReview per need. fail: unreachable, or credentials
// refused (401); warn: the node is not found, or a need is denied (each named with its feature).
void check_kube_api(const kube::Requester& request, const std::string& server, const std::string& node, CheckResult& r);

}  // namespace kgpu::doctor
