// The simulator's stand-in nvidia-cuda-mps-control (<build>/sim/nvidia-cuda-mps-control), the
// control client kgpu drives it with, and the supervisor of `kgpu mps-control-daemon`: limits sent
// as NVIDIA's daemon sends them, a killed or stopped daemon seen and restarted, quit on stop.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/process.h"
#include "deviceplugin/mps.h"
#include "mps/mps.h"
#include "mps/supervisor.h"
#include "support/process.h"
#include "support/expect.h"

namespace kgpu::mps {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using kgpu::test::eventually;

const std::string kStandIn = KGPU_MPS_CONTROL_SIM;

std::vector<std::string> lines(const fs::path& p) {
    std::vector<std::string> out;
    std::ifstream in(p);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
}

// Gone: no such process, or a zombie (reaped here when it is ours).
bool gone(pid_t pid) {
    int st = 0;
    ::waitpid(pid, &st, WNOHANG);
    auto stat = files::read("/proc/" + std::to_string(pid) + "/stat");
    if (!stat) return true;
    auto close = stat->rfind(')');
    return close != std::string::npos && close + 2 < stat->size() && (*stat)[close + 2] == 'Z';
}

struct Dirs {
    test::TempDir tmp;
    fs::path pipe = fs::path(tmp.path()) / "pipe";
    fs::path log = fs::path(tmp.path()) / "log";
    std::map<std::string, std::string> env() const {
        return {{"CUDA_MPS_PIPE_DIRECTORY", pipe.string()}, {"CUDA_MPS_LOG_DIRECTORY", log.string()}};
    }
    process::Completed run(std::vector<std::string> args, std::string input = "") const {
        args.insert(args.begin(), kStandIn);
        process::RunOptions o;
        o.argv = std::move(args);
        o.set_env = env();
        o.stdin_text = std::move(input);
        auto r = process::run(o);
        EXPECT_TRUE(r.has_value()) << r.error().message;
        return r.value_or(process::Completed{});
    }
    pid_t pid() const {
        auto t = files::read_line(pipe / "nvidia-cuda-mps-control.pid");
        return t ? std::stoi(*t) : 0;
    }
    ~Dirs() {
        if (pid_t p = pid(); p > 0 && !gone(p)) {
            ::kill(p, SIGKILL);
            eventually([&] { return gone(p); }, 2s);
        }
    }
};

TEST(MpsStandIn, AnswersWhatWasSetAndLogsEveryCommandLine) {
    Dirs d;
    auto start = d.run({"-d"});
    ASSERT_EQ(start.exit_code, 0) << start.err;
    const pid_t pid = d.pid();
    ASSERT_GT(pid, 0);
    EXPECT_FALSE(gone(pid));

    auto r = d.run({}, "get_default_active_thread_percentage\nset_default_active_thread_percentage 25\n"
                       "get_default_active_thread_percentage\n");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "100.0\n25.0\n");
    r = d.run({}, "set_default_device_pinned_mem_limit 0 20389M\nget_default_device_pinned_mem_limit 0\n"
                  "get_default_device_pinned_mem_limit GPU-1\n\n");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "20389M\n0\n");

    r = d.run({}, "bogus command\n");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("Unrecognized command 'bogus'"));
    r = d.run({}, "set_default_active_thread_percentage 0\n");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("Invalid active thread percentage '0'"));
    r = d.run({}, "set_default_device_pinned_mem_limit 0 lots\n");
    EXPECT_EQ(r.exit_code, 1);

    auto second = d.run({"-d"});
    EXPECT_EQ(second.exit_code, 1);
    EXPECT_THAT(second.err, HasSubstr("already running"));

    EXPECT_EQ(d.run({}, "quit\n").exit_code, 0);
    EXPECT_TRUE(eventually([&] { return gone(pid); }));
    EXPECT_FALSE(fs::exists(d.pipe / "control"));
    r = d.run({}, "get_default_active_thread_percentage\n");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.out, HasSubstr("Cannot find MPS control daemon process"));

    EXPECT_THAT(lines(d.log / "control.log"),
                ElementsAreArray({"get_default_active_thread_percentage", "set_default_active_thread_percentage 25",
                                  "get_default_active_thread_percentage", "set_default_device_pinned_mem_limit 0 20389M",
                                  "get_default_device_pinned_mem_limit 0", "get_default_device_pinned_mem_limit GPU-1",
                                  "bogus command", "set_default_active_thread_percentage 0",
                                  "set_default_device_pinned_mem_limit 0 lots", "quit"}));
}

