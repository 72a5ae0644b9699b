// CriClient against a real container runtime: Debian's containerd (scripts/setup --all installs it),
// started by the test as root with its own root, state dir and socket in a temp dir, so our
// hand-written runtime.v1 proto is checked on the wire against the real CRI plugin.
// KGPU_TEST_CRI_ENDPOINT=unix:///path points the test at a runtime that is already running
// instead (one with pods, to check the kubelet labels too).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "exporter/attribution.h"
#include "support/containerd.h"
#include "support/process.h"

using namespace kgpu;

namespace {

void expect_kubelet_shaped(const std::unordered_map<std::string, exporter::PodRef>& list) {
    for (const auto& [id, ref] : list) {
        EXPECT_EQ(id.size(), 64u) << id;
        EXPECT_FALSE(ref.pod.empty()) << id;
        EXPECT_FALSE(ref.namespace_name.empty()) << id;
    }
}

TEST(CriRealRuntime, ListContainersAnswers) {
    if (const char* endpoint = std::getenv("KGPU_TEST_CRI_ENDPOINT"); endpoint && *endpoint) {
        exporter::CriClient cri(endpoint, std::chrono::milliseconds(5000));
        auto list = cri.list_containers();
        ASSERT_TRUE(list) << list.error().message;
        expect_kubelet_shaped(*list);
        return;
    }
    if (auto why = test::TestContainerd::unavailable_reason(); !why.empty())
        GTEST_SKIP() << why << "; set KGPU_TEST_CRI_ENDPOINT to use a running runtime";

    test::TempDir dir;
    test::TestContainerd runtime(dir.path());
    ASSERT_TRUE(runtime.started()) << runtime.error();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);

    // The socket appears before the CRI service is registered: retry briefly on errors.
    exporter::CriClient cri(runtime.endpoint(), std::chrono::milliseconds(5000));
    Result<std::unordered_map<std::string, exporter::PodRef>> list = fail(Code::unavailable, "not asked yet");
    while (std::chrono::steady_clock::now() < deadline) {
        list = cri.list_containers();
        if (list) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(list) << list.error().message << "\ncontainerd log:\n" << runtime.process().err();
    EXPECT_TRUE(list->empty());  // a fresh runtime runs no containers
    expect_kubelet_shaped(*list);

    EXPECT_EQ(runtime.stop(), 0) << runtime.process().err();
}

}  // namespace
