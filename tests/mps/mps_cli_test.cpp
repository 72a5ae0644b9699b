// `kgpu mps-control-daemon` and `kgpu mps-control-daemon mount-shm` as the DaemonSet runs them,
// against the simulator and its stand-in control binary.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "support/process.h"
#include "support/expect.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using kgpu::test::ChildProcess;
using kgpu::test::run_process;
using kgpu::test::TempDir;
using kgpu::test::eventually;
using ::testing::HasSubstr;

const std::string kSim = KGPU_SIM_LIBRARY;
const std::string kNode = std::string(KGPU_SOURCE_DIR) + "/sim/nodes/dgx-h100.yaml";

// mount(2) in a private mount namespace (unshare -m), so the test needs root but changes nothing
// outside; skipped where that is not allowed.
TEST(MpsCli, MountShmMountsATmpfsUnderTheRootAndReplacesAnOldOne) {
    if (run_process({"/usr/bin/unshare", "-m", "--propagation", "private", "/bin/true"}).exit_code != 0)
        GTEST_SKIP() << "no private mount namespace here (needs root and unshare)";
    TempDir tmp;
    const std::string root = tmp.path() + "/mps";
    const std::string script = std::string(KGPU_BINARY) + " mps-control-daemon mount-shm && " + KGPU_BINARY +
                               " mps-control-daemon mount-shm && grep ' " + root + "/shm ' /proc/self/mountinfo";
    auto r = run_process({"/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c", script},
                         {{"MPS_ROOT", root}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // Mounted once (the second run unmounted the first), as a tmpfs with NVIDIA's options.
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_THAT(r.out, HasSubstr(" " + root + "/shm rw,nosuid,nodev,noexec,relatime "));
    EXPECT_THAT(r.out, HasSubstr(" - tmpfs shm "));
    EXPECT_THAT(r.err, HasSubstr("unmounted the previous mount"));
    EXPECT_TRUE(fs::is_directory(root + "/shm"));
}

TEST(MpsCli, WithoutMpsInTheConfigItWaitsAndStopsCleanly) {
    TempDir tmp;
    const std::string root = tmp.path() + "/mps";
    // No control binary anywhere: it is only needed when something is shared with MPS.
    ChildProcess d({KGPU_BINARY, "mps-control-daemon", "--nvml-library", kSim, "--mps-root", root,
                    "--nvidia-driver-root", tmp.path()},
                   {{"KGPU_SIM_NODE", kNode}});
    ASSERT_TRUE(eventually([&] { return fs::exists(root + "/.ready"); })) << d.err();
    EXPECT_TRUE(d.running());
    EXPECT_THAT(d.err(), HasSubstr("shares nothing with MPS"));
    d.signal(SIGTERM);
    EXPECT_EQ(d.wait(10000), 0) << d.err();
    EXPECT_FALSE(fs::exists(root + "/.ready"));
}

TEST(MpsCli, BadFlagsAndAMissingDriverSayWhat) {
    auto r = run_process({KGPU_BINARY, "mps-control-daemon", "--nvml-library", kSim, "--mig-strategy", "some"},
                         {{"KGPU_SIM_NODE", kNode}});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("--mig-strategy"));
    TempDir tmp;
    r = run_process({KGPU_BINARY, "mps-control-daemon", "--config-file", tmp.path() + "/none.yaml", "--nvml-library",
                     kSim},
                    {{"KGPU_SIM_NODE", kNode}});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("none.yaml"));
    r = run_process({KGPU_BINARY, "mps-control-daemon", "--nvml-library", tmp.path() + "/libnvidia-ml.so.1"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("libnvidia-ml.so.1"));
}

}  // namespace