TEST(MpsStandIn, KilledDaemonRefusesClientsAndIsReplacedByTheNextStart) {
    Dirs d;
    ASSERT_EQ(d.run({"-d"}).exit_code, 0);
    const pid_t first = d.pid();
    ::kill(first, SIGKILL);
    ASSERT_TRUE(eventually([&] { return gone(first); }));
    auto r = d.run({}, "get_default_active_thread_percentage\n");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.out, HasSubstr("Cannot find MPS control daemon process"));
    ASSERT_EQ(d.run({"-d"}).exit_code, 0);
    EXPECT_NE(d.pid(), first);
    EXPECT_EQ(d.run({}, "get_default_active_thread_percentage\n").out, "100.0\n");
    EXPECT_EQ(d.run({}, "quit\n").exit_code, 0);
    EXPECT_EQ(d.run({"-x"}).exit_code, 1);
}

TEST(MpsControl, SendsCommandsAndTellsDeadFromSilent) {
    Dirs d;
    Control c(kStandIn, d.pipe, d.log, 500ms);
    auto none = c.send(kProbeCommand);
    ASSERT_FALSE(none.has_value());
    EXPECT_EQ(none.error().code, Code::unavailable);
    EXPECT_THAT(none.error().message, HasSubstr("Cannot find MPS control daemon process"));

    ASSERT_TRUE(c.start_daemon().has_value());
    EXPECT_EQ(c.send(kProbeCommand).value_or("?"), "100.0");
    auto refused = c.send("bogus");
    ASSERT_FALSE(refused.has_value());
    EXPECT_THAT(refused.error().message, HasSubstr("Unrecognized command 'bogus'"));
    EXPECT_FALSE(c.start_daemon().has_value());  // one daemon per pipe directory

    ::kill(d.pid(), SIGSTOP);
    auto silent = c.send(kProbeCommand);
    ASSERT_FALSE(silent.has_value());
    EXPECT_EQ(silent.error().code, Code::timeout);
    EXPECT_THAT(silent.error().message, HasSubstr("did not answer"));
    ::kill(d.pid(), SIGCONT);
    EXPECT_TRUE(c.send(kProbeCommand).has_value());
    EXPECT_TRUE(c.send("quit").has_value());
}

struct RecordingModes : ComputeModes {
    std::vector<std::pair<unsigned, nvml::ComputeMode>> calls;
    bool refuse = false;
    std::set<unsigned> lost;  // GPUs that answer GPU_IS_LOST
    Status set(const SharedGpu& gpu, nvml::ComputeMode mode) override {
        if (refuse) return fail(Code::no_permission, "NVML says no");
        if (lost.contains(gpu.index)) return fail(Code::gpu_lost, "nvmlDeviceSetComputeMode failed: GPU_IS_LOST (15)");
        calls.emplace_back(gpu.index, mode);
        return {};
    }
};

DaemonSpec spec(std::string resource, unsigned first, unsigned count, unsigned replicas) {
    DaemonSpec s{std::move(resource), {}};
    for (unsigned i = first; i < first + count; ++i)
        s.gpus.push_back({i, "GPU-" + std::to_string(i), 81559, replicas, 9, 0, false});
    return s;
}

class MpsSupervisor : public ::testing::Test {
protected:
    test::TempDir tmp;
    RecordingModes modes;
    SupervisorOptions opts = [this] {
        SupervisorOptions o;
        o.root.dir = fs::path(tmp.path()) / "mps";
        o.control_binary = kStandIn;
        o.backoff_initial = 50ms;
        o.backoff_max = 200ms;
        return o;
    }();

