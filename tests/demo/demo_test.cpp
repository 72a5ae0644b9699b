// `kgpu demo` end to end: the built binary run from an unrelated working directory, finding the
// simulator and the fixture next to itself; its narration carries the evidence of every step; it
// exits 0 and leaves no process and no work dir behind, also when interrupted.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "support/process.h"

using kgpu::test::ChildProcess;
using kgpu::test::run_process;
using kgpu::test::TempDir;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

namespace {

// Runs `kgpu <args>` with `cwd` as working directory and TMPDIR=`tmpdir`.
kgpu::test::RunResult run_in(const std::string& cwd, const std::string& tmpdir, const std::string& args) {
    return run_process({"/bin/sh", "-c", "cd '" + cwd + "' && exec '" KGPU_BINARY "' " + args}, {{"TMPDIR", tmpdir}});
}

std::vector<int> printed_pids(const std::string& out) {
    std::vector<int> pids;
    static const std::regex re(R"(: pid ([0-9]+))");
    for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it)
        pids.push_back(std::stoi((*it)[1]));
    return pids;
}

std::string printed_work_dir(const std::string& out) {
    static const std::regex re(R"(work dir: (\S+))");
    std::smatch m;
    return std::regex_search(out, m, re) ? m[1].str() : std::string{};
}

// Processes whose command line mentions `needle` (the demo's children all name the work dir).
std::vector<std::string> processes_mentioning(const std::string& needle) {
    std::vector<std::string> found;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
        std::ifstream f(e.path() / "cmdline");
        std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        std::replace(cmd.begin(), cmd.end(), '\0', ' ');
        if (cmd.find(needle) != std::string::npos) found.push_back(e.path().filename().string() + ": " + cmd);
    }
    return found;
}

