// `kgpu doctor pending` on kubectl-shaped JSON (tests/doctor/fixtures/kubectl/).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "doctor/pending.h"
#include "fake_host.h"

using namespace kgpu::doctor::pending;
using nlohmann::json;
using ::testing::HasSubstr;

namespace {

json load(const std::string& name) {
    std::ifstream in(kgpu::test::doctor_fixture("kubectl/" + name));
    return json::parse(in);
}

const NodeVerdict& node(const Explanation& e, const std::string& name) {
    for (const auto& n : e.nodes)
        if (n.node == name) return n;
    throw std::runtime_error("no node " + name);
}

std::string reasons(const NodeVerdict& n) {
    std::string s;
    for (const auto& r : n.reasons) s += r + "\n";
    return s;
}

TEST(DoctorPending, Quantities) {
    EXPECT_DOUBLE_EQ(parse_quantity("500m").value(), 0.5);
    EXPECT_DOUBLE_EQ(parse_quantity("1Gi").value(), 1073741824.0);
    EXPECT_DOUBLE_EQ(parse_quantity("251640756Ki").value(), 251640756.0 * 1024);
    EXPECT_DOUBLE_EQ(parse_quantity("2").value(), 2.0);
    EXPECT_DOUBLE_EQ(parse_quantity("1e3").value(), 1000.0);
    EXPECT_FALSE(parse_quantity("lots"));
}

TEST(DoctorPending, EveryCauseOnItsNode) {
    auto e = explain(load("pod.json"), load("nodes.json"), load("pods.json"), load("quotas.json"));
    ASSERT_TRUE(e) << e.error().message;
    EXPECT_EQ(e->pod, "ml-team/resnet50-train");
    EXPECT_EQ(e->gpus, 2);
    EXPECT_FALSE(e->fits_somewhere());
    // gpu-a: 3 of 4 GPUs taken by a running pod (the Succeeded one does not count).
    EXPECT_THAT(reasons(node(*e, "gpu-a")), HasSubstr("3 of 4 allocatable already requested by nlp/bert-0 (3)"));
    EXPECT_EQ(node(*e, "gpu-a").reasons.size(), 1u);
    // gpu-b: untolerated taint.
    EXPECT_THAT(reasons(node(*e, "gpu-b")), HasSubstr("taint nvidia.com/gpu=present:NoSchedule is not tolerated"));
    // gpu-c: no GPUs advertised, CPU and memory short.
    auto c = reasons(node(*e, "gpu-c"));
    EXPECT_THAT(c, HasSubstr("no nvidia.com/gpu allocatable"));
    EXPECT_THAT(c, HasSubstr("cpu: 4 free of 4 allocatable, the pod requests 8"));
    EXPECT_THAT(c, HasSubstr("memory: 16.0Gi free"));
    // cpu-a: the nodeSelector label is missing.
    EXPECT_THAT(reasons(node(*e, "cpu-a")), HasSubstr("nodeSelector nvidia.com/gpu.present=true"));
    // The quota blocks everywhere.
    ASSERT_EQ(e->pod_problems.size(), 1u);
    EXPECT_THAT(e->pod_problems[0], HasSubstr("ResourceQuota ml-team/gpu-quota: requests.nvidia.com/gpu used 1 of 2"));
}

TEST(DoctorPending, QuotaKeysThatAreNotEnforcedAreNotBlockers) {
    // Kubernetes enforces extended-resource quota only as requests.<name>: a bare or limits. key
    // never rejects a pod, so it is a warning about the quota, not a reason for Pending.
    auto quotas = load("quotas.json");
    auto& q = quotas["items"][0];
    for (const char* key : {"nvidia.com/gpu", "limits.nvidia.com/gpu"}) {
        q["spec"]["hard"] = json{{key, "1"}};
        q["status"]["hard"] = json{{key, "1"}};
        q["status"]["used"] = json{{key, "1"}};
        auto e = explain(load("pod.json"), load("nodes.json"), load("pods.json"), quotas);
        ASSERT_TRUE(e) << e.error().message;
        EXPECT_TRUE(e->pod_problems.empty()) << key << ": " << e->pod_problems[0];
        std::string w;
        for (const auto& s : e->warnings) w += s + "\n";
        EXPECT_THAT(w, HasSubstr(std::string("key ") + key + " is not enforced")) << w;
    }
}

TEST(DoctorPending, FitsWhenThereIsRoom) {
    auto pod = load("pod.json");
    pod["spec"]["tolerations"] = json::array({{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}});
    auto e = explain(pod, load("nodes.json"), load("pods.json"), json());
    ASSERT_TRUE(e);
    EXPECT_TRUE(node(*e, "gpu-b").fits) << reasons(node(*e, "gpu-b"));
    EXPECT_TRUE(e->fits_somewhere());
}

TEST(DoctorPending, RequestNotEqualLimitAndEnvWarning) {
    auto pod = load("pod.json");
    pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1";
    pod["spec"]["containers"][0]["env"] = json::array({{{"name", "NVIDIA_VISIBLE_DEVICES"}, {"value", "0"}}});
    auto e = explain(pod, load("nodes.json"), json(), json());
    ASSERT_TRUE(e);
    ASSERT_FALSE(e->pod_problems.empty());
    EXPECT_THAT(e->pod_problems[0], HasSubstr("differs from limit"));
    ASSERT_FALSE(e->warnings.empty());
    EXPECT_THAT(e->warnings[0], HasSubstr("NVIDIA_VISIBLE_DEVICES=0"));
    EXPECT_THAT(e->warnings[0], HasSubstr("bypasses the scheduler"));
}

TEST(DoctorPending, RequiredNodeAffinity) {
    auto pod = load("pod.json");
    pod["spec"].erase("nodeSelector");
    pod["spec"]["affinity"] = json::parse(R"({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-c"]}]}]}}})");
    auto e = explain(pod, load("nodes.json"), json(), json());
    ASSERT_TRUE(e);
    EXPECT_THAT(reasons(node(*e, "gpu-a")), HasSubstr("required node affinity"));
    EXPECT_THAT(reasons(node(*e, "gpu-c")), Not(HasSubstr("affinity")));
}

