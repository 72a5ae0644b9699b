// CriClient against the fake CRI runtime (tests/support/fake_cri.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include <grpcpp/support/status.h>

#include "exporter/attribution.h"
#include "support/fake_cri.h"
#include "support/process.h"

using namespace kgpu;
using exporter::PodRef;
using testing::HasSubstr;

namespace {

const std::string kA(64, 'a');
const std::string kB(64, 'b');
const std::string kC(64, 'c');

class CriTest : public testing::Test {
protected:
    test::TempDir dir;
    std::string socket = dir.path() + "/containerd.sock";
    test::FakeCri fake{socket};
};

TEST_F(CriTest, NamesContainersFromKubeletLabels) {
    ASSERT_TRUE(fake.start());
    fake.add_container(kA, "ml", "trainer-0", "main");
    fake.add_container(kB, "kube-system", "dcgm", "exporter");
    fake.add_unlabelled_container(kC);  // not made by the kubelet: left out
    for (const std::string& endpoint : {"unix://" + socket, socket}) {
        exporter::CriClient cri(endpoint);
        auto list = cri.list_containers();
        ASSERT_TRUE(list) << list.error().message;
        EXPECT_EQ(list->size(), 2u);
        EXPECT_EQ(list->at(kA), (PodRef{"trainer-0", "ml", "main"}));
        EXPECT_EQ(list->at(kB), (PodRef{"dcgm", "kube-system", "exporter"}));
        EXPECT_FALSE(list->contains(kC));
    }
    EXPECT_EQ(fake.calls(), 2);
}

TEST_F(CriTest, ContainerNameFallsBackToMetadata) {
    ASSERT_TRUE(fake.start());
    runtime::v1::ListContainersResponse resp;
    auto* c = resp.add_containers();
    c->set_id(kA);
    c->mutable_metadata()->set_name("from-metadata");
    (*c->mutable_labels())["io.kubernetes.pod.name"] = "p";
    (*c->mutable_labels())["io.kubernetes.pod.namespace"] = "ns";
    auto* no_ns = resp.add_containers();  // a pod name without a namespace is not the kubelet's
    no_ns->set_id(kB);
    (*no_ns->mutable_labels())["io.kubernetes.pod.name"] = "p";
    fake.set(resp);
    exporter::CriClient cri(socket);
    auto list = cri.list_containers();
    ASSERT_TRUE(list) << list.error().message;
    ASSERT_EQ(list->size(), 1u);
    EXPECT_EQ(list->at(kA), (PodRef{"p", "ns", "from-metadata"}));
}

TEST_F(CriTest, MissingSocketIsUnavailableAndNamesIt) {
    exporter::CriClient cri("unix://" + socket, std::chrono::milliseconds(500));
    auto list = cri.list_containers();
    ASSERT_FALSE(list);
    EXPECT_TRUE(list.error().code == Code::unavailable || list.error().code == Code::timeout) << list.error().message;
    EXPECT_THAT(list.error().message, HasSubstr(socket));
}

TEST_F(CriTest, RuntimeErrorsBecomeErrors) {
    ASSERT_TRUE(fake.start());
    fake.fail_with(static_cast<int>(grpc::StatusCode::UNIMPLEMENTED));
    exporter::CriClient cri(socket);
    auto list = cri.list_containers();
    ASSERT_FALSE(list);
    EXPECT_EQ(list.error().code, Code::not_supported);
    EXPECT_THAT(list.error().message, HasSubstr("runtime.v1"));
    fake.fail_with(static_cast<int>(grpc::StatusCode::INTERNAL));
    list = cri.list_containers();
    ASSERT_FALSE(list);
    EXPECT_EQ(list.error().code, Code::unavailable);
    EXPECT_THAT(list.error().message, HasSubstr("fake CRI failure"));
    fake.fail_with(0);
    list = cri.list_containers();
    EXPECT_TRUE(list) << list.error().message;
    EXPECT_EQ(fake.calls(), 3);
}

TEST_F(CriTest, NonUnixEndpointsAreRejected) {
    for (const char* endpoint : {"tcp://127.0.0.1:1234", "", "unix://"}) {
        exporter::CriClient cri(endpoint);
        auto list = cri.list_containers();
        ASSERT_FALSE(list) << endpoint;
        EXPECT_EQ(list.error().code, Code::invalid_argument) << endpoint;
        EXPECT_THAT(list.error().message, HasSubstr("unix://")) << endpoint;
    }
}

// A manual check against a real runtime: KGPU_TEST_CRI_ENDPOINT=unix:///run/containerd/containerd.sock
// (or a containerd started by hand on a temp socket). Skipped when the variable is not set.
}  // namespace
