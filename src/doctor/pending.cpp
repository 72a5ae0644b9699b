#include "doctor/pending.h"

#include <algorithm>
#include <charconv>
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
    // status.conditions PodScheduled=False: the scheduler's reason and message ("Unschedulable",
    // "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.").
    std::string unscheduled_reason, unscheduled_message;
    std::string label() const { return fmt::format("{}/{}", ns, name); }
};

struct Node {
    std::string name;
    std::map<std::string, std::string> labels;
    bool unschedulable = false;
    std::vector<Taint> taints;
    Quantities allocatable;
    Quantities capacity;  // allocatable plus what is reserved or, for a device plugin's resource, Unhealthy
};

// A core/v1 Event (what `kubectl get events -o json` lists).
struct Event {
    std::string key;  // namespace/name of the Event itself
    std::string kind, ns, name;  // involvedObject
    std::string reason, type, message, source, last_seen;
    long count = 1;
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
    for (const auto& c : r.object("status").array("conditions").elements())
        if (c.string("type") == "PodScheduled" && c.string("status") == "False") {
            p.unscheduled_reason = c.string("reason");
            p.unscheduled_message = c.string("message");
        }
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
    n.capacity = decode_quantities(r.object("status").object("capacity"));
    return n;
}

Event decode_event(const json::Reader& r) {
    Event e;
    std::string ns, name;
    decode_metadata(r, ns, name);
    e.key = ns + "/" + name;
    const auto obj = r.object("involvedObject");
    e.kind = obj.string("kind");
    e.ns = obj.string("namespace");
    e.name = obj.string("name");
    e.reason = r.string("reason");
    e.type = r.string("type");
    e.message = r.string("message");
    e.source = r.object("source").string("component");
    if (e.source.empty()) e.source = r.string("reportingComponent");
    if (auto c = r.find("count")) {
        const std::string text = c->as_scalar_text();
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), e.count);
        if (ec != std::errc() || end != text.data() + text.size() || e.count < 0) c->fail("a count of occurrences");
    }
    // The newest of the times an Event may carry (RFC 3339 strings compare in time order).
    for (const std::string& t : {r.string("lastTimestamp"), r.object("series").string("lastObservedTime"),
                                 r.string("eventTime"), r.string("firstTimestamp")})
        if (t > e.last_seen) e.last_seen = t;
    return e;
}

Quota decode_quota(const json::Reader& r) {
    Quota q;
    decode_metadata(r, q.ns, q.name);
    const auto status = r.object("status");
    q.hard = decode_quantities(status.has("hard") ? status.object("hard") : r.object("spec").object("hard"));
    q.used = decode_quantities(status.object("used"));
    return q;
}

// Every object the documents hold, by kind.
struct Objects {
    std::vector<Node> nodes;
    std::vector<Pod> pods;
    std::vector<Quota> quotas;
    std::vector<Event> events;
    std::map<std::string, std::size_t> skipped;  // objects of other kinds, by kind
};

// Adds the objects of a document that is a List (`items`), a bare array, or one object to `out`
// by their `kind` (`kind` names what an object without one is: the option's); a null document
// (an optional file not given) has none. Returns how many objects of `kind` it held.
std::size_t collect(const json::Reader& r, std::string_view kind, std::string_view command, Objects& out) {
    if (r.is_null()) return 0;
    std::vector<json::Reader> objects;
    if (r.is_array()) objects = r.elements();
    else if (r.is_object() && r.has("items")) objects = r.array("items").elements();
    else if (r.is_object()) objects.push_back(r);
    else r.fail(fmt::format("a List of {}s ({}) or a {} object", kind, command, kind));
    std::size_t own = 0;
    for (const auto& o : objects) {
        if (!o.is_object()) o.fail(fmt::format("a {} object", kind));
        const std::string k = o.string("kind", kind);
        if (k == kind) ++own;
        if (k == "Node") out.nodes.push_back(decode_node(o));
        else if (k == "Pod") out.pods.push_back(decode_pod(o));
        else if (k == "ResourceQuota") out.quotas.push_back(decode_quota(o));
        else if (k == "Event") out.events.push_back(decode_event(o));
        else ++out.skipped[k];
    }
    return own;
}

// Each object once, the first one seen (the same file may be given for two options).
template <class T, class Key>
void dedupe(std::vector<T>& v, Key key) {
    std::set<std::string> seen;
    std::erase_if(v, [&](const T& x) { return !seen.insert(key(x)).second; });
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