bool alive(int pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

void expect_nothing_left(const std::string& out) {
    auto pids = printed_pids(out);
    EXPECT_EQ(pids.size(), 2u) << out;  // device plugin and exporter
    for (int pid : pids) EXPECT_FALSE(alive(pid)) << "pid " << pid << " still exists";
    std::string work = printed_work_dir(out);
    ASSERT_FALSE(work.empty()) << out;
    EXPECT_FALSE(fs::exists(work)) << work;
    EXPECT_THAT(processes_mentioning(work), ::testing::IsEmpty());
}

// The stand-in MPS daemon exits after `quit` on its own time (and is nobody's child here).
bool eventually_gone(int pid) {
    for (int i = 0; i < 250 && alive(pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!alive(pid)) return true;
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return stat.find(") Z ") != std::string::npos;  // a zombie: gone, its parent not reaped yet
}

size_t pos(const std::string& out, const std::string& what, size_t from = 0) {
    auto p = out.find(what, from);
    EXPECT_NE(p, std::string::npos) << "missing: " << what << "\n" << out;
    return p == std::string::npos ? out.size() : p;
}

TEST(Demo, RunsTheWholeChainFromAnotherDirectory) {
    TempDir cwd, tmp;
    auto r = run_in(cwd.path(), tmp.path(), "demo");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const std::string& o = r.out;
    // 1: registration and 8 allocatable.
    size_t p1 = pos(o, "[1/5]");
    pos(o, "Register: resource nvidia.com/gpu, endpoint kgpu-nvidia-com-gpu.sock, API v1beta1", p1);
    pos(o, "get_preferred_allocation_available = true", p1);
    size_t cap = pos(o, "capacity nvidia.com/gpu: 8, allocatable nvidia.com/gpu: 8", p1);
    // 2: an NVLink pair, and NVIDIA_VISIBLE_DEVICES naming both.
    size_t p2 = pos(o, "[2/5]", cap);
    pos(o, "GetPreferredAllocation(available: 8 devices, size 2) -> GPU-", p2);
    pos(o, "NV18 (18 bonded NVLinks): an NVLink pair", p2);
    static const std::regex vis(R"(env NVIDIA_VISIBLE_DEVICES=(GPU-[0-9a-f-]+),(GPU-[0-9a-f-]+))");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(o, m, vis)) << o;
    // 3: allocatable 7, then 8 again.
    size_t p3 = pos(o, "[3/5]", p2);
    size_t seven = pos(o, "=> allocatable nvidia.com/gpu: 7 (capacity 8)", p3);
    pos(o, "Healthy again", seven);
    size_t eight = pos(o, "=> allocatable nvidia.com/gpu: 8", seven);
    // 4: GPU_UTIL lines with the pod's labels, one per pod GPU (matched by UUID).
    size_t p4 = pos(o, "[4/5]", eight);
    int labelled = 0;
    for (size_t at = o.find("DCGM_FI_DEV_GPU_UTIL{", p4); at != std::string::npos; at = o.find("DCGM_FI_DEV_GPU_UTIL{", at + 1)) {
        std::string line = o.substr(at, o.find('\n', at) - at);
        if (line.find("pod=\"cuda-train\"") == std::string::npos) continue;
        EXPECT_THAT(line, HasSubstr("namespace=\"default\""));
        EXPECT_THAT(line, HasSubstr("container=\"trainer\""));
        EXPECT_TRUE(line.find(m[1].str()) != std::string::npos || line.find(m[2].str()) != std::string::npos) << line;
        ++labelled;
    }
    EXPECT_EQ(labelled, 2) << o;
    // and step 3's XID as the exporter reports it: XID 94, never 0 "No Error" (issue #23).
    size_t xid = pos(o, "and step 3's XID, as dcgm-exporter reports the last one:", p4);
    xid = o.find('\n', xid) + 1;
    const std::string xid_line = o.substr(xid, o.find('\n', xid) - xid);
    EXPECT_THAT(xid_line, HasSubstr("DCGM_FI_DEV_XID_ERRORS{"));
    EXPECT_THAT(xid_line, HasSubstr("err_code=\"94\""));
    EXPECT_THAT(xid_line, ::testing::EndsWith(" 94"));
    // 5: doctor's summary, no failing check; it saw the live plugin and the pod.
    size_t p5 = pos(o, "[5/5]", p4);
    pos(o, "[ OK ] deviceplugin.plugin_socket", p5);
    pos(o, "[ OK ] kubelet.pod_resources", p5);
    static const std::regex summary(R"(doctor summary: [0-9]+ ok, [0-9]+ warn, 0 fail, [0-9]+ skipped \(exit 0\))");
    EXPECT_TRUE(std::regex_search(o, summary)) << o;
    pos(o, "all 5 steps passed", p5);
    expect_nothing_left(o);
    EXPECT_TRUE(fs::is_empty(tmp.path()));
}

// --mps: the MPS walk (issue #18): the daemon's limits, 32 replicas, two pods on one GPU with the
// pipe directory and their limits, the daemon killed and back, kgpu_mps_* and both pods' series.
TEST(Demo, MpsTwoPodsShareOneGpu) {
    TempDir cwd, tmp;
    auto r = run_in(cwd.path(), tmp.path(), "demo --mps");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const std::string& o = r.out;
    size_t p1 = pos(o, "[1/4]");
    pos(o, "| set_default_device_pinned_mem_limit 7 20389M", p1);
    pos(o, "| set_default_active_thread_percentage 25", p1);
    pos(o, "(8 `computemode <gpu> 3` lines", p1);
    size_t cap = pos(o, "capacity nvidia.com/gpu: 32, allocatable nvidia.com/gpu: 32", p1);
    size_t p2 = pos(o, "[2/4]", cap);
    pos(o, "pod default/mps-a", p2);
    pos(o, "pod default/mps-b", p2);
    size_t env = pos(o, "env CUDA_MPS_PIPE_DIRECTORY=/mps/nvidia.com/gpu/pipe", p2);
    pos(o, "env CUDA_MPS_PIPE_DIRECTORY=/mps/nvidia.com/gpu/pipe", env + 1);
    pos(o, "-> /dev/shm", p2);
    pos(o, "answers 25.0", p2);
    pos(o, "is 20389M", p2);
    size_t p3 = pos(o, "[3/4]", p2);
    pos(o, "all 32 replicas Unhealthy", p3);
    size_t back = pos(o, "Healthy again", p3);
    size_t p4 = pos(o, "[4/4]", back);
    pos(o, "kgpu_mps_daemon_restarts_total{resource=\"nvidia.com/gpu\"} 1", p4);
    pos(o, "kgpu_mps_active_thread_percentage{resource=\"nvidia.com/gpu\"} 25", p4);
    pos(o, "pod=\"mps-a\",namespace=\"default\",container=\"main\",vgpu=\"0\"", p4);
    pos(o, "pod=\"mps-b\",namespace=\"default\",container=\"main\",vgpu=\"1\"", p4);
    pos(o, "all 4 steps passed", p4);
    // Nothing left: kgpu's three children, and every stand-in daemon (the killed one and the one
    // that got `quit` at the end).
    auto pids = printed_pids(o);
    EXPECT_EQ(pids.size(), 3u) << o;
    static const std::regex daemon(R"(control daemon running \(pid ([0-9]+))");
    for (auto it = std::sregex_iterator(o.begin(), o.end(), daemon); it != std::sregex_iterator(); ++it)
        pids.push_back(std::stoi((*it)[1]));
    EXPECT_EQ(pids.size(), 5u) << o;
    for (int pid : pids) EXPECT_TRUE(eventually_gone(pid)) << "pid " << pid << " still exists";
    const std::string work = printed_work_dir(o);
    EXPECT_FALSE(fs::exists(work)) << work;
    EXPECT_TRUE(fs::is_empty(tmp.path()));
}

TEST(Demo, FixtureByNameWithoutNvlink) {
    TempDir cwd, tmp;
    auto r = run_in(cwd.path(), tmp.path(), "demo --node t4x4 --recovery-period 1");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("t4x4.yaml"));
    EXPECT_THAT(r.out, HasSubstr("capacity nvidia.com/gpu: 4, allocatable nvidia.com/gpu: 4"));
    EXPECT_THAT(r.out, HasSubstr("this node has no NVLink"));
    EXPECT_THAT(r.out, HasSubstr("allocatable nvidia.com/gpu: 3 (capacity 4)"));
    expect_nothing_left(r.out);
}