    pid_t pid_of(const std::string& resource) {
        auto t = files::read_line(opts.root.pipe_dir(resource) / "nvidia-cuda-mps-control.pid");
        return t ? std::stoi(*t) : 0;
    }
    nlohmann::json status_json(const std::string& resource) {
        auto t = files::read(opts.root.status_file(resource));
        return t ? nlohmann::json::parse(*t) : nlohmann::json{};
    }
    // Ticks until pred holds (false after 5 s).
    bool tick_until(Supervisor& s, const std::function<bool()>& pred) {
        return eventually([&] {
            s.tick();
            return pred();
        });
    }
    void TearDown() override {
        for (const char* r : {"nvidia.com/gpu", "nvidia.com/a", "nvidia.com/b"})
            if (pid_t p = pid_of(r); p > 0 && !gone(p)) ::kill(p, SIGKILL);
    }
};

TEST_F(MpsSupervisor, StartsAsNvidiaRestartsWhatDiesAndQuitsOnStop) {
    const std::string res = "nvidia.com/gpu";
    Supervisor sup({spec(res, 0, 8, 4)}, opts, modes);
    ASSERT_TRUE(sup.start().has_value());

    ASSERT_EQ(modes.calls.size(), 8u);
    for (unsigned i = 0; i < 8; ++i) EXPECT_EQ(modes.calls[i], std::make_pair(i, nvml::ComputeMode::exclusive_process));
    std::vector<std::string> setup;
    for (unsigned i = 0; i < 8; ++i) setup.push_back("set_default_device_pinned_mem_limit " + std::to_string(i) + " 20389M");
    setup.push_back("set_default_active_thread_percentage 25");
    EXPECT_THAT(lines(opts.root.log_dir(res) / "control.log"), ElementsAreArray(setup));
    EXPECT_TRUE(fs::exists(opts.root.started_file(res)));
    EXPECT_TRUE(fs::exists(opts.root.ready_file()));
    auto st = sup.status();
    ASSERT_EQ(st.size(), 1u);
    EXPECT_EQ(st[0].state, DaemonState::running);
    const pid_t first = st[0].pid;
    EXPECT_EQ(first, pid_of(res));
    auto j = status_json(res);
    EXPECT_EQ(j["state"], "running");
    EXPECT_EQ(j["activeThreadPercentage"], 25);
    EXPECT_EQ(j["pinnedMemoryLimits"][3]["limit"], "20389M");
    EXPECT_EQ(j["pinnedMemoryLimits"][3]["bytes"], 20389ull << 20);

    // Killed: noticed on the next tick (it is our child), restarted after the backoff.
    ::kill(first, SIGKILL);
    ASSERT_TRUE(tick_until(sup, [&] { return sup.status()[0].state != DaemonState::running; }));
    EXPECT_EQ(sup.status()[0].state, DaemonState::restarting);
    EXPECT_FALSE(fs::exists(opts.root.started_file(res)));
    EXPECT_FALSE(fs::exists(opts.root.ready_file()));
    EXPECT_THAT(status_json(res)["lastError"].get<std::string>(), HasSubstr("exited"));
    ASSERT_TRUE(tick_until(sup, [&] { return sup.status()[0].state == DaemonState::running; }));
    const pid_t second = sup.status()[0].pid;
    EXPECT_NE(second, first);
    EXPECT_EQ(sup.status()[0].restarts, 1u);
    EXPECT_TRUE(fs::exists(opts.root.started_file(res)));
    EXPECT_TRUE(fs::exists(opts.root.ready_file()));
    EXPECT_EQ(lines(opts.root.log_dir(res) / "control.log").size(), 2 * setup.size());

    // Stopped (it cannot answer): killed and restarted.
    ::kill(second, SIGSTOP);
    ASSERT_TRUE(tick_until(sup, [&] { return sup.status()[0].state != DaemonState::running; }));
    EXPECT_THAT(sup.status()[0].last_error, HasSubstr("stopped"));
    EXPECT_TRUE(eventually([&] { return gone(second); }));
    ASSERT_TRUE(tick_until(sup, [&] { return sup.status()[0].state == DaemonState::running; }));
    EXPECT_EQ(sup.status()[0].restarts, 2u);

    // What the exporter reads back.
    auto read = read_statuses(opts.root);
    ASSERT_EQ(read.size(), 1u);
    EXPECT_EQ(read[0].resource, res);
    EXPECT_EQ(read[0].state, DaemonState::running);
    EXPECT_EQ(read[0].restarts, 2u);
    EXPECT_EQ(read[0].active_thread_percentage, 25u);
    ASSERT_EQ(read[0].pinned_limits.size(), 8u);
    EXPECT_EQ(read[0].pinned_limits[7].mib, 20389u);
    EXPECT_EQ(read[0].pinned_limits[7].uuid, "GPU-7");
    EXPECT_THAT(read[0].last_error, HasSubstr("stopped"));

    const pid_t third = sup.status()[0].pid;
    modes.calls.clear();
    sup.stop();
    EXPECT_EQ(read_statuses(opts.root).at(0).state, DaemonState::stopped);
    EXPECT_EQ(lines(opts.root.log_dir(res) / "control.log").back(), "quit");
    EXPECT_TRUE(eventually([&] { return gone(third); }));
    ASSERT_EQ(modes.calls.size(), 8u);
    EXPECT_EQ(modes.calls[0].second, nvml::ComputeMode::default_);
    EXPECT_FALSE(fs::exists(opts.root.started_file(res)));
    EXPECT_FALSE(fs::exists(opts.root.ready_file()));
    EXPECT_EQ(status_json(res)["state"], "stopped");
}