TEST(DoctorPending, RejectsWhatIsNotAPod) {
    auto e = explain(load("nodes.json"), load("nodes.json"), json(), json());
    ASSERT_FALSE(e);
    EXPECT_EQ(e.error().message, "--pod: .kind: expected kind \"Pod\" (kubectl get pod <name> -o json), found \"List\"");
    for (const char* text : {"1", "[]", "\"x\"", "null"}) {
        auto r = explain(json::parse(text), load("nodes.json"), json(), json());
        ASSERT_FALSE(r) << text;
        EXPECT_THAT(r.error().message, HasSubstr("--pod: .: expected a Pod object")) << text;
    }
}

// Issue #14: valid JSON of the wrong shape aborted (an uncaught nlohmann type_error). Every such
// document is now an error naming it and the path of the value.
TEST(DoctorPending, WrongShapesAreErrorsNamingThePath) {
    struct Case {
        const char* text;
        const char* where;  // the message after "<document>: "
    };
    const Case cases[] = {
        {"1", ".: expected a List of"},
        {"[1]", ".[0]: expected a"},
        {"\"x\"", ".: expected a List of"},
        {"true", ".: expected a List of"},
        {R"({"items":[1]})", ".items[0]: expected a"},
        {R"({"items":{}})", ".items: expected an array, found an object"},
        {R"({"items":[{"metadata":[]}]})", ".items[0].metadata: expected an object, found an array"},
        {R"({"items":[{"metadata":{"name":7}}]})", ".items[0].metadata.name: expected a string, found 7"},
        {R"({"items":[{"metadata":{"labels":{"a":1}}}]})", ".items[0].metadata.labels.a: expected a string, found 1"},
        {R"({"items":[{"spec":[]}]})", ".items[0].spec: expected an object, found an array"},
        {R"({"items":[{"spec":{"unschedulable":"no"}}]})", ".items[0].spec.unschedulable: expected true or false"},
        {R"({"items":[{"spec":{"taints":{}}}]})", ".items[0].spec.taints: expected an array"},
        {R"({"items":[{"spec":{"taints":[{"key":1}]}}]})", ".items[0].spec.taints[0].key: expected a string"},
        {R"({"items":[{"status":{"allocatable":[]}}]})", ".items[0].status.allocatable: expected an object"},
        {R"({"items":[{"status":{"allocatable":{"nvidia.com/gpu":{}}}}]})",
         ".items[0].status.allocatable[\"nvidia.com/gpu\"]: expected a string or a number, found an object"},
        {R"({"items":[{"status":{"allocatable":{"cpu":"lots"}}}]})",
         ".items[0].status.allocatable.cpu: expected a quantity such as 2, 500m or 16Gi, found \"lots\""},
    };
    for (const auto& c : cases) {
        auto r = explain(load("pod.json"), json::parse(c.text), json(), json(), Names{"pod.json", "nodes.json", "", ""});
        ASSERT_FALSE(r) << c.text;
        EXPECT_EQ(r.error().code, kgpu::Code::parse);
        EXPECT_THAT(r.error().message, ::testing::StartsWith(std::string("nodes.json: ") + c.where)) << c.text;
    }
    // The same shapes as --pods and --quotas.
    for (const char* text : {"1", "[1]", "\"x\"", R"({"items":[1]})", R"({"items":[{"metadata":[]}]})"}) {
        auto p = explain(load("pod.json"), load("nodes.json"), json::parse(text), json(), Names{"pod.json", "nodes.json", "pods.json", ""});
        ASSERT_FALSE(p) << text;
        EXPECT_THAT(p.error().message, ::testing::StartsWith("pods.json: .")) << text;
        auto q = explain(load("pod.json"), load("nodes.json"), json(), json::parse(text), Names{"pod.json", "nodes.json", "", "quotas.json"});
        ASSERT_FALSE(q) << text;
        EXPECT_THAT(q.error().message, ::testing::StartsWith("quotas.json: .")) << text;
    }
    // Inside the pod.
    auto pod = load("pod.json");
    pod["spec"]["containers"][0]["resources"]["limits"] = json::array();
    auto r = explain(pod, load("nodes.json"), json(), json(), Names{"pod.json"});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().message, "pod.json: .spec.containers[0].resources.limits: expected an object, found an array");
    pod = load("pod.json");
    pod["spec"]["affinity"] = json::parse(R"({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In", "values": [1]}]}]}}})");
    r = explain(pod, load("nodes.json"), json(), json(), Names{"pod.json"});
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().message, HasSubstr("pod.json: .spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
                                             "nodeSelectorTerms[0].matchExpressions[0].values[0]: expected a string, found 1"));
}

