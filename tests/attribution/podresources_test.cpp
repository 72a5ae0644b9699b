// PodResourcesClient against the fake kubelet PodResources server (tests/support).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include "attribution/sim_node.h"
#include "exporter/attribution.h"
#include "support/fake_cri.h"
#include "support/fake_pod_resources.h"
#include "support/process.h"
#include "support/expect.h"

using namespace kgpu;
using exporter::DeviceTarget;
using exporter::DeviceUse;
using exporter::PodRef;
using testing::HasSubstr;

namespace {

using kgpu::test::a100_mig;
using kgpu::test::dgx_h100;

using kgpu::test::count;


// (Designated initializers that leave a member out trip -Wmissing-field-initializers on g++ 12.)
exporter::PodResourcesOptions opts(std::string socket, std::vector<std::string> extra = {},
                                   std::chrono::milliseconds timeout = std::chrono::milliseconds(2000)) {
    exporter::PodResourcesOptions o;
    o.socket = std::move(socket);
    o.extra_resources = std::move(extra);
    o.timeout = timeout;
    return o;
}

class PodResourcesTest : public testing::Test {
protected:
    test::TempDir dir;
    std::string socket = dir.path() + "/kubelet.sock";
    test::FakePodResources fake{socket};
};

TEST_F(PodResourcesTest, MapsEveryIdFormOnDgxH100) {
    const auto& n = dgx_h100();
    ASSERT_EQ(n.gpus.size(), 8u);
    ASSERT_TRUE(fake.start());
    fake.add_pod("ml", "trainer-0", "main", "nvidia.com/gpu", {n.gpus[0].uuid, n.gpus[1].uuid});
    fake.add_pod("ml", "by-index", "worker", "nvidia.com/gpu", {"2", "3"});
    // Time-slicing: two replicas of GPU 4 in one container give one DeviceUse; another pod
    // shares the same GPU.
    fake.add_pod("shared", "a", "c", "nvidia.com/gpu.shared", {n.gpus[4].uuid + "::0", n.gpus[4].uuid + "::3"});
    fake.add_pod("shared", "b", "c", "nvidia.com/gpu.shared", {"4::1"});
    // Not GPUs: ignored even though the ID would resolve.
    fake.add_pod("other", "nic", "c", "example.com/sriov", {"5"});

    exporter::PodResourcesClient client(opts(socket));
    auto uses = client.list(n);
    ASSERT_TRUE(uses) << uses.error().message;
    EXPECT_EQ(client.failure(), "");
    const std::vector<DeviceUse> want{
        {DeviceTarget{0, std::nullopt}, PodRef{"trainer-0", "ml", "main"}},
        {DeviceTarget{1, std::nullopt}, PodRef{"trainer-0", "ml", "main"}},
        {DeviceTarget{2, std::nullopt}, PodRef{"by-index", "ml", "worker"}},
        {DeviceTarget{3, std::nullopt}, PodRef{"by-index", "ml", "worker"}},
        {DeviceTarget{4, std::nullopt}, PodRef{"a", "shared", "c"}, "0"},
        {DeviceTarget{4, std::nullopt}, PodRef{"b", "shared", "c"}, "1"},
    };
    EXPECT_EQ(uses->uses, want);
}

TEST_F(PodResourcesTest, MapsMigDevicesOnA100Mig) {
    const auto& n = a100_mig();
    ASSERT_EQ(n.gpus.size(), 4u);
    ASSERT_TRUE(fake.start());
    fake.add_pod("ml", "small", "c", "nvidia.com/mig-1g.10gb", {"MIG-4b69808b-66a3-1662-f86c-3b76eedd0860"});
    fake.add_pod("ml", "big", "c", "nvidia.com/mig-3g.40gb", {"1:0"});
    fake.add_pod("ml", "whole", "c", "nvidia.com/gpu", {n.gpus[2].uuid});
    // The single strategy advertises MIG devices as nvidia.com/gpu.
    fake.add_pod("ml", "single", "c", "nvidia.com/gpu", {"MIG-92710a87-5682-21ae-58be-98927cf50673"});

    exporter::PodResourcesClient client(opts("unix://" + socket));
    auto uses = client.list(n);
    ASSERT_TRUE(uses) << uses.error().message;
    const std::vector<DeviceUse> want{
        {DeviceTarget{0, 7u}, PodRef{"small", "ml", "c"}},
        {DeviceTarget{1, 2u}, PodRef{"big", "ml", "c"}},
        {DeviceTarget{1, 14u}, PodRef{"single", "ml", "c"}},
        {DeviceTarget{2, std::nullopt}, PodRef{"whole", "ml", "c"}},
    };
    EXPECT_EQ(uses->uses, want);
}

TEST_F(PodResourcesTest, RenamedResourcesCountWhenListed) {
    const auto& n = dgx_h100();
    ASSERT_EQ(n.gpus.size(), 8u);
    ASSERT_TRUE(fake.start());
    fake.add_pod("ml", "p", "c", "acme.com/gpu-slice", {"6::1"});
    {
        exporter::PodResourcesClient client(opts(socket));
        auto uses = client.list(n);
        ASSERT_TRUE(uses) << uses.error().message;
        EXPECT_TRUE(uses->uses.empty());
    }
    exporter::PodResourcesClient client(opts(socket, {"acme.com/gpu-slice"}));
    auto uses = client.list(n);
    ASSERT_TRUE(uses) << uses.error().message;
    ASSERT_EQ(uses->uses.size(), 1u);
    EXPECT_EQ(uses->uses[0].target, (DeviceTarget{6, std::nullopt}));
}

TEST_F(PodResourcesTest, UnknownIdsAreSkippedAndLoggedOnce) {
    const auto& n = dgx_h100();
    ASSERT_EQ(n.gpus.size(), 8u);
    ASSERT_TRUE(fake.start());
    fake.add_pod("ml", "p", "c", "nvidia.com/gpu", {"GPU-not-on-this-node", "0", "42"});
    exporter::PodResourcesClient client(opts(socket));
    testing::internal::CaptureStderr();
    for (int i = 0; i < 3; ++i) {
        auto uses = client.list(n);
        ASSERT_TRUE(uses) << uses.error().message;
        ASSERT_EQ(uses->uses.size(), 1u);
        EXPECT_EQ(uses->uses[0].target.gpu_index, 0u);
        EXPECT_EQ(uses->unknown_ids.count, 2u);
    }
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(count(err, "\"GPU-not-on-this-node\""), 1) << err;
    EXPECT_EQ(count(err, "\"42\""), 1) << err;
    EXPECT_THAT(err, HasSubstr("pod \"ml\"/\"p\", container \"c\""));
}

TEST_F(PodResourcesTest, EmptyListIsNotAnError) {
    ASSERT_TRUE(fake.start());
    exporter::PodResourcesClient client(opts(socket));
    auto uses = client.list(dgx_h100());
    ASSERT_TRUE(uses) << uses.error().message;
    EXPECT_TRUE(uses->uses.empty());
}

TEST_F(PodResourcesTest, MissingSocketNamesItLogsOnceAndRecovers) {
    const auto& n = dgx_h100();
    ASSERT_EQ(n.gpus.size(), 8u);
    exporter::PodResourcesClient client(opts(socket, {}, std::chrono::milliseconds(500)));
    testing::internal::CaptureStderr();
    for (int i = 0; i < 3; ++i) {
        auto uses = client.list(n);
        ASSERT_FALSE(uses);
        EXPECT_THAT(uses.error().message, HasSubstr(socket));
        EXPECT_TRUE(uses.error().code == Code::unavailable || uses.error().code == Code::timeout)
            << uses.error().message;
        EXPECT_TRUE(client.failure() == "unreachable" || client.failure() == "hung") << client.failure();
    }
    // The kubelet comes up: the same client (same channel) answers within a generous deadline.
    fake.add_pod("ml", "p", "c", "nvidia.com/gpu", {"1"});
    ASSERT_TRUE(fake.start());
    Result<exporter::PodResourcesMap> uses = fail(Code::internal, "not tried");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
        uses = client.list(n);
        if (uses) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const std::string err = testing::internal::GetCapturedStderr();
    RecordProperty("stderr", err);  // in --gtest_output=xml, to read the log lines
    ASSERT_TRUE(uses) << uses.error().message;
    ASSERT_EQ(uses->uses.size(), 1u);
    EXPECT_EQ(uses->uses[0].pod, (PodRef{"p", "ml", "c"}));
    // One warning for the failure (however many calls failed, as long as the failure stayed the
    // same kind), one line for the recovery.
    EXPECT_GE(count(err, "warn PodResources List on " + socket), 1) << err;
    EXPECT_LE(count(err, "warn PodResources List on " + socket), 2) << err;
    EXPECT_EQ(count(err, "answers again"), 1) << err;
}

TEST_F(PodResourcesTest, ASocketWithoutTheApiIsNotSupported) {
    // Something answers gRPC on the socket, but not PodResources (here: the CRI fake).
    test::FakeCri other(socket);
    ASSERT_TRUE(other.start());
    exporter::PodResourcesClient client(opts(socket));
    auto uses = client.list(dgx_h100());
    ASSERT_FALSE(uses);
    EXPECT_EQ(uses.error().code, Code::not_supported) << uses.error().message;
    EXPECT_THAT(uses.error().message, HasSubstr(socket));
    EXPECT_EQ(client.failure(), "unimplemented");
}

TEST_F(PodResourcesTest, EmptySocketIsAnError) {
    exporter::PodResourcesClient client(opts(""));
    auto uses = client.list(dgx_h100());
    ASSERT_FALSE(uses);
    EXPECT_EQ(uses.error().code, Code::invalid_argument);
}


// ---- map_pod_resources: the answer's bytes, walked once (issue #14) ----------------------------

v1::ListPodResourcesResponse pods_on(const std::string& id, int n, const std::string& ns = "ns") {
    v1::ListPodResourcesResponse r;
    for (int i = 0; i < n; ++i) {
        auto* p = r.add_pod_resources();
        p->set_name(fmt::format("pod-{:06}", i));
        p->set_namespace_(ns);
        auto* c = p->add_containers();
        c->set_name("main");
        auto* d = c->add_devices();
        d->set_resource_name("nvidia.com/gpu");
        d->add_device_ids(fmt::format("{}::{}", id, i));
    }
    return r;
}

exporter::PodResourcesOptions capped(unsigned cap) {
    exporter::PodResourcesOptions o;
    o.max_pods_per_gpu = cap;
    return o;
}

TEST(MapPodResources, KeepsTheFirstPodsPerGpuInNameOrderAndCountsTheRest) {
    const auto& n = dgx_h100();
    ASSERT_EQ(n.gpus.size(), 8u);
    // 1000 containers share GPU 0 (replicas), listed in reverse order; 3 hold GPU 1.
    v1::ListPodResourcesResponse r;
    for (int i = 999; i >= 0; --i) r.MergeFrom(pods_on(n.gpus[0].uuid, 1, fmt::format("team-{:04}", i)));
    r.MergeFrom(pods_on(n.gpus[1].uuid, 3));
    auto m = exporter::map_pod_resources(r.SerializeAsString(), n, capped(10));
    ASSERT_TRUE(m) << m.error().message;
    std::size_t on0 = 0, on1 = 0;
    for (const auto& u : m->uses) (u.target.gpu_index == 0 ? on0 : on1)++;
    EXPECT_EQ(on0, 10u);
    EXPECT_EQ(on1, 3u);
    EXPECT_EQ(m->uses.front().pod.namespace_name, "team-0000") << "the first in (pod, namespace, container) order";
    ASSERT_EQ(m->overflow.size(), 1u);
    EXPECT_EQ(m->overflow[0].gpu_index, 0u);
    EXPECT_EQ(m->overflow[0].attributed, 10u);
    EXPECT_EQ(m->overflow[0].left_out, 990u);
    ASSERT_EQ(m->overflow[0].examples.size(), 8u);
    EXPECT_EQ(m->overflow[0].examples[0].namespace_name, "team-0010");
    EXPECT_TRUE(std::ranges::is_sorted(m->uses));

    // The same pods listed in another order give the same answer.
    v1::ListPodResourcesResponse shuffled;
    shuffled.MergeFrom(pods_on(n.gpus[1].uuid, 3));
    for (int i = 0; i < 1000; ++i) shuffled.MergeFrom(pods_on(n.gpus[0].uuid, 1, fmt::format("team-{:04}", (i * 7919) % 1000)));
    auto again = exporter::map_pod_resources(shuffled.SerializeAsString(), n, capped(10));
    ASSERT_TRUE(again);
    EXPECT_EQ(again->uses, m->uses);
    EXPECT_EQ(again->overflow, m->overflow);
}

TEST(MapPodResources, MigInstancesCountTowardTheirGpu) {
    const auto& n = a100_mig();
    v1::ListPodResourcesResponse r;
    for (int i = 0; i < 5; ++i) {
        auto* p = r.add_pod_resources();
        p->set_name(fmt::format("p{}", i));
        p->set_namespace_("ml");
        auto* c = p->add_containers();
        c->set_name("c");
        auto* d = c->add_devices();
        d->set_resource_name("nvidia.com/mig-1g.10gb");
        d->add_device_ids(i % 2 ? "1:0" : "1:1");
    }
    auto m = exporter::map_pod_resources(r.SerializeAsString(), n, capped(3));
    ASSERT_TRUE(m) << m.error().message;
    EXPECT_EQ(m->uses.size(), 3u);
    ASSERT_EQ(m->overflow.size(), 1u);
    EXPECT_EQ(m->overflow[0].gpu_index, 1u);
    EXPECT_EQ(m->overflow[0].left_out, 2u);
}

TEST(MapPodResources, FieldsInAnyOrderUnknownFieldsAndGroupsAreSkipped) {
    const auto& n = dgx_h100();
    // Hand-made wire bytes: in a PodResources, containers (3) before name (1) and namespace (2),
    // plus packed cpu_ids (4), an unknown varint (99), a fixed64 (100) and a group (101).
    auto len = [](std::string_view field_key, const std::string& payload) {
        std::string out(field_key);
        out += static_cast<char>(payload.size());
        return out + payload;
    };
    const std::string device = len("\x0a", "nvidia.com/gpu") + len("\x12", "3");
    const std::string container = len("\x12", device) + len("\x0a", "main");
    std::string pod = len("\x1a", container) + len("\x22", std::string("\x01\x02", 2)) + len("\x0a", "p") +
                      std::string("\x98\x06\x05", 3) + std::string("\xa1\x06", 2) + std::string(8, '\0') +
                      std::string("\xab\x06\x08\x01\xac\x06", 6) + len("\x12", "ns");
    const std::string answer = len("\x0a", pod) + std::string("\x10\x07", 2);  // and an unknown top-level field
    auto m = exporter::map_pod_resources(answer, n, capped(64));
    ASSERT_TRUE(m) << m.error().message;
    ASSERT_EQ(m->uses.size(), 1u);
    EXPECT_EQ(m->uses[0], (DeviceUse{DeviceTarget{3, std::nullopt}, PodRef{"p", "ns", "main"}}));
}

TEST(MapPodResources, GarbageIsAnErrorNamingTheByte) {
    const auto& n = dgx_h100();
    const std::string good = pods_on(n.gpus[0].uuid, 2).SerializeAsString();
    for (const std::string& bad : {std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11),  // endless varint
                                   good.substr(0, good.size() - 3),                                  // cut short
                                   std::string("\x0a\x05\x0a\x09name", 8),  // inner length past its message
                                   std::string("\x08\x01", 2) + good,      // pod_resources (1) as a varint
                                   std::string("\x0f", 1),                 // wire type 7
                                   std::string("\x00", 1)}) {              // field number 0
        auto m = exporter::map_pod_resources(bad, n, capped(64));
        ASSERT_FALSE(m) << testing::PrintToString(bad);
        EXPECT_EQ(m.error().code, Code::parse);
        EXPECT_THAT(m.error().message, HasSubstr("byte ")) << m.error().message;
    }
}

