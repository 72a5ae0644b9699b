#include "doctor/pending.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <ostream>

#include <fmt/format.h>

#include "common/files.h"
#include "common/strings.h"

namespace kgpu::doctor::pending {

using nlohmann::json;

namespace {

constexpr const char* kGpu = "nvidia.com/gpu";

struct Resources {
    std::map<std::string, double> v;
    double get(const std::string& k) const {
        auto it = v.find(k);
        return it == v.end() ? 0.0 : it->second;
    }
};

Result<Resources> read_resources(const json& j) {
    Resources r;
    if (!j.is_object()) return r;
    for (const auto& [k, val] : j.items()) {
        std::string s = val.is_string() ? val.get<std::string>() : val.dump();
        auto q = parse_quantity(s);
        if (!q) return std::unexpected(q.error().context(k));
        r.v[k] = *q;
    }
    return r;
}

// The pod's effective requests: sum over containers (requests, or limits where requests are
// absent, as the API server defaults them), at least the largest init container.
struct PodRequests {
    Resources requests;
    Resources limits;
};

Result<PodRequests> pod_requests(const json& pod) {
    PodRequests out;
    const json& spec = pod.value("spec", json::object());
    for (const auto& c : spec.value("containers", json::array())) {
        const json& res = c.value("resources", json::object());
        auto req = read_resources(res.value("requests", json::object()));
        auto lim = read_resources(res.value("limits", json::object()));
        if (!req) return std::unexpected(req.error());
        if (!lim) return std::unexpected(lim.error());
        for (const auto& [k, v] : lim->v) {
            out.limits.v[k] += v;
            if (!req->v.count(k)) req->v[k] = v;
        }
        for (const auto& [k, v] : req->v) out.requests.v[k] += v;
    }
    for (const auto& c : spec.value("initContainers", json::array())) {
        const json& res = c.value("resources", json::object());
        auto req = read_resources(res.value("requests", json::object()));
        auto lim = read_resources(res.value("limits", json::object()));
        if (!req || !lim) continue;
        for (const auto& [k, v] : lim->v)
            if (!req->v.count(k)) req->v[k] = v;
        for (const auto& [k, v] : req->v) out.requests.v[k] = std::max(out.requests.get(k), v);
    }
    return out;
}

std::string label_of(const json& obj) {
    const json& md = obj.value("metadata", json::object());
    return fmt::format("{}/{}", md.value("namespace", "default"), md.value("name", "?"));
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

bool match_expression(const json& labels, const json& e) {
    std::string key = e.value("key", "");
    std::string op = e.value("operator", "In");
    bool has = labels.contains(key);
    std::string val = has && labels[key].is_string() ? labels[key].get<std::string>() : "";
    std::vector<std::string> values;
    for (const auto& v : e.value("values", json::array()))
        if (v.is_string()) values.push_back(v.get<std::string>());
    bool in = std::find(values.begin(), values.end(), val) != values.end();
    if (op == "In") return has && in;
    if (op == "NotIn") return !has || !in;
    if (op == "Exists") return has;
    if (op == "DoesNotExist") return !has;
    if ((op == "Gt" || op == "Lt") && has && !values.empty()) {
        try {
            long long a = std::stoll(val), b = std::stoll(values[0]);
            return op == "Gt" ? a > b : a < b;
        } catch (...) {
            return false;
        }
    }
    return false;
}

bool tolerated(const json& taint, const json& tolerations) {
    for (const auto& t : tolerations) {
        std::string op = t.value("operator", "Equal");
        std::string key = t.value("key", "");
        std::string effect = t.value("effect", "");
        if (!effect.empty() && effect != taint.value("effect", "")) continue;
        if (key.empty() && op == "Exists") return true;
        if (key != taint.value("key", "")) continue;
        if (op == "Exists") return true;
        if (t.value("value", "") == taint.value("value", "")) return true;
    }
    return false;
}

bool terminal(const json& p) {
    std::string phase = p.value("status", json::object()).value("phase", "");
    return phase == "Succeeded" || phase == "Failed";
}

std::vector<json> items(const json& j) {
    if (j.is_null()) return {};
    if (j.contains("items") && j["items"].is_array()) return j["items"].get<std::vector<json>>();
    if (j.is_array()) return j.get<std::vector<json>>();
    return {j};
}

Result<json> read_json(const std::string& path, const char* what) {
    if (path.empty()) return json();
    auto text = files::read(path);
    if (!text) return std::unexpected(text.error());
    try {
        return json::parse(*text);
    } catch (const json::exception& e) {
        return fail(Code::parse, "{} {}: not JSON: {}", what, path, e.what());
    }
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
        if (used != s.size()) return fail(Code::parse, "'{}' is not a quantity", q);
        return v * mult;
    } catch (...) {
        return fail(Code::parse, "'{}' is not a quantity", q);
    }
}

bool Explanation::fits_somewhere() const {
    if (!pod_problems.empty()) return false;
    return std::any_of(nodes.begin(), nodes.end(), [](const NodeVerdict& n) { return n.fits; });
}

Result<Explanation> explain(const json& pod, const json& nodes, const json& pods, const json& quotas) {
    if (!pod.is_object() || pod.value("kind", "Pod") != "Pod")
        return fail(Code::parse, "--pod: expected a Pod object (kubectl get pod <name> -o json)");
    Explanation e;
    e.pod = label_of(pod);
    std::string ns = pod.value("metadata", json::object()).value("namespace", "default");
    auto reqs = pod_requests(pod);
    if (!reqs) return std::unexpected(reqs.error().context("--pod"));
    e.gpus = reqs->requests.get(kGpu);
    const json& spec = pod.value("spec", json::object());

    // Pod-level: extended resources must have request == limit (and a limit).
    for (const auto& c : spec.value("containers", json::array())) {
        const json& res = c.value("resources", json::object());
        const json& rq = res.value("requests", json::object());
        const json& lm = res.value("limits", json::object());
        std::string name = c.value("name", "?");
        if (rq.contains(kGpu) && !lm.contains(kGpu))
            e.pod_problems.push_back(fmt::format("container {}: requests nvidia.com/gpu without a limit; extended resources "
                                                 "need limits (set limits.nvidia.com/gpu, requests may then be omitted)",
                                                 name));
        else if (rq.contains(kGpu) && lm.contains(kGpu) && rq[kGpu].dump() != lm[kGpu].dump() &&
                 parse_quantity(rq[kGpu].is_string() ? rq[kGpu].get<std::string>() : rq[kGpu].dump()).value_or(-1) !=
                     parse_quantity(lm[kGpu].is_string() ? lm[kGpu].get<std::string>() : lm[kGpu].dump()).value_or(-2))
            e.pod_problems.push_back(fmt::format("container {}: nvidia.com/gpu request {} differs from limit {}; GPUs cannot "
                                                 "be overcommitted: make them equal (or set only the limit)",
                                                 name, rq[kGpu].dump(), lm[kGpu].dump()));
        for (const auto& env : c.value("env", json::array()))
            if (env.value("name", "") == "NVIDIA_VISIBLE_DEVICES")
                e.warnings.push_back(fmt::format(
                    "container {} sets NVIDIA_VISIBLE_DEVICES={} itself: that bypasses the scheduler's accounting (the pod "
                    "may use GPUs given to other pods); request nvidia.com/gpu and let the device plugin choose",
                    name, env.value("value", "")));
    }
    if (e.gpus == 0) e.warnings.push_back("the pod requests no nvidia.com/gpu; it gets no GPU from the device plugin");

    // ResourceQuotas in the pod's namespace.
    for (const auto& q : items(quotas)) {
        const json& md = q.value("metadata", json::object());
        if (md.value("namespace", "default") != ns) continue;
        const json& st = q.value("status", json::object());
        const json& hard = st.contains("hard") ? st["hard"] : q.value("spec", json::object()).value("hard", json::object());
        const json& used = st.value("used", json::object());
        for (const auto& [key, hv] : hard.items()) {
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
                        ns, md.value("name", "?"), key, res));
                continue;
            }
            double want = res == "pods" ? 1.0 : (is_limit ? reqs->limits.get(res) : reqs->requests.get(res));
            if (want == 0) continue;
            auto h = parse_quantity(hv.is_string() ? hv.get<std::string>() : hv.dump());
            double u = 0;
            if (used.contains(key)) u = parse_quantity(used[key].is_string() ? used[key].get<std::string>() : used[key].dump()).value_or(0);
            if (h && u + want > *h + 1e-9)
                e.pod_problems.push_back(fmt::format("ResourceQuota {}/{}: {} used {} of {}, the pod asks {} (the API "
                                                     "server rejects such a pod; its controller keeps retrying)",
                                                     ns, md.value("name", "?"), key, fmt_qty(res, u), fmt_qty(res, *h),
                                                     fmt_qty(res, want)));
        }
    }

    // What runs on each node already.
    std::map<std::string, Resources> used_on;
    std::map<std::string, std::vector<std::string>> gpu_pods_on;
    std::map<std::string, int> pod_count_on;
    std::string self = e.pod;
    for (const auto& p : items(pods)) {
        std::string node = p.value("spec", json::object()).value("nodeName", "");
        if (node.empty() || terminal(p) || label_of(p) == self) continue;
        auto r = pod_requests(p);
        if (!r) continue;
        for (const auto& [k, v] : r->requests.v) used_on[node].v[k] += v;
        ++pod_count_on[node];
        if (r->requests.get(kGpu) > 0)
            gpu_pods_on[node].push_back(fmt::format("{} ({:g})", label_of(p), r->requests.get(kGpu)));
    }

    const json& selector = spec.value("nodeSelector", json::object());
    const json& tolerations = spec.value("tolerations", json::array());
    json terms = json::array();
    if (spec.contains("affinity"))
        terms = spec["affinity"].value("nodeAffinity", json::object())
                    .value("requiredDuringSchedulingIgnoredDuringExecution", json::object())
                    .value("nodeSelectorTerms", json::array());

    for (const auto& n : items(nodes)) {
        NodeVerdict v;
        const json& md = n.value("metadata", json::object());
        v.node = md.value("name", "?");
        const json& labels = md.value("labels", json::object());
        const json& nspec = n.value("spec", json::object());
        auto why = [&](std::string s) {
            v.fits = false;
            v.reasons.push_back(std::move(s));
        };
        if (nspec.value("unschedulable", false)) why("the node is cordoned (spec.unschedulable): `kubectl uncordon`");
        for (const auto& [k, val] : selector.items()) {
            std::string want = val.is_string() ? val.get<std::string>() : val.dump();
            if (!labels.contains(k))
                why(fmt::format("nodeSelector {}={}: the node has no label {} (`kubectl label node {} {}={}`)", k, want, k,
                                v.node, k, want));
            else if (labels[k] != want)
                why(fmt::format("nodeSelector {}={}: the node has {}={}", k, want, k, labels[k].is_string() ? labels[k].get<std::string>() : labels[k].dump()));
        }
        if (!terms.empty()) {
            bool any = false;
            for (const auto& t : terms) {
                bool all = true;
                for (const auto& ex : t.value("matchExpressions", json::array())) all &= match_expression(labels, ex);
                json fields = json{{"metadata.name", v.node}};
                for (const auto& ex : t.value("matchFields", json::array())) all &= match_expression(fields, ex);
                any |= all;
            }
            if (!any) why("required node affinity (nodeSelectorTerms) does not match the node's labels");
        }
        for (const auto& taint : nspec.value("taints", json::array())) {
            std::string effect = taint.value("effect", "");
            if (effect != "NoSchedule" && effect != "NoExecute") continue;
            if (!tolerated(taint, tolerations))
                why(fmt::format("taint {}{}{}:{} is not tolerated (add a toleration for key {})", taint.value("key", ""),
                                taint.contains("value") ? "=" : "", taint.value("value", ""), effect, taint.value("key", "")));
        }
        auto alloc = read_resources(n.value("status", json::object()).value("allocatable", json::object()));
        if (!alloc) return std::unexpected(alloc.error().context(fmt::format("node {}", v.node)));
        const Resources& used = used_on[v.node];
        if (e.gpus > 0) {
            double have = alloc->get(kGpu);
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
            double want = reqs->requests.get(res);
            if (want == 0 || !alloc->v.count(res)) continue;
            double free = alloc->get(res) - used.get(res);
            if (free + 1e-9 < want)
                why(fmt::format("{}: {} free of {} allocatable, the pod requests {}", res, fmt_qty(res, std::max(0.0, free)),
                                fmt_qty(res, alloc->get(res)), fmt_qty(res, want)));
        }
        for (const auto& [k, want] : reqs->requests.v) {
            if (k == kGpu || k == "cpu" || k == "memory" || k == "ephemeral-storage" || want == 0) continue;
            if (alloc->get(k) - used.get(k) < want)
                why(fmt::format("{}: {:g} free of {:g} allocatable, the pod requests {:g}", k,
                                std::max(0.0, alloc->get(k) - used.get(k)), alloc->get(k), want));
        }
        if (alloc->v.count("pods") && pod_count_on[v.node] + 1 > alloc->get("pods"))
            why(fmt::format("pods: {} running, {:g} allowed", pod_count_on[v.node], alloc->get("pods")));
        e.nodes.push_back(std::move(v));
    }
    return e;
}

Result<Explanation> explain(const Inputs& in) {
    auto pod = read_json(in.pod, "--pod");
    if (!pod) return std::unexpected(pod.error());
    auto nodes = read_json(in.nodes, "--nodes");
    if (!nodes) return std::unexpected(nodes.error());
    auto pods = read_json(in.pods, "--pods");
    if (!pods) return std::unexpected(pods.error());
    auto quotas = read_json(in.quotas, "--quotas");
    if (!quotas) return std::unexpected(quotas.error());
    return explain(*pod, *nodes, *pods, *quotas);
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

json to_json(const Explanation& e) {
    json nodes = json::array();
    for (const auto& n : e.nodes) nodes.push_back({{"node", n.node}, {"fits", n.fits}, {"reasons", n.reasons}});
    return {{"pod", e.pod},          {"gpus", e.gpus},         {"fits", e.fits_somewhere()},
            {"pod_problems", e.pod_problems}, {"warnings", e.warnings}, {"nodes", nodes}};
}

}  // namespace kgpu::doctor::pending
