#include "doctor/pending.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <ostream>

#include <fmt/format.h>

#include "common/files.h"
#include "common/json.h"
#include "common/strings.h"

namespace kgpu::doctor::pending {

namespace {

constexpr const char* kGpu = "nvidia.com/gpu";

// ---- The documents, decoded -----------------------------------------------------------------
// Everything the explanation reads is decoded first, through json::Reader, so valid JSON of the
// wrong shape is a parse error naming the document and the path, never an exception out of
// nlohmann::json (issue #14). Fields Kubernetes may omit read as their defaults.

struct Quantity {
    double value = 0;
    std::string text;  // as written, for messages
};
using Quantities = std::map<std::string, Quantity>;

struct Resources {
    std::map<std::string, double> v;
    double get(const std::string& k) const {
        auto it = v.find(k);
        return it == v.end() ? 0.0 : it->second;
    }
};

struct Container {
    std::string name;
    Quantities requests, limits;
    std::vector<std::pair<std::string, std::string>> env;  // name, value
};

struct Toleration {
    std::string key, op, value, effect;
};

struct Taint {
    std::string key, value, effect;
    bool has_value = false;
};

struct MatchExpression {
    std::string key, op;
    std::vector<std::string> values;
};

struct SelectorTerm {
    std::vector<MatchExpression> expressions, fields;
};

struct Pod {
    std::string ns, name;
    std::string node_name, phase;
    std::vector<Container> containers, init_containers;
    std::map<std::string, std::string> node_selector;
    std::vector<Toleration> tolerations;
    std::vector<SelectorTerm> required_terms;  // required node affinity; empty: none
    std::string label() const { return fmt::format("{}/{}", ns, name); }
};

struct Node {
    std::string name;
    std::map<std::string, std::string> labels;
    bool unschedulable = false;
    std::vector<Taint> taints;
    Quantities allocatable;
};

struct Quota {
    std::string ns, name;
    Quantities hard, used;
};

Quantity decode_quantity(const json::Reader& r) {
    std::string text = r.as_scalar_text();
    auto q = parse_quantity(text);
    if (!q) r.fail("a quantity such as 2, 500m or 16Gi");
    return Quantity{*q, std::move(text)};
}

Quantities decode_quantities(const json::Reader& r) {
    Quantities out;
    for (const auto& [k, v] : r.members()) out[k] = decode_quantity(v);
    return out;
}

std::map<std::string, std::string> decode_strings(const json::Reader& r) {
    std::map<std::string, std::string> out;
    for (const auto& [k, v] : r.members()) out[k] = v.as_string();
    return out;
}

std::vector<Container> decode_containers(const json::Reader& r) {
    std::vector<Container> out;
    for (const auto& c : r.elements()) {
        Container x;
        x.name = c.string("name", "?");
        const auto res = c.object("resources");
        x.requests = decode_quantities(res.object("requests"));
        x.limits = decode_quantities(res.object("limits"));
        for (const auto& e : c.array("env").elements()) x.env.emplace_back(e.string("name"), e.string("value"));
        out.push_back(std::move(x));
    }
    return out;
}

std::vector<MatchExpression> decode_expressions(const json::Reader& r) {
    std::vector<MatchExpression> out;
    for (const auto& e : r.elements()) {
        MatchExpression x{e.string("key"), e.string("operator", "In"), {}};
        for (const auto& v : e.array("values").elements()) x.values.push_back(v.as_string());
        out.push_back(std::move(x));
    }
    return out;
}

void decode_metadata(const json::Reader& obj, std::string& ns, std::string& name) {
    const auto md = obj.object("metadata");
    ns = md.string("namespace", "default");
    name = md.string("name", "?");
}

Pod decode_pod(const json::Reader& r) {
    Pod p;
    decode_metadata(r, p.ns, p.name);
    const auto spec = r.object("spec");
    p.node_name = spec.string("nodeName");
    p.phase = r.object("status").string("phase");
    p.containers = decode_containers(spec.array("containers"));
    p.init_containers = decode_containers(spec.array("initContainers"));
    p.node_selector = decode_strings(spec.object("nodeSelector"));
    for (const auto& t : spec.array("tolerations").elements())
        p.tolerations.push_back({t.string("key"), t.string("operator", "Equal"), t.string("value"), t.string("effect")});
    const auto terms = spec.object("affinity")
                           .object("nodeAffinity")
                           .object("requiredDuringSchedulingIgnoredDuringExecution")
                           .array("nodeSelectorTerms");
    for (const auto& t : terms.elements())
        p.required_terms.push_back(
            {decode_expressions(t.array("matchExpressions")), decode_expressions(t.array("matchFields"))});
    return p;
}

Node decode_node(const json::Reader& r) {
    Node n;
    const auto md = r.object("metadata");
    n.name = md.string("name", "?");
    n.labels = decode_strings(md.object("labels"));
    const auto spec = r.object("spec");
    n.unschedulable = spec.boolean("unschedulable", false);
    for (const auto& t : spec.array("taints").elements())
        n.taints.push_back({t.string("key"), t.string("value"), t.string("effect"), t.has("value")});
    n.allocatable = decode_quantities(r.object("status").object("allocatable"));
    return n;
}

Quota decode_quota(const json::Reader& r) {
    Quota q;
    decode_metadata(r, q.ns, q.name);
    const auto status = r.object("status");
    q.hard = decode_quantities(status.has("hard") ? status.object("hard") : r.object("spec").object("hard"));
    q.used = decode_quantities(status.object("used"));
    return q;
}

// The objects of a document that is a List (`items`), a bare array, or one object; a null
// document (an optional file not given) has none.
template <class T>
std::vector<T> decode_list(const json::Reader& r, std::string_view kind, std::string_view command,
                           T (*decode_one)(const json::Reader&)) {
    std::vector<T> out;
    if (r.is_null()) return out;
    std::vector<json::Reader> objects;
    if (r.is_array()) objects = r.elements();
    else if (r.is_object() && r.has("items")) objects = r.array("items").elements();
    else if (r.is_object()) objects.push_back(r);
    else r.fail(fmt::format("a List of {}s ({}) or a {} object", kind, command, kind));
    for (const auto& o : objects) {
        if (!o.is_object()) o.fail(fmt::format("a {} object", kind));
        out.push_back(decode_one(o));
    }
    return out;
}

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

Result<double> parse_quantity(std::string_view q) {
    std::string s(strings::trim(q));
    if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
    static const std::pair<const char*, double> suffixes[] = {
        {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0},
        {"Pi", 1125899906842624.0}, {"Ei", 1152921504606846976.0}, {"n", 1e-9}, {"u", 1e-6}, {"m", 1e-3},
        {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}, {"E", 1e18}};
    double mult = 1.0;
    for (const auto& [suf, m] : suffixes) {
        std::string_view sv(suf);
        if (s.size() > sv.size() && s.ends_with(sv)) {
            mult = m;
            s.resize(s.size() - sv.size());
            break;
        }
    }
    if (s.empty()) return fail(Code::parse, "'{}' is not a quantity", q);
    try {
        size_t used = 0;
        double v = std::stod(s, &used);
        if (used != s.size() || !std::isfinite(v)) return fail(Code::parse, "'{}' is not a quantity", q);
        return v * mult;
    } catch (...) {
        return fail(Code::parse, "'{}' is not a quantity", q);
    }
}

bool Explanation::fits_somewhere() const {
    if (!pod_problems.empty()) return false;
    return std::any_of(nodes.begin(), nodes.end(), [](const NodeVerdict& n) { return n.fits; });
}

namespace {

Explanation explain_decoded(const Pod& pod, const std::vector<Node>& nodes, const std::vector<Pod>& pods,
                            const std::vector<Quota>& quotas) {
    Explanation e;
    e.pod = pod.label();
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
            double have = alloc.get(kGpu);
            if (have == 0) {
                why("no nvidia.com/gpu allocatable: the device plugin is not running or not registered on this node, or "
                    "every GPU is unhealthy (run `kgpu doctor` there)");
            } else if (have - used.get(kGpu) < e.gpus) {
                std::string users;
                for (const auto& s : gpu_pods_on[v.node]) users += (users.empty() ? "" : ", ") + s;
                why(fmt::format("nvidia.com/gpu: {:g} of {:g} allocatable already requested{}, the pod needs {:g}",
                                used.get(kGpu), have, users.empty() ? "" : " by " + users, e.gpus));
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
                            const nlohmann::json& quotas, const Names& names) {
    auto p = json::decode(pod, names.pod, [](const json::Reader& r) {
        if (!r.is_object()) r.fail("a Pod object (kubectl get pod <name> -o json)");
        if (r.string("kind", "Pod") != "Pod") r.find("kind")->fail("kind \"Pod\" (kubectl get pod <name> -o json)");
        return decode_pod(r);
    });
    if (!p) return std::unexpected(p.error());
    auto n = json::decode(nodes, names.nodes, [](const json::Reader& r) {
        return decode_list(r, "Node", "kubectl get nodes -o json", decode_node);
    });
    if (!n) return std::unexpected(n.error());
    auto ps = json::decode(pods, names.pods, [](const json::Reader& r) {
        return decode_list(r, "Pod", "kubectl get pods -A -o json", decode_pod);
    });
    if (!ps) return std::unexpected(ps.error());
    auto qs = json::decode(quotas, names.quotas, [](const json::Reader& r) {
        return decode_list(r, "ResourceQuota", "kubectl get resourcequota -A -o json", decode_quota);
    });
    if (!qs) return std::unexpected(qs.error());
    return explain_decoded(*p, *n, *ps, *qs);
}

Result<Explanation> explain(const Inputs& in) {
    auto pod = read_json(in.pod);
    if (!pod) return std::unexpected(pod.error());
    auto nodes = read_json(in.nodes);
    if (!nodes) return std::unexpected(nodes.error());
    auto pods = read_json(in.pods);
    if (!pods) return std::unexpected(pods.error());
    auto quotas = read_json(in.quotas);
    if (!quotas) return std::unexpected(quotas.error());
    return explain(*pod, *nodes, *pods, *quotas, Names{in.pod, in.nodes, in.pods, in.quotas});
}

void print_text(const Explanation& e, std::ostream& out) {
    out << fmt::format("Pod {} requests {:g} nvidia.com/gpu.\n", e.pod, e.gpus);
    for (const auto& w : e.warnings) out << "warning: " << w << "\n";
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
    out << (e.fits_somewhere() ? "The pod fits on at least one node: if it stays Pending, read `kubectl describe pod` events.\n"
                               : "The pod fits on no node.\n");
}

nlohmann::json to_json(const Explanation& e) {
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& n : e.nodes) nodes.push_back({{"node", n.node}, {"fits", n.fits}, {"reasons", n.reasons}});
    return {{"pod", e.pod},          {"gpus", e.gpus},         {"fits", e.fits_somewhere()},
            {"pod_problems", e.pod_problems}, {"warnings", e.warnings}, {"nodes", nodes}};
}

}  // namespace kgpu::doctor::pending