TEST(MapPodResources, NamesThatCannotBeLabelValuesAreSkipped) {
    const auto& n = dgx_h100();
    v1::ListPodResourcesResponse r;
    auto add = [&](const std::string& pod, const std::string& ns, const std::string& container) {
        auto* p = r.add_pod_resources();
        p->set_name(pod);
        p->set_namespace_(ns);
        auto* c = p->add_containers();
        c->set_name(container);
        auto* d = c->add_devices();
        d->set_resource_name("nvidia.com/gpu");
        d->add_device_ids("0");
    };
    add("good", "ns", "c");
    add("bad\xff", "ns", "c");          // not UTF-8
    add("line\nbreak", "ns", "c");      // a control character
    add(std::string(300, 'x'), "ns", "c");  // longer than any Kubernetes name
    add("nons", "", "c");               // no namespace
    add("überpod", "ns", "c");          // UTF-8 is fine
    auto m = exporter::map_pod_resources(r.SerializeAsString(), n, capped(64));
    ASSERT_TRUE(m) << m.error().message;
    ASSERT_EQ(m->uses.size(), 2u);
    EXPECT_EQ(m->uses[0].pod.pod, "good");
    EXPECT_EQ(m->uses[1].pod.pod, "überpod");
    EXPECT_EQ(m->bad_names.count, 4u);
    for (const auto& e : m->bad_names.examples) EXPECT_EQ(e.find('\n'), std::string::npos) << "escaped for the log: " << e;
}