// ---- issue #23 ----------------------------------------------------------------------------------

json gpu_node(const std::string& name, int capacity, int allocatable) {
    return {{"kind", "Node"},
            {"metadata", {{"name", name}, {"labels", {{"nvidia.com/gpu.present", "true"}}}}},
            {"status",
             {{"capacity", {{"nvidia.com/gpu", std::to_string(capacity)}, {"cpu", "64"}}},
              {"allocatable", {{"nvidia.com/gpu", std::to_string(allocatable)}, {"cpu", "64"}}}}}};
}

json gpu_pod(const std::string& ns, const std::string& name, int gpus, const std::string& node = "") {
    json p = {{"kind", "Pod"},
              {"metadata", {{"namespace", ns}, {"name", name}}},
              {"spec", {{"containers", {{{"name", "c"}, {"resources", {{"limits", {{"nvidia.com/gpu", gpus}}}}}}}}}},
              {"status", {{"phase", node.empty() ? "Pending" : "Running"}}}};
    if (!node.empty()) p["spec"]["nodeName"] = node;
    return p;
}

json event(const std::string& name, const std::string& pod, const std::string& type, const std::string& reason,
           const std::string& message, int count, const std::string& last) {
    return {{"kind", "Event"},
            {"metadata", {{"namespace", "ml"}, {"name", name}}},
            {"involvedObject", {{"kind", "Pod"}, {"namespace", "ml"}, {"name", pod}}},
            {"type", type},
            {"reason", reason},
            {"message", message},
            {"count", count},
            {"lastTimestamp", last},
            {"source", {{"component", reason == "FailedScheduling" ? "default-scheduler" : "kubelet"}}}};
}

