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
    EXPECT_FALSE(explain(load("nodes.json"), load("nodes.json"), json(), json()));
}

}  // namespace
