// CriClient against a real container runtime: Debian's containerd (scripts/setup installs it),
// started by the test as root with its own root, state dir and socket in a temp dir, so our
// hand-written runtime.v1 proto is checked on the wire against the real CRI plugin.
// KGPU_TEST_CRI_ENDPOINT=unix:///path points the test at a runtime that is already running
// instead (one with pods, to check the kubelet labels too).
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include "exporter/attribution.h"
#include "support/process.h"

using namespace kgpu;

namespace {

std::string find_containerd() {
    for (const char* dir : {"/usr/bin", "/usr/local/bin", "/usr/sbin"}) {
        std::string p = std::string(dir) + "/containerd";
        if (::access(p.c_str(), X_OK) == 0) return p;
    }
    return {};
}

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
    const std::string containerd = find_containerd();
    if (containerd.empty()) GTEST_SKIP() << "no containerd binary (scripts/setup installs Debian's)";
    if (::geteuid() != 0) GTEST_SKIP() << "containerd needs root; set KGPU_TEST_CRI_ENDPOINT to use a running one";

    test::TempDir dir;
    const std::string socket = dir.path() + "/containerd.sock";
    // restrict_oom_score_adj: this VM does not let a process lower its OOM score (DESIGN.md facts).
    const std::string config = dir.write("config.toml", "version = 2\n"
                                                        "root = \"" + dir.path() + "/root\"\n"
                                                        "state = \"" + dir.path() + "/state\"\n"
                                                        "[grpc]\n  address = \"" + socket + "\"\n"
                                                        "[ttrpc]\n  address = \"" + socket + ".ttrpc\"\n"
                                                        "[plugins.\"io.containerd.grpc.v1.cri\"]\n"
                                                        "  restrict_oom_score_adj = true\n"
                                                        "  disable_apparmor = true\n");
    auto runtime = std::make_unique<test::ChildProcess>(std::vector<std::string>{containerd, "--config", config});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!std::filesystem::exists(socket) && std::chrono::steady_clock::now() < deadline && runtime->running())
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(std::filesystem::exists(socket)) << "containerd did not create " << socket << ":\n" << runtime->err();

    // The socket appears before the CRI service is registered: retry briefly on errors.
    exporter::CriClient cri("unix://" + socket, std::chrono::milliseconds(5000));
    Result<std::unordered_map<std::string, exporter::PodRef>> list = fail(Code::unavailable, "not asked yet");
    while (std::chrono::steady_clock::now() < deadline) {
        list = cri.list_containers();
        if (list) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(list) << list.error().message << "\ncontainerd log:\n" << runtime->err();
    EXPECT_TRUE(list->empty());  // a fresh runtime runs no containers
    expect_kubelet_shaped(*list);

    runtime->signal(SIGTERM);
    EXPECT_EQ(runtime->wait(20000), 0) << runtime->err();
}

}  // namespace