// ---- The client: failures by kind, logs once per change -----------------------------------------

TEST_F(PodResourcesTest, GarbageHungAndOverSizeAnswersAreNamed) {
    const auto& n = dgx_h100();
    ASSERT_TRUE(fake.start());
    fake.add_pod("ml", "p", "c", "nvidia.com/gpu", {"1"});
    exporter::PodResourcesClient client(opts(socket, {}, std::chrono::milliseconds(500)));
    ASSERT_TRUE(client.list(n));

    fake.set_raw(std::string("\x0a\x7f\x01", 3));  // a PodResources of 127 bytes, 1 byte given
    auto r = client.list(n);
    ASSERT_FALSE(r);
    EXPECT_EQ(client.failure(), "garbage");
    EXPECT_THAT(r.error().message, HasSubstr("garbage"));
    EXPECT_THAT(r.error().message, HasSubstr(socket));

    fake.set_raw(std::string((16u << 20) + 64, '\0'));
    r = client.list(n);
    ASSERT_FALSE(r);
    EXPECT_EQ(client.failure(), "over-size") << r.error().message;
    EXPECT_THAT(r.error().message, HasSubstr("16 MiB"));

    fake.reset();
    fake.set_hang(true);
    r = client.list(n);
    ASSERT_FALSE(r);
    EXPECT_EQ(client.failure(), "hung") << r.error().message;
    EXPECT_EQ(r.error().code, Code::timeout);

    fake.reset();
    r = client.list(n);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(client.failure(), "");
    EXPECT_EQ(r->uses.size(), 1u);
}