// `kubectl get pods,nodes,events -A -o json` is one List of mixed kinds: its items are taken by
// kind (it used to read every item as a Node), once each when the same file is given twice;
// other kinds are skipped with a warning.
TEST(DoctorPending, AMixedListIsReadByKind) {
    json all = {{"kind", "List"},
                {"items",
                 {gpu_node("gpu-a", 8, 8), gpu_pod("ml", "holder", 6, "gpu-a"),
                  json{{"kind", "Service"}, {"metadata", {{"name", "kubernetes"}}}},
                  event("e1", "train", "Warning", "FailedScheduling",
                        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.", 3, "2025-01-02T03:04:05Z")}}};
    auto e = explain(gpu_pod("ml", "train", 4), all, all, json(), Names{}, all);
    ASSERT_TRUE(e) << e.error().message;
    ASSERT_EQ(e->nodes.size(), 1u);
    EXPECT_EQ(e->nodes[0].node, "gpu-a");
    EXPECT_THAT(reasons(e->nodes[0]), HasSubstr("6 of 8 allocatable already requested by ml/holder (6)"));
    std::string w;
    for (const auto& s : e->warnings) w += s + "\n";
    EXPECT_THAT(w, HasSubstr("object(s) of kind Service skipped"));
    ASSERT_EQ(e->events.size(), 1u);  // once, though the List came in three times
    EXPECT_EQ(e->events[0].message, "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.");

    // A document with objects but no Node as --nodes is an error, not "no nodes".
    auto pods = explain(gpu_pod("ml", "train", 4), load("pods.json"), json(), json(), Names{"pod.json", "pods.json"});
    ASSERT_FALSE(pods);
    EXPECT_EQ(pods.error().code, kgpu::Code::parse);
    EXPECT_THAT(pods.error().message, HasSubstr("pods.json: no Node among its 2 object(s)"));
    // An empty List still means "no nodes".
    auto none = explain(gpu_pod("ml", "train", 4), json{{"kind", "List"}, {"items", json::array()}}, json(), json());
    ASSERT_TRUE(none) << none.error().message;
    EXPECT_TRUE(none->nodes.empty());
}

// A request above the node's capacity can never fit there: said so, not "N free".
TEST(DoctorPending, ARequestAboveTheNodesCapacityIsNamed) {
    auto e = explain(gpu_pod("ml", "big", 9), json{{"items", {gpu_node("gpu-a", 8, 8)}}}, json(), json());
    ASSERT_TRUE(e) << e.error().message;
    ASSERT_EQ(e->nodes[0].reasons.size(), 1u) << reasons(e->nodes[0]);
    EXPECT_THAT(e->nodes[0].reasons[0],
                HasSubstr("the pod requests 9, more than the node has in all (capacity 8): it can never run here"));
}

// After an XID the node's allocatable drops below its capacity; a pod that got its GPUs before
// keeps them. The reason names the Unhealthy GPU when this host's kgpu plugin says which, and
// says where to look otherwise.
TEST(DoctorPending, UnhealthyGpusAreCountedAndNamed) {
    const json nodes = {{"items", {gpu_node("gpu-a", 8, 7)}}};
    const json pods = {{"items", {gpu_pod("ml", "holder", 8, "gpu-a")}}};
    auto e = explain(gpu_pod("ml", "train", 8), nodes, pods, json(), Names{}, json(),
                     UnhealthyDevices{{"gpu-a", {"GPU-5ad70d24-867c-2e2a-7049-b5408d9d30fb"}}});
    ASSERT_TRUE(e) << e.error().message;
    const std::string r = reasons(e->nodes[0]);
    EXPECT_THAT(r, HasSubstr("8 of 7 allocatable already requested by ml/holder (8), the pod needs 8"));
    EXPECT_THAT(r, HasSubstr("1 of the node's 8 GPUs Unhealthy (capacity 8, allocatable 7): "
                             "GPU-5ad70d24-867c-2e2a-7049-b5408d9d30fb"));
    EXPECT_THAT(r, HasSubstr("pods keep the GPUs they were given when those turn Unhealthy"));
    auto unknown = explain(gpu_pod("ml", "train", 8), nodes, json(), json());
    ASSERT_TRUE(unknown);
    EXPECT_THAT(reasons(unknown->nodes[0]), HasSubstr("`kgpu doctor` on gpu-a names them"));
    // Every GPU Unhealthy: allocatable 0, capacity 8.
    auto all = explain(gpu_pod("ml", "train", 1), json{{"items", {gpu_node("gpu-a", 8, 0)}}}, json(), json());
    ASSERT_TRUE(all);
    EXPECT_THAT(reasons(all->nodes[0]), HasSubstr("no nvidia.com/gpu allocatable: 8 of the node's 8 GPUs Unhealthy"));
}

// The scheduler's own words: the pod's PodScheduled=False condition, and with --events its
// Warning events (not the Normal ones, not another pod's), oldest first.
TEST(DoctorPending, TheSchedulersMessageIsQuoted) {
    auto pod = gpu_pod("ml", "train", 9);
    pod["status"]["conditions"] = json::array(
        {{{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"},
          {"message", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are available: "
                      "1 No preemption victims found for incoming pod."}}});
    const json events = {{"items",
                          {event("e2", "train", "Warning", "FailedScheduling",
                                 "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.", 4, "2025-01-02T03:09:00Z"),
                           event("e1", "train", "Warning", "UnexpectedAdmissionError",
                                 "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. "
                                 "Requested: 1, Available: 0, which is unexpected",
                                 1, "2025-01-02T03:00:00Z"),
                           event("e3", "train", "Normal", "Scheduled", "assigned", 1, "2025-01-02T02:00:00Z"),
                           event("e4", "other", "Warning", "FailedScheduling", "not ours", 1, "2025-01-02T03:00:00Z")}}};
    auto e = explain(pod, json{{"items", {gpu_node("gpu-a", 8, 8)}}}, json(), json(), Names{}, events);
    ASSERT_TRUE(e) << e.error().message;
    EXPECT_EQ(e->scheduler, "Unschedulable: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 "
                            "nodes are available: 1 No preemption victims found for incoming pod.");
    ASSERT_EQ(e->events.size(), 2u);
    EXPECT_EQ(e->events[0].reason, "UnexpectedAdmissionError");
    EXPECT_EQ(e->events[1].reason, "FailedScheduling");
    EXPECT_EQ(e->events[1].source, "default-scheduler");
    EXPECT_EQ(e->events[1].count, 4);
    std::ostringstream text;
    print_text(*e, text);
    EXPECT_THAT(text.str(), HasSubstr("the scheduler (the pod's PodScheduled condition): Unschedulable: 0/1 nodes are "
                                      "available: 1 Insufficient nvidia.com/gpu."));
    EXPECT_THAT(text.str(), HasSubstr("default-scheduler FailedScheduling (4 times, last 2025-01-02T03:09:00Z): 0/1 "
                                      "nodes are available: 1 Insufficient nvidia.com/gpu."));
    EXPECT_THAT(text.str(), HasSubstr("more than the node has in all (capacity 8)"));
    auto j = to_json(*e);
    EXPECT_EQ(j["events"].size(), 2u);
    EXPECT_EQ(j["events"][1]["count"], 4);
    EXPECT_THAT(j["scheduler"].get<std::string>(), HasSubstr("Insufficient nvidia.com/gpu"));
    // --events without an event of this pod: said so.
    auto quiet = explain(gpu_pod("ml", "train", 1), json{{"items", {gpu_node("gpu-a", 8, 8)}}}, json(), json(),
                         Names{}, json{{"items", json::array()}});
    ASSERT_TRUE(quiet);
    EXPECT_THAT(quiet->warnings.back(), HasSubstr("--events holds no Warning event of ml/train"));
}

TEST(DoctorPending, QuantitiesMustBeFinite) {
    for (const char* q : {"inf", "nan", "1e999", "-inf", "infMi", "Mi", "", "1.5.5"}) EXPECT_FALSE(parse_quantity(q)) << q;
}

TEST(DoctorPending, FilesAreNamedAsGiven) {
    kgpu::test::TempDir dir;
    Inputs in;
    in.pod = kgpu::test::doctor_fixture("kubectl/pod.json");
    in.nodes = dir.write("nodes.json", R"({"items":[{"metadata":[]}]})");
    auto r = explain(in);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().message, in.nodes + ": .items[0].metadata: expected an object, found an array");
    dir.write("nodes.json", R"({"items":[)");
    r = explain(in);
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().message, ::testing::StartsWith(in.nodes + ": not JSON: parse error at line 1, column 11"));
}

}  // namespace