// Issue #22: under umask 000 the MPS root and the pipe and log directories were 0777, so any
// local user could replace a daemon's pipes. NVIDIA's daemon makes them 0755; so does kgpu,
// whatever the umask.
TEST_F(MpsSupervisor, DirectoriesAre0755WhateverTheUmask) {
    const std::string res = "nvidia.com/gpu";
    const mode_t old = ::umask(0);
    Supervisor sup({spec(res, 0, 1, 2)}, opts, modes);
    auto started = sup.start();
    ::umask(old);
    ASSERT_TRUE(started.has_value()) << started.error().message;
    for (const fs::path& d : {opts.root.dir, opts.root.dir / "nvidia.com", opts.root.pipe_dir(res).parent_path(),
                              opts.root.pipe_dir(res), opts.root.log_dir(res)}) {
        struct stat st {};
        ASSERT_EQ(::stat(d.c_str(), &st), 0) << d;
        EXPECT_EQ(st.st_mode & 07777, 0755u) << d;
    }
    sup.stop();
}

TEST_F(MpsSupervisor, OneDaemonPerResourceAndOnlyTheDeadOneRestarts) {
    Supervisor sup({spec("nvidia.com/a", 0, 4, 2), spec("nvidia.com/b", 4, 4, 3)}, opts, modes);
    ASSERT_TRUE(sup.start().has_value());
    EXPECT_EQ(lines(opts.root.log_dir("nvidia.com/a") / "control.log").back(), "set_default_active_thread_percentage 50");
    EXPECT_EQ(lines(opts.root.log_dir("nvidia.com/b") / "control.log").front(), "set_default_device_pinned_mem_limit 4 27186M");
    const pid_t b = pid_of("nvidia.com/b");
    ::kill(pid_of("nvidia.com/a"), SIGKILL);
    ASSERT_TRUE(tick_until(sup, [&] { return sup.status()[0].state != DaemonState::running; }));
    EXPECT_FALSE(fs::exists(opts.root.started_file("nvidia.com/a")));
    EXPECT_TRUE(fs::exists(opts.root.started_file("nvidia.com/b")));
    auto read = read_statuses(opts.root);
    ASSERT_EQ(read.size(), 2u);
    EXPECT_EQ(read[0].resource, "nvidia.com/a");
    EXPECT_EQ(read[0].state, DaemonState::restarting);
    EXPECT_EQ(read[1].state, DaemonState::running);
    EXPECT_EQ(read[1].active_thread_percentage, 33u);
    // A status that says running without .started: its supervisor died with the daemon.
    fs::remove(opts.root.started_file("nvidia.com/b"));
    EXPECT_EQ(read_statuses(opts.root).at(1).state, DaemonState::restarting);
    fs::create_directories(opts.root.resource_dir("nvidia.com/c"));
    ASSERT_TRUE(files::write_atomic(opts.root.resource_dir("nvidia.com/c") / "status.json", "{not json").has_value());
    EXPECT_EQ(read_statuses(opts.root).size(), 2u);
    std::vector<std::string> problems;
    EXPECT_EQ(read_statuses(opts.root, &problems).size(), 2u);
    ASSERT_EQ(problems.size(), 1u);
    EXPECT_THAT(problems[0], HasSubstr("nvidia.com/c/status.json: not a status file kgpu wrote"));
    ASSERT_TRUE(tick_until(sup, [&] { return fs::exists(opts.root.started_file("nvidia.com/a")); }));
    EXPECT_EQ(sup.status()[1].restarts, 0u);
    EXPECT_EQ(pid_of("nvidia.com/b"), b);
    sup.stop();
}

