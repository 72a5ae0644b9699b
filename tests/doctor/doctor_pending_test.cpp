// `kgpu doctor pending` on kubectl-shaped JSON (tests/doctor/fixtures/kubectl/).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

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