TEST(Demo, KeepLeavesTheWorkDirButNoProcess) {
    TempDir cwd, tmp;
    auto r = run_in(cwd.path(), tmp.path(), "demo --keep --recovery-period 1");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    std::string work = printed_work_dir(r.out);
    ASSERT_FALSE(work.empty());
    EXPECT_TRUE(fs::exists(work + "/logs/device-plugin.log"));
    EXPECT_TRUE(fs::exists(work + "/logs/doctor.json"));
    EXPECT_TRUE(fs::exists(work + "/logs/metrics.txt"));
    // Sockets are gone: the plugin removed its own, the emulator stopped serving.
    EXPECT_FALSE(fs::exists(work + "/host/var/lib/kubelet/device-plugins/kgpu-nvidia-com-gpu.sock"));
    for (int pid : printed_pids(r.out)) EXPECT_FALSE(alive(pid));
    EXPECT_THAT(processes_mentioning(work), ::testing::IsEmpty());
    fs::remove_all(work);
}

TEST(Demo, BadNodeIsAUsageError) {
    TempDir cwd, tmp;
    auto missing = run_in(cwd.path(), tmp.path(), "demo --node /nonexistent/node.yaml");
    EXPECT_EQ(missing.exit_code, 2) << missing.out << missing.err;
    EXPECT_THAT(missing.err, HasSubstr("--node: /nonexistent/node.yaml is not a node file"));

    auto unknown = run_in(cwd.path(), tmp.path(), "demo --node no-such-fixture");
    EXPECT_EQ(unknown.exit_code, 2);
    EXPECT_THAT(unknown.err, HasSubstr("no-such-fixture.yaml"));  // the places it looked

    std::string bad = tmp.write("bad.yaml", "driver_version: \"550.54.15\"\ngpus: {not: a list}\n");
    auto malformed = run_in(cwd.path(), tmp.path(), "demo --node " + bad);
    EXPECT_EQ(malformed.exit_code, 2) << malformed.out << malformed.err;
    EXPECT_THAT(malformed.err, HasSubstr("could not load the node " + bad));

    auto empty = run_in(cwd.path(), tmp.path(), "demo --node empty");
    EXPECT_EQ(empty.exit_code, 2);
    EXPECT_THAT(empty.err, HasSubstr("at least 3 GPUs"));
    // Nothing of these runs stays behind: only bad.yaml is in TMPDIR.
    size_t entries = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(tmp.path())) ++entries;
    EXPECT_EQ(entries, 1u);
}