TEST_F(PodResourcesTest, AnAnswerUpTo16MiBIsAccepted) {
    const auto& n = dgx_h100();
    ASSERT_TRUE(fake.start());
    // ~12 MiB: 100k pods with long names on one GPU.
    v1::ListPodResourcesResponse r = pods_on(n.gpus[0].uuid, 100000, std::string(40, 'n'));
    const std::string bytes = r.SerializeAsString();
    ASSERT_GT(bytes.size(), 8u << 20);
    ASSERT_LT(bytes.size(), 16u << 20);
    fake.set(std::move(r));
    exporter::PodResourcesClient client(opts(socket, {}, std::chrono::milliseconds(10000)));
    testing::internal::CaptureStderr();
    auto m = client.list(n);
    const std::string err = testing::internal::GetCapturedStderr();
    ASSERT_TRUE(m) << m.error().message;
    EXPECT_EQ(m->uses.size(), 64u) << "the default per-GPU limit";
    ASSERT_EQ(m->overflow.size(), 1u);
    EXPECT_EQ(m->overflow[0].left_out, 100000u - 64u);
    EXPECT_EQ(count(err, "\n"), 1) << "one line names the GPU over the limit:\n" << err;
    EXPECT_THAT(err, HasSubstr("GPU 0: 99936 left out"));
    EXPECT_THAT(err, HasSubstr("pod-000064"));
}

