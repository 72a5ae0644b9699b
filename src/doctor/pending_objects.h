// The documents `kgpu doctor pending` reads (Pods, Nodes, ResourceQuotas, Events as kubectl
// prints them), decoded into what the explanation in pending.cpp reads. Internal to doctor.
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/json.h"

namespace kgpu::doctor::pending {

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

// Every object the documents hold, by kind.
struct Objects {
    std::vector<Node> nodes;
    std::vector<Pod> pods;
    std::vector<Quota> quotas;
    std::vector<Event> events;
    std::map<std::string, std::size_t> skipped;  // objects of other kinds, by kind
};

// A Pod object (one given alone: --pod).
Pod decode_pod(const json::Reader& r);

// Adds the objects of a document that is a List (`items`), a bare array, or one object to `out`
// by their `kind` (`kind` names what an object without one is: the option's); a null document
// (an optional file not given) has none. Returns how many objects of `kind` it held.
std::size_t collect(const json::Reader& r, std::string_view kind, std::string_view command, Objects& out);

// Each object once, the first one seen (the same file may be given for two options).
template <class T, class Key>
void dedupe(std::vector<T>& v, Key key) {
    std::set<std::string> seen;
    std::erase_if(v, [&](const T& x) { return !seen.insert(key(x)).second; });
}

}  // namespace kgpu::doctor::pending
