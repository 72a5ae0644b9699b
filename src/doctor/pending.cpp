// `kgpu doctor pending`: why a GPU pod is Pending, node by node, from the documents decoded in
// pending_objects.cpp.
#include "doctor/pending.h"
#include "doctor/pending_objects.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/files.h"
#include "common/json.h"
#include "common/strings.h"

namespace kgpu::doctor::pending {

namespace {

constexpr const char* kGpu = "nvidia.com/gpu";

Resources sum_of(const Quantities& q) {
    Resources r;
    for (const auto& [k, v] : q) r.v[k] = v.value;
    return r;
}

// The pod's effective requests: sum over containers (requests, or limits where requests are
// absent, as the API server defaults them), at least the largest init container.
struct PodRequests {
    Resources requests;
    Resources limits;
};

PodRequests pod_requests(const Pod& pod) {
    PodRequests out;
    auto effective = [](const Container& c) {
        Resources req = sum_of(c.requests);
        for (const auto& [k, v] : c.limits)
            if (!req.v.count(k)) req.v[k] = v.value;
        return req;
    };
    for (const auto& c : pod.containers) {
        for (const auto& [k, v] : c.limits) out.limits.v[k] += v.value;
        for (const auto& [k, v] : effective(c).v) out.requests.v[k] += v;
    }
    for (const auto& c : pod.init_containers)
        for (const auto& [k, v] : effective(c).v) out.requests.v[k] = std::max(out.requests.get(k), v);
    return out;
}

std::string fmt_qty(const std::string& res, double v) {
    if (res == "memory" || res.ends_with(".memory")) {
        if (v >= 1024.0 * 1024 * 1024) return fmt::format("{:.1f}Gi", v / (1024.0 * 1024 * 1024));
        return fmt::format("{:.0f}Mi", v / (1024.0 * 1024));
    }
    if (res == "cpu" || res.ends_with(".cpu")) {
        if (std::fabs(v - std::round(v)) > 1e-9) return fmt::format("{:.0f}m", v * 1000);
    }
    return fmt::format("{:g}", v);
}

bool match_expression(const std::map<std::string, std::string>& labels, const MatchExpression& e) {
    auto it = labels.find(e.key);
    const bool has = it != labels.end();
    const std::string val = has ? it->second : "";
    const bool in = std::find(e.values.begin(), e.values.end(), val) != e.values.end();
    if (e.op == "In") return has && in;
    if (e.op == "NotIn") return !has || !in;
    if (e.op == "Exists") return has;
    if (e.op == "DoesNotExist") return !has;
    if ((e.op == "Gt" || e.op == "Lt") && has && !e.values.empty()) {
        try {
            long long a = std::stoll(val), b = std::stoll(e.values[0]);
            return e.op == "Gt" ? a > b : a < b;
        } catch (...) {
            return false;
        }
    }
    return false;
}

bool tolerated(const Taint& taint, const std::vector<Toleration>& tolerations) {
    for (const auto& t : tolerations) {
        if (!t.effect.empty() && t.effect != taint.effect) continue;
        if (t.key.empty() && t.op == "Exists") return true;
        if (t.key != taint.key) continue;
        if (t.op == "Exists") return true;
        if (t.value == taint.value) return true;
    }
    return false;
}

bool terminal(const Pod& p) { return p.phase == "Succeeded" || p.phase == "Failed"; }

Result<nlohmann::json> read_json(const std::string& path) {
    if (path.empty()) return nlohmann::json();
    auto text = files::read(path);
    if (!text) return std::unexpected(text.error());
    return json::parse(*text, path);
}

}  // namespace

bool Explanation::fits_somewhere() const {
    if (!pod_problems.empty()) return false;
    return std::any_of(nodes.begin(), nodes.end(), [](const NodeVerdict& n) { return n.fits; });
}

namespace {

Explanation explain_decoded(const Pod& pod, const std::vector<Node>& nodes, const std::vector<Pod>& pods,
                            const std::vector<Quota>& quotas, const UnhealthyDevices& unhealthy) {
    Explanation e;
    e.pod = pod.label();
    if (!pod.unscheduled_message.empty())
        e.scheduler = fmt::format("{}{}", pod.unscheduled_reason.empty() ? "" : pod.unscheduled_reason + ": ",
                                  pod.unscheduled_message);
    const PodRequests reqs = pod_requests(pod);
    e.gpus = reqs.requests.get(kGpu);

    // Pod-level: extended resources must have request == limit (and a limit).
    for (const auto& c : pod.containers) {
        auto rq = c.requests.find(kGpu), lm = c.limits.find(kGpu);
        if (rq != c.requests.end() && lm == c.limits.end())
            e.pod_problems.push_back(fmt::format("container {}: requests nvidia.com/gpu without a limit; extended resources "
                                                 "need limits (set limits.nvidia.com/gpu, requests may then be omitted)",
                                                 c.name));
        else if (rq != c.requests.end() && rq->second.value != lm->second.value)
            e.pod_problems.push_back(fmt::format("container {}: nvidia.com/gpu request {} differs from limit {}; GPUs cannot "
                                                 "be overcommitted: make them equal (or set only the limit)",
                                                 c.name, rq->second.text, lm->second.text));
        for (const auto& [name, value] : c.env)
            if (name == "NVIDIA_VISIBLE_DEVICES")
                e.warnings.push_back(fmt::format(
                    "container {} sets NVIDIA_VISIBLE_DEVICES={} itself: that bypasses the scheduler's accounting (the pod "
                    "may use GPUs given to other pods); request nvidia.com/gpu and let the device plugin choose",
                    c.name, value));
    }
    if (e.gpus == 0) e.warnings.push_back("the pod requests no nvidia.com/gpu; it gets no GPU from the device plugin");

    // ResourceQuotas in the pod's namespace.
    for (const auto& q : quotas) {
        if (q.ns != pod.ns) continue;
        for (const auto& [key, hard] : q.hard) {
            std::string res = key;
            bool is_limit = false;
            bool prefixed_request = false;
            if (res.starts_with("requests.")) res = res.substr(9), prefixed_request = true;
            else if (res.starts_with("limits.")) res = res.substr(7), is_limit = true;
            // The quota evaluator counts extended resources (names with a domain, like
            // nvidia.com/gpu) only under "requests.<name>"; a bare or "limits." key is accepted
            // by the API server but never enforced, so it cannot be why the pod is Pending.
            if (res.find('/') != std::string::npos && !prefixed_request) {
                if (res == kGpu)
                    e.warnings.push_back(fmt::format(
                        "ResourceQuota {}/{}: key {} is not enforced for an extended resource; write "
                        "requests.{} to limit GPUs per namespace",
                        q.ns, q.name, key, res));
                continue;
            }
            double want = res == "pods" ? 1.0 : (is_limit ? reqs.limits.get(res) : reqs.requests.get(res));
            if (want == 0) continue;
            auto u = q.used.find(key);
            double used = u == q.used.end() ? 0 : u->second.value;
            if (used + want > hard.value + 1e-9)
                e.pod_problems.push_back(fmt::format("ResourceQuota {}/{}: {} used {} of {}, the pod asks {} (the API "
                                                     "server rejects such a pod; its controller keeps retrying)",
                                                     q.ns, q.name, key, fmt_qty(res, used), fmt_qty(res, hard.value),
                                                     fmt_qty(res, want)));
        }
    }

    // What runs on each node already.
    std::map<std::string, Resources> used_on;
    std::map<std::string, std::vector<std::string>> gpu_pods_on;
    std::map<std::string, int> pod_count_on;
    for (const auto& p : pods) {
        if (p.node_name.empty() || terminal(p) || p.label() == e.pod) continue;
        const PodRequests r = pod_requests(p);
        for (const auto& [k, v] : r.requests.v) used_on[p.node_name].v[k] += v;
        ++pod_count_on[p.node_name];
        if (r.requests.get(kGpu) > 0)
            gpu_pods_on[p.node_name].push_back(fmt::format("{} ({:g})", p.label(), r.requests.get(kGpu)));
    }

    for (const auto& n : nodes) {
        NodeVerdict v;
        v.node = n.name;
        auto why = [&](std::string s) {
            v.fits = false;
            v.reasons.push_back(std::move(s));
        };
        if (n.unschedulable) why("the node is cordoned (spec.unschedulable): `kubectl uncordon`");
        for (const auto& [k, want] : pod.node_selector) {
            auto have = n.labels.find(k);
            if (have == n.labels.end())
                why(fmt::format("nodeSelector {}={}: the node has no label {} (`kubectl label node {} {}={}`)", k, want, k,
                                v.node, k, want));
            else if (have->second != want)
                why(fmt::format("nodeSelector {}={}: the node has {}={}", k, want, k, have->second));
        }
        if (!pod.required_terms.empty()) {
            const std::map<std::string, std::string> fields{{"metadata.name", v.node}};
            bool any = false;
            for (const auto& t : pod.required_terms) {
                bool all = true;
                for (const auto& ex : t.expressions) all &= match_expression(n.labels, ex);
                for (const auto& ex : t.fields) all &= match_expression(fields, ex);
                any |= all;
            }
            if (!any) why("required node affinity (nodeSelectorTerms) does not match the node's labels");
        }
        for (const auto& taint : n.taints) {
            if (taint.effect != "NoSchedule" && taint.effect != "NoExecute") continue;
            if (!tolerated(taint, pod.tolerations))
                why(fmt::format("taint {}{}{}:{} is not tolerated (add a toleration for key {})", taint.key,
                                taint.has_value ? "=" : "", taint.value, taint.effect, taint.key));
        }
        const Resources alloc = sum_of(n.allocatable);
        const Resources& used = used_on[v.node];
        if (e.gpus > 0) {
            const double have = alloc.get(kGpu);
            // Capacity counts every device the plugin lists, allocatable only the Healthy ones.
            const auto c = n.capacity.find(kGpu);
            const double cap = c == n.capacity.end() ? have : c->second.value;
            std::string sick;
            if (cap > have) {
                auto u = unhealthy.find(v.node);
                sick = fmt::format("{:g} of the node's {:g} GPUs Unhealthy (capacity {:g}, allocatable {:g}){}", cap - have,
                                   cap, cap, have,
                                   u != unhealthy.end() && !u->second.empty()
                                       ? fmt::format(": {}", fmt::join(u->second, ", "))
                                       : fmt::format(": the device plugin reports them (`kgpu doctor` on {} names them "
                                                     "and says why)",
                                                     v.node));
            }
            if (cap > 0 && e.gpus > cap) {
                why(fmt::format("nvidia.com/gpu: the pod requests {:g}, more than the node has in all (capacity {:g}): it "
                                "can never run here; request at most {:g}, or use a node with more GPUs",
                                e.gpus, cap, cap));
            } else if (have == 0) {
                why(sick.empty() ? std::string("no nvidia.com/gpu allocatable: the device plugin is not running or not "
                                               "registered on this node, or every GPU is unhealthy (run `kgpu doctor` "
                                               "there)")
                                 : "no nvidia.com/gpu allocatable: " + sick);
            } else if (have - used.get(kGpu) < e.gpus) {
                std::string users;
                for (const auto& s : gpu_pods_on[v.node]) users += (users.empty() ? "" : ", ") + s;
                std::string r = fmt::format("nvidia.com/gpu: {:g} of {:g} allocatable already requested{}, the pod needs {:g}",
                                            used.get(kGpu), have, users.empty() ? "" : " by " + users, e.gpus);
                if (!sick.empty()) r += "; " + sick;
                if (used.get(kGpu) > have)
                    r += "; pods keep the GPUs they were given when those turn Unhealthy, so more are requested than "
                         "allocatable";
                why(std::move(r));
            }
        }
        for (const char* res : {"cpu", "memory", "ephemeral-storage"}) {
            double want = reqs.requests.get(res);
            if (want == 0 || !alloc.v.count(res)) continue;
            double free = alloc.get(res) - used.get(res);
            if (free + 1e-9 < want)
                why(fmt::format("{}: {} free of {} allocatable, the pod requests {}", res, fmt_qty(res, std::max(0.0, free)),
                                fmt_qty(res, alloc.get(res)), fmt_qty(res, want)));
        }
        for (const auto& [k, want] : reqs.requests.v) {
            if (k == kGpu || k == "cpu" || k == "memory" || k == "ephemeral-storage" || want == 0) continue;
            if (alloc.get(k) - used.get(k) < want)
                why(fmt::format("{}: {:g} free of {:g} allocatable, the pod requests {:g}", k,
                                std::max(0.0, alloc.get(k) - used.get(k)), alloc.get(k), want));
        }
        if (alloc.v.count("pods") && pod_count_on[v.node] + 1 > alloc.get("pods"))
            why(fmt::format("pods: {} running, {:g} allowed", pod_count_on[v.node], alloc.get("pods")));
        e.nodes.push_back(std::move(v));
    }
    return e;
}

}  // namespace

Result<Explanation> explain(const nlohmann::json& pod, const nlohmann::json& nodes, const nlohmann::json& pods,
                            const nlohmann::json& quotas, const Names& names, const nlohmann::json& events,
                            const UnhealthyDevices& unhealthy) {
    auto p = json::decode(pod, names.pod, [](const json::Reader& r) {
        if (!r.is_object()) r.fail("a Pod object (kubectl get pod <name> -o json)");
        if (r.string("kind", "Pod") != "Pod") r.find("kind")->fail("kind \"Pod\" (kubectl get pod <name> -o json)");
        return decode_pod(r);
    });
    if (!p) return std::unexpected(p.error());
    Objects all;
    struct Document {
        const nlohmann::json& json;
        const std::string& name;
        const char* kind;
        const char* command;
    };
    std::size_t own_nodes = 0, in_nodes = 0;
    const Document documents[] = {{nodes, names.nodes, "Node", "kubectl get nodes -o json"},
                                  {pods, names.pods, "Pod", "kubectl get pods -A -o json"},
                                  {quotas, names.quotas, "ResourceQuota", "kubectl get resourcequota -A -o json"},
                                  {events, names.events, "Event", "kubectl get events -n <namespace> -o json"}};
    for (const auto& d : documents) {
        auto own = json::decode(d.json, d.name, [&](const json::Reader& r) { return collect(r, d.kind, d.command, all); });
        if (!own) return std::unexpected(own.error());
        if (&d == &documents[0]) {
            own_nodes = *own;
            in_nodes = all.nodes.size() + all.pods.size() + all.quotas.size() + all.events.size();
            for (const auto& [kind, n] : all.skipped) in_nodes += n;
        }
    }
    // A Pod list given as --nodes would otherwise read as "no nodes".
    if (own_nodes == 0 && in_nodes > 0)
        return fail(Code::parse, "{}: no Node among its {} object(s): expected kubectl get nodes -o json (or a List that "
                                 "includes nodes)",
                    names.nodes, in_nodes);
    dedupe(all.nodes, [](const Node& n) { return n.name; });
    dedupe(all.pods, [](const Pod& x) { return x.label(); });
    dedupe(all.quotas, [](const Quota& q) { return q.ns + "/" + q.name; });
    dedupe(all.events, [](const Event& x) { return x.key; });
    Explanation e = explain_decoded(*p, all.nodes, all.pods, all.quotas, unhealthy);
    for (const auto& [kind, n] : all.skipped)
        e.warnings.push_back(fmt::format("{} object(s) of kind {} skipped: only Nodes, Pods, ResourceQuotas and Events are read",
                                         n, kind.empty() ? "(none)" : kind));
    // The pod's Warning events (the scheduler's FailedScheduling above all), oldest first.
    for (const auto& ev : all.events)
        if (ev.kind == "Pod" && ev.name == p->name && (ev.ns.empty() ? "default" : ev.ns) == p->ns &&
            (ev.type == "Warning" || ev.reason == "FailedScheduling"))
            e.events.push_back(PodEvent{ev.reason, ev.source, ev.message, ev.count, ev.last_seen});
    std::stable_sort(e.events.begin(), e.events.end(),
                     [](const PodEvent& a, const PodEvent& b) { return a.last_seen < b.last_seen; });
    if (!events.is_null() && e.events.empty())
        e.warnings.push_back(fmt::format("{} holds no Warning event of {}: the scheduler has not tried it yet, or its "
                                         "events expired (kube-apiserver keeps them 1 h by default)",
                                         names.events, e.pod));
    return e;
}

Result<Explanation> explain(const Inputs& in, const UnhealthyDevices& unhealthy) {
    auto pod = read_json(in.pod);
    if (!pod) return std::unexpected(pod.error());
    auto nodes = read_json(in.nodes);
    if (!nodes) return std::unexpected(nodes.error());
    auto pods = read_json(in.pods);
    if (!pods) return std::unexpected(pods.error());
    auto quotas = read_json(in.quotas);
    if (!quotas) return std::unexpected(quotas.error());
    auto events = read_json(in.events);
    if (!events) return std::unexpected(events.error());
    return explain(*pod, *nodes, *pods, *quotas, Names{in.pod, in.nodes, in.pods, in.quotas, in.events}, *events,
                   unhealthy);
}

void print_text(const Explanation& e, std::ostream& out) {
    out << fmt::format("Pod {} requests {:g} nvidia.com/gpu.\n", e.pod, e.gpus);
    if (!e.scheduler.empty()) out << "the scheduler (the pod's PodScheduled condition): " << e.scheduler << "\n";
    for (const auto& w : e.warnings) out << "warning: " << w << "\n";
    for (const auto& ev : e.events) {
        std::vector<std::string> when;
        if (ev.count > 1) when.push_back(fmt::format("{} times", ev.count));
        if (!ev.last_seen.empty()) when.push_back("last " + ev.last_seen);
        out << fmt::format("{} {}{}: {}\n", ev.source.empty() ? "event" : ev.source, ev.reason,
                           when.empty() ? "" : fmt::format(" ({})", fmt::join(when, ", ")), ev.message);
    }
    for (const auto& p : e.pod_problems) out << "blocks every node: " << p << "\n";
    if (e.nodes.empty()) out << "No nodes in --nodes.\n";
    for (const auto& n : e.nodes) {
        if (n.fits) {
            out << fmt::format("{}: fits\n", n.node);
            continue;
        }
        out << fmt::format("{}: does not fit\n", n.node);
        for (const auto& r : n.reasons) out << "  - " << r << "\n";
    }
    if (!e.fits_somewhere()) out << "The pod fits on no node.\n";
    else if (e.events.empty() && e.scheduler.empty())
        out << "The pod fits on at least one node: if it stays Pending, read `kubectl describe pod` events.\n";
    else
        out << "The pod fits on at least one node by these files, unlike what the events above say: the files may be "
               "older or newer than the events (take them together), or a filter kgpu does not model applies.\n";
}

nlohmann::json to_json(const Explanation& e) {
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& n : e.nodes) nodes.push_back({{"node", n.node}, {"fits", n.fits}, {"reasons", n.reasons}});
    nlohmann::json events = nlohmann::json::array();
    for (const auto& ev : e.events)
        events.push_back({{"reason", ev.reason}, {"source", ev.source}, {"message", ev.message}, {"count", ev.count},
                          {"last_seen", ev.last_seen}});
    return {{"pod", e.pod},          {"gpus", e.gpus},         {"fits", e.fits_somewhere()},
            {"pod_problems", e.pod_problems}, {"warnings", e.warnings}, {"nodes", nodes},
            {"scheduler", e.scheduler},       {"events", events}};
}

}  // namespace kgpu::doctor::pending