TEST_F(PodResourcesTest, ThousandsOfUnknownIdsAreOneLineAndOnlyOncePerChange) {
    const auto& n = dgx_h100();
    ASSERT_TRUE(fake.start());
    v1::ListPodResourcesResponse r;
    for (int i = 0; i < 5000; ++i) r.MergeFrom(pods_on(fmt::format("GPU-unknown-{}", i), 1));
    fake.set(r);
    exporter::PodResourcesClient client(opts(socket, {}, std::chrono::milliseconds(10000)));
    testing::internal::CaptureStderr();
    for (int pass = 0; pass < 3; ++pass) {
        auto m = client.list(n);
        ASSERT_TRUE(m) << m.error().message;
        EXPECT_EQ(m->unknown_ids.count, 5000u);
    }
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(count(err, "\n"), 1) << err.substr(0, 2000);
    EXPECT_THAT(err, HasSubstr("5000 device IDs that match no GPU"));
    EXPECT_THAT(err, HasSubstr("and 4995 more"));
    EXPECT_LT(err.size(), 2000u);

    // The set changes (one more unknown ID): one more line. It clears: one info line.
    r.MergeFrom(pods_on("GPU-another", 1));
    fake.set(r);
    testing::internal::CaptureStderr();
    ASSERT_TRUE(client.list(n));
    ASSERT_TRUE(client.list(n));
    fake.set(pods_on(n.gpus[0].uuid, 1));
    ASSERT_TRUE(client.list(n));
    ASSERT_TRUE(client.list(n));
    err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(count(err, "\n"), 2) << err;
    EXPECT_THAT(err, HasSubstr("5001 device IDs"));
    EXPECT_THAT(err, HasSubstr("no device IDs that match no GPU"));
}

}  // namespace