// The binary at `to`: a hard link when the file systems allow (the binary is large), else a copy.
// (A symlink would not do: the demo looks next to /proc/self/exe, which resolves links.)
void place_binary(const std::string& to) {
    fs::create_directories(fs::path(to).parent_path());
    std::error_code ec;
    fs::create_hard_link(KGPU_BINARY, to, ec);
    if (ec) fs::copy_file(KGPU_BINARY, to);
}

TEST(Demo, FindsSimulatorAndFixtureInAnInstallTree) {
    TempDir prefix, cwd, tmp;
    place_binary(prefix.path() + "/bin/kgpu");
    fs::create_directories(prefix.path() + "/lib/kgpu");
    fs::copy_file(KGPU_SIM_LIBRARY, prefix.path() + "/lib/kgpu/libnvidia-ml.so.1");
    fs::create_directories(prefix.path() + "/share/kgpu/nodes");
    fs::copy_file(std::string(KGPU_SOURCE_DIR) + "/sim/nodes/t4x4.yaml", prefix.path() + "/share/kgpu/nodes/t4x4.yaml");
    auto r = run_process({"/bin/sh", "-c", "cd '" + cwd.path() + "' && exec '" + prefix.path() +
                                               "/bin/kgpu' demo --node t4x4 --recovery-period 1"},
                         {{"TMPDIR", tmp.path()}});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("node: " + prefix.path() + "/share/kgpu/nodes/t4x4.yaml"));
    EXPECT_THAT(r.out, HasSubstr("simulated driver: " + prefix.path() + "/lib/kgpu/libnvidia-ml.so.1"));
    expect_nothing_left(r.out);
}

TEST(Demo, MissingSimulatorNamesWhereItLooked) {
    TempDir dir;
    place_binary(dir.path() + "/kgpu");
    auto r = run_process({dir.path() + "/kgpu", "demo"});
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("cannot find the simulated driver library libnvidia-ml.so.1"));
    EXPECT_THAT(r.err, HasSubstr(dir.path() + "/sim/libnvidia-ml.so.1"));
    EXPECT_THAT(r.err, HasSubstr("--nvml-library"));
    auto flag = run_process({KGPU_BINARY, "demo", "--nvml-library", dir.path() + "/nope.so"});
    EXPECT_EQ(flag.exit_code, 2);
    EXPECT_THAT(flag.err, HasSubstr("--nvml-library: " + dir.path() + "/nope.so is not a file"));
}

TEST(Demo, SigintStopsEverything) {
    TempDir tmp;
    ChildProcess demo({KGPU_BINARY, "demo", "--recovery-period", "30"}, {{"TMPDIR", tmp.path()}});
    // Interrupt while a GPU waits out its (long) recovery period.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (demo.out().find("(capacity 8)") == std::string::npos && demo.running() &&
           std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_THAT(demo.out(), HasSubstr("(capacity 8)")) << demo.err();
    demo.signal(SIGINT);
    int code = demo.wait(30000);
    EXPECT_EQ(code, 130) << demo.out() << demo.err();
    EXPECT_THAT(demo.err(), HasSubstr("interrupted by SIGINT"));
    expect_nothing_left(demo.out());
}

TEST(Demo, TerminalCtrlCStopsEverything) {
    // A terminal's Ctrl-C sends SIGINT to the whole foreground process group. The demo runs in a
    // group of its own here (setsid: pgid = its pid); its children must be in groups of their
    // own, so the signal reaches the demo alone and it reports the interruption (130), not a
    // child that exited by itself.
    TempDir tmp;
    ChildProcess demo({"/usr/bin/setsid", KGPU_BINARY, "demo", "--recovery-period", "30"}, {{"TMPDIR", tmp.path()}});
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (demo.out().find("(capacity 8)") == std::string::npos && demo.running() &&
           std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_THAT(demo.out(), HasSubstr("(capacity 8)")) << demo.err();
    ASSERT_EQ(::getpgid(demo.pid()), demo.pid());
    for (int pid : printed_pids(demo.out())) EXPECT_EQ(::getpgid(pid), pid) << "pid " << pid;
    ASSERT_EQ(::kill(-demo.pid(), SIGINT), 0);
    int code = demo.wait(30000);
    EXPECT_EQ(code, 130) << demo.out() << demo.err();
    EXPECT_THAT(demo.err(), HasSubstr("interrupted by SIGINT"));
    expect_nothing_left(demo.out());
}

}  // namespace