TEST_F(MpsSupervisor, AFailedStartIsRetriedAndSaysWhy) {
    modes.refuse = true;
    Supervisor sup({spec("nvidia.com/gpu", 0, 2, 2)}, opts, modes);
    ASSERT_TRUE(sup.start().has_value());
    EXPECT_EQ(sup.status()[0].state, DaemonState::restarting);
    EXPECT_THAT(sup.status()[0].last_error, HasSubstr("EXCLUSIVE_PROCESS: NVML says no"));
    EXPECT_FALSE(fs::exists(opts.root.ready_file()));
    modes.refuse = false;
    ASSERT_TRUE(tick_until(sup, [&] { return sup.status()[0].state == DaemonState::running; }));
    EXPECT_EQ(sup.status()[0].restarts, 0u);  // it never ran before
    sup.stop();

    SupervisorOptions bad = opts;
    bad.control_binary = "/bin/false";
    Supervisor never({spec("nvidia.com/gpu", 0, 2, 2)}, bad, modes);
    ASSERT_TRUE(never.start().has_value());
    EXPECT_THAT(never.status()[0].last_error, HasSubstr("-d"));
    EXPECT_THAT(never.status()[0].last_error, HasSubstr("exit code 1"));
}

// A lost GPU does not keep the daemon from the resource's other GPUs: a daemon that dies while
// one GPU is off the bus starts again (the monitoring test saw MPS down for good after a probe
// timed out under load once GPU 5 was lost: every restart stopped at GPU 5's compute mode).
TEST_F(MpsSupervisor, ALostGpuDoesNotKeepTheDaemonFromTheOthers) {
    const std::string res = "nvidia.com/gpu";
    Supervisor sup({spec(res, 0, 3, 2)}, opts, modes);
    ASSERT_TRUE(sup.start().has_value());
    ASSERT_EQ(sup.status()[0].state, DaemonState::running);
    const pid_t first = sup.status()[0].pid;

    modes.lost = {1};
    modes.calls.clear();
    ::kill(first, SIGKILL);
    ASSERT_TRUE(tick_until(sup, [&] { return sup.status()[0].state != DaemonState::running; }));
    ASSERT_TRUE(tick_until(sup, [&] { return sup.status()[0].state == DaemonState::running; }))
        << sup.status()[0].last_error;
    EXPECT_NE(sup.status()[0].pid, first);
    EXPECT_EQ(sup.status()[0].restarts, 1u);
    EXPECT_THAT(modes.calls, ElementsAre(std::make_pair(0u, nvml::ComputeMode::exclusive_process),
                                         std::make_pair(2u, nvml::ComputeMode::exclusive_process)));
    EXPECT_TRUE(fs::exists(opts.root.ready_file()));
    sup.stop();
}

