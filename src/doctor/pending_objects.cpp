// Decoding the documents of `kgpu doctor pending` (pending_objects.h).
#include "doctor/pending_objects.h"

#include <charconv>
#include <cmath>
#include <string>

#include "common/strings.h"
#include "doctor/pending.h"

namespace kgpu::doctor::pending {

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace kgpu::doctor::pending
