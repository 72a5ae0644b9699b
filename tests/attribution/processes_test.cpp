// ProcessAttributor over a fake proc root (a temp dir with <pid>/cgroup files) and the fake CRI
// runtime: names, the cache (CRI call counts), pruning, and the failure paths.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include "common/files.h"
#include "exporter/attribution.h"
#include "support/fake_cri.h"
#include "support/process.h"
#include "support/expect.h"

using namespace kgpu;
using exporter::PodRef;
using testing::HasSubstr;

namespace {

using kgpu::test::count;

std::string cid(char c) { return std::string(64, c); }
const std::string kPodUid = "1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9";

class ProcessesTest : public testing::Test {
protected:
    test::TempDir dir;
    std::string proc = dir.path() + "/proc";
    std::string socket = dir.path() + "/cri.sock";
    test::FakeCri cri{socket};

    void SetUp() override { std::filesystem::create_directories(proc); }

    // A process in container `id` (cgroup v2, systemd driver).
    void pod_process(unsigned pid, const std::string& id) {
        std::string uid = kPodUid;
        std::ranges::replace(uid, '-', '_');
        dir.write("proc/" + std::to_string(pid) + "/cgroup",
                  "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid + ".slice/cri-containerd-" +
                      id + ".scope\n");
    }
    // A process in container `id` (cgroup v1, cgroupfs driver).
    void pod_process_v1(unsigned pid, const std::string& id) {
        const std::string path = "/kubepods/besteffort/pod" + kPodUid + "/" + id;
        dir.write("proc/" + std::to_string(pid) + "/cgroup", "11:memory:" + path + "\n1:name=systemd:" + path + "\n");
    }
    void host_process(unsigned pid) {
        dir.write("proc/" + std::to_string(pid) + "/cgroup", "0::/system.slice/ollama.service\n");
    }
    void gone(unsigned pid) { std::filesystem::remove_all(proc + "/" + std::to_string(pid)); }
};

using Map = std::unordered_map<unsigned, PodRef>;

TEST_F(ProcessesTest, NamesPodProcessesAndCachesTheRuntimeAnswer) {
    ASSERT_TRUE(cri.start());
    cri.add_container(cid('a'), "ml", "trainer-0", "main");
    cri.add_container(cid('b'), "ml", "notebook", "jupyter");
    pod_process(100, cid('a'));
    pod_process(101, cid('a'));   // two processes of one container
    pod_process_v1(200, cid('b'));
    host_process(300);            // a GPU process outside Kubernetes
    const std::vector<unsigned> pids{100, 101, 200, 300, 400 /* no such process */};

    exporter::ProcessAttributor attr(proc, "unix://" + socket);
    const Map want{{100, {"trainer-0", "ml", "main"}}, {101, {"trainer-0", "ml", "main"}}, {200, {"notebook", "ml", "jupyter"}}};
    EXPECT_EQ(attr.attribute(pids), want);
    EXPECT_EQ(cri.calls(), 1);
    // Same containers: answered from the cache.
    for (int i = 0; i < 5; ++i) EXPECT_EQ(attr.attribute(pids), want);
    EXPECT_EQ(cri.calls(), 1);
    // A new process in a known container: still no call.
    pod_process(102, cid('a'));
    auto got = attr.attribute(std::vector<unsigned>{100, 102, 200});
    EXPECT_EQ(got.at(102), (PodRef{"trainer-0", "ml", "main"}));
    EXPECT_EQ(cri.calls(), 1);
}

TEST_F(ProcessesTest, NewContainersCostOneCallPerAttribute) {
    ASSERT_TRUE(cri.start());
    cri.add_container(cid('a'), "ns", "p1", "c");
    pod_process(1, cid('a'));
    exporter::ProcessAttributor attr(proc, socket);
    EXPECT_EQ(attr.attribute(std::vector<unsigned>{1}).size(), 1u);
    EXPECT_EQ(cri.calls(), 1);
    // Three new containers at once: one call names them all.
    cri.add_container(cid('b'), "ns", "p2", "c");
    cri.add_container(cid('c'), "ns", "p3", "c");
    cri.add_container(cid('d'), "ns", "p4", "c");
    pod_process(2, cid('b'));
    pod_process(3, cid('c'));
    pod_process(4, cid('d'));
    auto got = attr.attribute(std::vector<unsigned>{1, 2, 3, 4});
    EXPECT_EQ(cri.calls(), 2);
    ASSERT_EQ(got.size(), 4u);
    EXPECT_EQ(got.at(4).pod, "p4");
}

TEST_F(ProcessesTest, NoProcessesNoCall) {
    ASSERT_TRUE(cri.start());
    exporter::ProcessAttributor attr(proc, socket);
    EXPECT_TRUE(attr.attribute({}).empty());
    host_process(5);
    EXPECT_TRUE(attr.attribute(std::vector<unsigned>{5, 6}).empty());
    EXPECT_EQ(cri.calls(), 0);
}

TEST_F(ProcessesTest, ContainersTheRuntimeDoesNotListAreNotAskedAgainAtOnce) {
    ASSERT_TRUE(cri.start());
    cri.add_container(cid('a'), "ns", "p", "c");
    pod_process(1, cid('a'));
    pod_process(2, cid('e'));  // in a pod's cgroup, but the runtime does not know it
    exporter::ProcessAttributor attr(proc, socket);
    for (int i = 0; i < 4; ++i) {
        auto got = attr.attribute(std::vector<unsigned>{1, 2});
        EXPECT_EQ(got.size(), 1u);
        EXPECT_TRUE(got.contains(1));
    }
    EXPECT_EQ(cri.calls(), 1);
}

TEST_F(ProcessesTest, ContainersNoLongerSeenArePruned) {
    ASSERT_TRUE(cri.start());
    cri.add_container(cid('a'), "ns", "old-name", "c");
    pod_process(1, cid('a'));
    exporter::ProcessAttributor attr(proc, socket);
    EXPECT_EQ(attr.attribute(std::vector<unsigned>{1}).at(1).pod, "old-name");
    // The process goes away: its container is forgotten.
    gone(1);
    EXPECT_TRUE(attr.attribute(std::vector<unsigned>{1}).empty());
    EXPECT_EQ(cri.calls(), 1);
    // The ID shows up again (here with another name): asked afresh, not answered from the cache.
    runtime::v1::ListContainersResponse none;
    cri.set(none);
    cri.add_container(cid('a'), "ns", "new-name", "c");
    pod_process(1, cid('a'));
    EXPECT_EQ(attr.attribute(std::vector<unsigned>{1}).at(1).pod, "new-name");
    EXPECT_EQ(cri.calls(), 2);
}

TEST_F(ProcessesTest, MissingRuntimeSocketLogsOnceAndRecovers) {
    pod_process(1, cid('a'));
    exporter::ProcessAttributor attr(proc, "unix://" + socket);
    testing::internal::CaptureStderr();
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(attr.attribute(std::vector<unsigned>{1}).empty());
    // The runtime comes up: the next calls name the process (the channel reconnects within a
    // generous deadline).
    cri.add_container(cid('a'), "ns", "p", "c");
    ASSERT_TRUE(cri.start());
    Map got;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (got.empty() && std::chrono::steady_clock::now() < deadline) {
        got = attr.attribute(std::vector<unsigned>{1});
        if (got.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const std::string err = testing::internal::GetCapturedStderr();
    RecordProperty("stderr", err);  // in --gtest_output=xml, to read the log lines
    ASSERT_EQ(got.size(), 1u) << err;
    EXPECT_EQ(got.at(1).pod, "p");
    const int warnings = count(err, "warn CRI ListContainers on " + socket);
    EXPECT_GE(warnings, 1) << err;
    EXPECT_LE(warnings, 2) << err;  // the gRPC message may change once while reconnecting
    EXPECT_EQ(count(err, "answers again"), 1) << err;
}

TEST_F(ProcessesTest, FailingRuntimeStillAnswersFromTheCache) {
    ASSERT_TRUE(cri.start());
    cri.add_container(cid('a'), "ns", "known", "c");
    pod_process(1, cid('a'));
    exporter::ProcessAttributor attr(proc, socket);
    EXPECT_EQ(attr.attribute(std::vector<unsigned>{1}).size(), 1u);
    cri.fail_with(static_cast<int>(grpc::StatusCode::INTERNAL));
    cri.add_container(cid('b'), "ns", "new", "c");
    pod_process(2, cid('b'));
    testing::internal::CaptureStderr();
    for (int i = 0; i < 3; ++i) {
        auto got = attr.attribute(std::vector<unsigned>{1, 2});
        ASSERT_EQ(got.size(), 1u);
        EXPECT_EQ(got.at(1).pod, "known");
    }
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(count(err, "warn CRI ListContainers on " + socket), 1) << err;
    EXPECT_EQ(cri.calls(), 4);  // one per attribute() while a container is unknown
    cri.fail_with(0);
    auto got = attr.attribute(std::vector<unsigned>{1, 2});
    EXPECT_EQ(got.size(), 2u);
    EXPECT_EQ(got.at(2).pod, "new");
}

TEST_F(ProcessesTest, VanishedProcessesAreLeftOutQuietly) {
    ASSERT_TRUE(cri.start());
    cri.add_container(cid('a'), "ns", "p", "c");
    pod_process(1, cid('a'));
    // A process directory without a cgroup file (exited between readdir and read) and one that
    // is gone entirely.
    std::filesystem::create_directories(proc + "/2");
    exporter::ProcessAttributor attr(proc, socket);
    testing::internal::CaptureStderr();
    auto got = attr.attribute(std::vector<unsigned>{1, 2, 3});
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(got.size(), 1u);
    EXPECT_THAT(err, testing::Not(HasSubstr("warn"))) << err;
}

TEST_F(ProcessesTest, MissingProcRootLogsOnce) {
    ASSERT_TRUE(cri.start());
    exporter::ProcessAttributor attr(dir.path() + "/no-such-proc", socket);
    testing::internal::CaptureStderr();
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(attr.attribute(std::vector<unsigned>{1, 2}).empty());
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(count(err, "warn process attribution: cannot read process cgroups under " + dir.path() + "/no-such-proc"), 1)
        << err;
    EXPECT_EQ(cri.calls(), 0);
}

TEST_F(ProcessesTest, EveryPidMissingTwiceWarnsAboutTheProcRoot) {
    // A proc root of another PID namespace (the container's own /proc without hostPID): it
    // exists, but none of NVML's host PIDs is in it.
    ASSERT_TRUE(cri.start());
    exporter::ProcessAttributor attr(proc, socket);
    const std::string warning = "warn process attribution: none of the GPU processes NVML lists exists under " + proc;
    testing::internal::CaptureStderr();
    // Once is a process that just exited: quiet.
    EXPECT_TRUE(attr.attribute(std::vector<unsigned>{4001}).empty());
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(count(err, warning), 0) << err;
    // One found in between resets the count.
    host_process(4002);
    EXPECT_TRUE(attr.attribute(std::vector<unsigned>{4001, 4002}).empty());
    gone(4002);
    testing::internal::CaptureStderr();
    EXPECT_TRUE(attr.attribute(std::vector<unsigned>{4001, 4002}).empty());
    err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(count(err, warning), 0) << err;
    // Twice in a row: one warning naming the fixes, not one per call.
    testing::internal::CaptureStderr();
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(attr.attribute(std::vector<unsigned>{4001, 4003 + static_cast<unsigned>(i)}).empty());
    err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(count(err, warning), 1) << err;
    EXPECT_THAT(err, HasSubstr("--proc-root"));
    EXPECT_THAT(err, HasSubstr("hostPID: true"));
    // A PID found again: the recovery shows once.
    host_process(4100);
    testing::internal::CaptureStderr();
    attr.attribute(std::vector<unsigned>{4100});
    attr.attribute(std::vector<unsigned>{4100});
    err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(count(err, "readable again"), 1) << err;
    EXPECT_EQ(cri.calls(), 0);
}

TEST_F(ProcessesTest, CgroupFilesAreReadWithABound) {
    // A FIFO must not block the collector, and a huge file must not be read whole.
    ASSERT_TRUE(cri.start());
    cri.add_container(cid('a'), "ns", "p", "c");
    pod_process(1, cid('a'));
    std::filesystem::create_directories(proc + "/2");
    ASSERT_EQ(::mkfifo((proc + "/2/cgroup").c_str(), 0600), 0);
    std::string line = "0::/kubepods.slice/kubepods-pod" + std::string(kPodUid) + ".slice/cri-containerd-" + cid('a') + ".scope\n";
    std::string big;
    while (big.size() <= 128 * 1024) big += line;
    dir.write("proc/3/cgroup", big);
    exporter::ProcessAttributor attr(proc, socket);
    testing::internal::CaptureStderr();
    auto got = attr.attribute(std::vector<unsigned>{1, 2, 3});
    const std::string err = testing::internal::GetCapturedStderr();
    ASSERT_EQ(got.size(), 1u) << err;
    EXPECT_TRUE(got.contains(1));
    EXPECT_EQ(count(err, "warn process attribution: cannot read process cgroups under " + proc), 1) << err;
}

TEST_F(ProcessesTest, RealProcOutsideAPod) {
    // This test process, read through the real /proc: outside a pod nothing is named and the
    // runtime is not asked.
    auto text = files::read("/proc/self/cgroup");
    ASSERT_TRUE(text) << text.error().message;
    if (exporter::parse_cgroup(*text)) GTEST_SKIP() << "running inside a Kubernetes pod";
    ASSERT_TRUE(cri.start());
    exporter::ProcessAttributor attr("/proc", socket);
    const unsigned self = static_cast<unsigned>(::getpid());
    EXPECT_TRUE(attr.attribute(std::vector<unsigned>{self, 1}).empty());
    EXPECT_EQ(cri.calls(), 0);
}

}  // namespace