// A daemon left on the same pipes (an earlier run of the supervisor died) is asked to quit, so the
// limits are the new ones.
TEST_F(MpsSupervisor, ReplacesADaemonLeftFromAnEarlierRun) {
    const std::string res = "nvidia.com/gpu";
    Control old(kStandIn, opts.root.pipe_dir(res), opts.root.log_dir(res));
    ASSERT_TRUE(old.start_daemon().has_value());
    ASSERT_TRUE(old.send("set_default_active_thread_percentage 50").has_value());
    Supervisor sup({spec(res, 0, 1, 4)}, opts, modes);
    ASSERT_TRUE(sup.start().has_value());
    EXPECT_EQ(sup.status()[0].state, DaemonState::running);
    EXPECT_EQ(old.send(kProbeCommand).value_or("?"), "25.0");
    sup.stop();
}

// The plugin's side: a daemon is up once it answers after its .started appeared; down as soon as
// .started goes (the supervisor removes it when the daemon dies); up again after the restart.
TEST_F(MpsSupervisor, TheWatcherFollowsTheDaemon) {
    const std::string res = "nvidia.com/gpu";
    std::mutex mu;
    std::vector<bool> seen;  // every state the callback reported
    deviceplugin::MpsWatcher::Options wo;
    wo.root = opts.root;
    wo.control_binary = kStandIn;
    wo.watch_interval = 20ms;
    deviceplugin::MpsWatcher watcher({res}, wo, [&](const std::map<std::string, deviceplugin::MpsWatcher::State>& s) {
        std::lock_guard lk(mu);
        seen.push_back(s.at(res).up);
    });
    watcher.start();
    EXPECT_FALSE(watcher.snapshot().at(res).up);
    EXPECT_THAT(watcher.snapshot().at(res).reason, HasSubstr(".started is missing"));

    Supervisor sup({spec(res, 0, 8, 4)}, opts, modes);
    ASSERT_TRUE(sup.start().has_value());
    ASSERT_TRUE(eventually([&] { return watcher.snapshot().at(res).up; }));
    const auto logged = lines(opts.root.log_dir(res) / "control.log");
    EXPECT_EQ(logged.back(), std::string(kProbeCommand));  // it asked the daemon, once

    ::kill(sup.status()[0].pid, SIGKILL);
    ASSERT_TRUE(tick_until(sup, [&] { return !fs::exists(opts.root.started_file(res)); }));
    ASSERT_TRUE(eventually([&] { return !watcher.snapshot().at(res).up; }));
    ASSERT_TRUE(tick_until(sup, [&] { return sup.status()[0].state == DaemonState::running; }));
    ASSERT_TRUE(eventually([&] { return watcher.snapshot().at(res).up; }));
    {
        std::lock_guard lk(mu);
        EXPECT_EQ(seen, (std::vector<bool>{true, false, true}));
    }

    // A daemon that answers no more while .started stays (hung, or NVIDIA's daemon that never
    // removes it) is found by the periodic probe.
    watcher.stop();
    wo.probe_interval = 50ms;
    wo.command_timeout = 200ms;
    deviceplugin::MpsWatcher prober({res}, wo, {});
    prober.start();
    EXPECT_TRUE(prober.snapshot().at(res).up);
    ::kill(sup.status()[0].pid, SIGSTOP);
    ASSERT_TRUE(eventually([&] { return !prober.snapshot().at(res).up; }));
    EXPECT_THAT(prober.snapshot().at(res).reason, HasSubstr("did not answer"));
    ::kill(sup.status()[0].pid, SIGCONT);
    ASSERT_TRUE(eventually([&] { return prober.snapshot().at(res).up; }));
    prober.stop();
    sup.stop();

    deviceplugin::MpsWatcher blind({res}, {opts.root, "", 20ms}, {});
    blind.start();
    EXPECT_THAT(blind.snapshot().at(res).reason, HasSubstr("no nvidia-cuda-mps-control"));
}

}  // namespace
}  // namespace kgpu::mps
