// `kgpu mig-manager`'s reconfiguration (issue #28 part 3) on the simulated A100 node
// (sim/nodes/a100-mig.yaml: GPU 0 7x 1g.10gb, GPU 1 3g.40gb + 2g.20gb + 2x 1g.10gb, GPUs 2-3 MIG
// off), in process through the simulator's NVML: the state labels it sets, its Events, the
// paused-GPUs file the device plugin follows, and what the GPUs become.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <thread>

#include "common/files.h"
#include "mig/manager.h"
#include "mig/node.h"
#include "nvml/library.h"
#include "mig_configs.h"
#include "support/expect.h"
#include "support/process.h"

namespace kgpu::test {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using kgpu::test::eventually;
namespace fs = std::filesystem;


class MigManager : public ::testing::Test {
protected:
    TempDir dir;
    std::string config = dir.write("config.yaml", kMigConfigs);
    std::string events = dir.write("events", "");
    std::string paused = dir.path() + "/mig-manager/paused-gpus";
    std::optional<nvml::Session> session;

    std::mutex mu;
    std::vector<std::string> states;
    std::vector<std::string> posted;  // "<type> <reason>: <message>"
    std::atomic<int> reboots{0};
    std::atomic<bool> interrupt{false};
    std::vector<mig::PodUse> pods;  // what the kubelet's PodResources says (guarded by mu)

    void start(const std::string& fixture = std::string(KGPU_SOURCE_DIR) + "/sim/nodes/a100-mig.yaml") {
        ::setenv("KGPU_SIM_NODE", fixture.c_str(), 1);
        ::setenv("KGPU_SIM_EVENTS", events.c_str(), 1);
        auto lib = nvml::Library::load({KGPU_SIM_LIBRARY, "/"});
        ASSERT_TRUE(lib) << lib.error().message;
        auto s = nvml::Session::open(*lib);
        ASSERT_TRUE(s) << s.error().message;
        session.emplace(std::move(*s));
    }
    void TearDown() override {
        session.reset();  // the simulator's last nvmlShutdown: the next test loads it afresh
        ::unsetenv("KGPU_SIM_EVENTS");
        ::unsetenv("KGPU_SIM_NODE");
    }
    void sim(const std::string& line) { std::ofstream(events, std::ios::app) << line << "\n"; }
    void set_pods(std::vector<mig::PodUse> p) {
        std::lock_guard lk(mu);
        pods = std::move(p);
    }

    mig::ManagerOptions options() const {
        mig::ManagerOptions o;
        o.config_file = config;
        o.paused_gpus_file = paused;
        o.poll = 50ms;
        o.pause_settle = 50ms;
        o.process_timeout = 20s;
        return o;
    }
    mig::ManagerHooks hooks() {
        mig::ManagerHooks h;
        h.set_state = [this](const std::string& s) {
            std::lock_guard lk(mu);
            states.push_back(s);
        };
        h.event = [this](const std::string& type, const std::string& reason, const std::string& message) {
            std::lock_guard lk(mu);
            posted.push_back(type + " " + reason + ": " + message);
        };
        h.pod_uses = [this] {
            std::lock_guard lk(mu);
            return std::optional<std::vector<mig::PodUse>>(pods);
        };
        h.interrupted = [this] { return interrupt.load(); };
        h.reboot = [this] {
            ++reboots;
            return std::string();
        };
        return h;
    }
    std::vector<std::string> state_log() {
        std::lock_guard lk(mu);
        return states;
    }
    std::string event_log() {
        std::lock_guard lk(mu);
        std::string out;
        for (const auto& e : posted) out += e + "\n";
        return out;
    }
    // Each GPU's MIG profiles now ("off" when MIG is off), as another process would read them.
    std::vector<std::string> layout() {
        auto gpus = mig::read_node(*session);
        EXPECT_TRUE(gpus) << gpus.error().message;
        std::vector<std::string> out;
        for (const auto& g : gpus.value_or(std::vector<mig::Gpu>{})) {
            if (!g.mode.current) {
                out.push_back("off");
                continue;
            }
            std::string s;
            for (const auto& [name, n] : mig::counts(g.instances)) s += (s.empty() ? "" : " ") + std::to_string(n) + "x" + name;
            out.push_back(s);
        }
        return out;
    }
    std::string uuid(unsigned gpu) {
        auto gpus = mig::read_node(*session);
        return gpus && gpu < gpus->size() ? (*gpus)[gpu].uuid : std::string();
    }
    bool pids_seen(unsigned gpu) {
        auto gpus = mig::read_node(*session);
        return gpus && gpu < gpus->size() && !(*gpus)[gpu].pids.empty();
    }
};

TEST_F(MigManager, AppliesThenFindsItAppliedAndPausesOnlyWhileItWorks) {
    start();
    const auto o = options();
    EXPECT_EQ(mig::reconfigure(*session, "all-1g.10gb", "", o, hooks()), mig::Outcome::success) << event_log();
    EXPECT_THAT(state_log(), ElementsAre("pending", "success"));
    EXPECT_THAT(layout(), ElementsAre("7x1g.10gb", "7x1g.10gb", "7x1g.10gb", "7x1g.10gb"));
    EXPECT_THAT(event_log(), HasSubstr("Normal MigConfigApplied: MIG config 'all-1g.10gb' applied: GPUs 1, 2, 3 changed"));
    EXPECT_FALSE(fs::exists(paused)) << "the GPUs resume once it is done";
    // Again: nothing to do, nothing paused, straight to success.
    EXPECT_EQ(mig::reconfigure(*session, "all-1g.10gb", "success", o, hooks()), mig::Outcome::success);
    EXPECT_THAT(state_log(), ElementsAre("pending", "success", "success"));
    EXPECT_THAT(event_log(), HasSubstr("MIG config 'all-1g.10gb' is already applied"));
    // And off again: every GPU, MIG instances destroyed first.
    EXPECT_EQ(mig::reconfigure(*session, "all-disabled", "success", o, hooks()), mig::Outcome::success) << event_log();
    EXPECT_THAT(layout(), ElementsAre("off", "off", "off", "off"));
}

TEST_F(MigManager, ABusyGpuIsPausedAndWaitedForWhileTheOthersChange) {
    start();
    sim("proc 2 4242 1073741824");  // GPU 2 (MIG off) runs a pod's process
    set_pods({{2, std::nullopt, "team-a/train-0"}});
    ASSERT_TRUE(eventually([&] { return pids_seen(2); }));
    const std::string gpu2 = uuid(2);
    std::atomic<int> outcome{-1};
    std::thread run([&] { outcome = static_cast<int>(mig::reconfigure(*session, "all-1g.10gb", "", options(), hooks())); });
    // GPUs 1 and 3 change; GPU 2 waits, paused (with the others while they change).
    ASSERT_TRUE(eventually([&] { return event_log().find("MigConfigWaiting") != std::string::npos; })) << event_log();
    EXPECT_THAT(event_log(), HasSubstr("waits for GPU 2 (NVIDIA A100-SXM4-80GB) (pids 4242; pods team-a/train-0) to be "
                                       "free (up to 20s)"));
    EXPECT_THAT(state_log(), ElementsAre("pending"));
    EXPECT_EQ(outcome.load(), -1);
    EXPECT_TRUE(eventually([&] { return layout()[3] == "7x1g.10gb" && layout()[1] == "7x1g.10gb"; })) << layout()[1];
    // Only the GPU still to change stays paused: the others are offered again (their new MIG
    // devices) while it waits.
    EXPECT_TRUE(eventually([&] {
        auto text = files::read(paused);
        return text && text->find(gpu2 + "\n") != std::string::npos && text->find(uuid(1)) == std::string::npos;
    })) << files::read(paused).value_or("(no file)");
    EXPECT_EQ(layout()[2], "off") << "a GPU with a process on it is not touched";
    // The pod ends: GPU 2 changes too, and everything resumes.
    sim("noproc 2 4242");
    set_pods({});
    run.join();
    EXPECT_EQ(outcome.load(), static_cast<int>(mig::Outcome::success)) << event_log();
    EXPECT_THAT(state_log(), ElementsAre("pending", "success"));
    EXPECT_THAT(layout(), ElementsAre("7x1g.10gb", "7x1g.10gb", "7x1g.10gb", "7x1g.10gb"));
    EXPECT_FALSE(fs::exists(paused));
}

TEST_F(MigManager, ProcessesPastTheTimeoutFailNamingThePodsAndNeverLeaveItPending) {
    start();
    sim("proc 2 4242 1073741824");
    set_pods({{2, std::nullopt, "team-a/train-0"}, {0, 7u, "team-b/infer-1"}});  // GPU 0 does not change
    ASSERT_TRUE(eventually([&] { return pids_seen(2); }));
    auto o = options();
    o.process_timeout = 1s;
    EXPECT_EQ(mig::reconfigure(*session, "all-1g.10gb", "", o, hooks()), mig::Outcome::failed);
    EXPECT_THAT(state_log(), ElementsAre("pending", "failed"));
    EXPECT_THAT(event_log(), HasSubstr("Warning MigConfigFailed: MIG config 'all-1g.10gb' failed: still in use after 1s: "
                                       "GPU 2 (NVIDIA A100-SXM4-80GB) (pids 4242; pods team-a/train-0); once they are gone"));
    EXPECT_THAT(event_log(), Not(HasSubstr("team-b"))) << "a pod on a GPU that does not change holds nothing up";
    EXPECT_FALSE(fs::exists(paused)) << "a failed run resumes the GPUs too";
    EXPECT_EQ(layout()[2], "off");
    EXPECT_EQ(layout()[3], "7x1g.10gb") << "the GPUs that could change did";
}

TEST_F(MigManager, AConfigThatCannotApplyFailsBeforeAnythingIsPausedOrChanged) {
    start();
    const auto before = layout();
    EXPECT_EQ(mig::reconfigure(*session, "too-much", "", options(), hooks()), mig::Outcome::failed);
    EXPECT_THAT(state_log(), ElementsAre("failed"));
    EXPECT_THAT(event_log(), HasSubstr("Warning MigConfigFailed: MIG config 'too-much' failed: GPU 0 (NVIDIA A100-SXM4-80GB): "));
    EXPECT_EQ(mig::reconfigure(*session, "all-9g", "", options(), hooks()), mig::Outcome::failed);
    EXPECT_THAT(event_log(), HasSubstr("selected mig-config not present: all-9g"));
    EXPECT_EQ(layout(), before);
    EXPECT_FALSE(fs::exists(paused));
}

TEST_F(MigManager, ANewLabelValueInterruptsTheWaitAndResumesTheGpus) {
    start();
    sim("proc 2 4242 1073741824");
    ASSERT_TRUE(eventually([&] { return pids_seen(2); }));
    std::atomic<int> outcome{-1};
    std::thread run([&] { outcome = static_cast<int>(mig::reconfigure(*session, "all-1g.10gb", "", options(), hooks())); });
    ASSERT_TRUE(eventually([&] { return fs::exists(paused) && event_log().find("MigConfigWaiting") != std::string::npos; }));
    interrupt = true;
    run.join();
    EXPECT_EQ(outcome.load(), static_cast<int>(mig::Outcome::interrupted));
    EXPECT_FALSE(fs::exists(paused));
}

// A pod whose container holds a GPU but runs no CUDA process yet (the kubelet's PodResources
// says so): the GPU is in use all the same. On a MIG GPU only the pods on instances that would be
// destroyed count.
TEST_F(MigManager, APodWithoutAProcessYetHoldsItsGpuAndOnlyInstancesThatGoCount) {
    start();
    auto gpus = mig::read_node(*session);
    ASSERT_TRUE(gpus);
    // GPU 1's 3g.40gb (destroyed by all-1g.10gb) and a 1g.10gb the plan keeps.
    auto entries = mig::load_entries(config, "all-1g.10gb");
    ASSERT_TRUE(entries);
    const auto a = mig::assess(*gpus, *entries, false);
    const auto step = std::ranges::find(a.steps, std::size_t{1}, &mig::Step::gpu);
    ASSERT_NE(step, a.steps.end());
    ASSERT_TRUE(step->plan);
    unsigned gi_3g = 0, gi_1g = 0;
    for (const auto& i : step->plan->keep)
        if (i.profile == "1g.10gb") gi_1g = *i.gi_id;
    for (const auto& i : step->plan->destroy)
        if (i.profile == "3g.40gb") gi_3g = *i.gi_id;
    ASSERT_NE(gi_1g, 0u) << "the plan keeps one of GPU 1's 1g.10gb instances";
    set_pods({{3, std::nullopt, "team-a/starting"}, {1, gi_1g, "team-c/small"}});
    std::atomic<int> outcome{-1};
    std::thread run([&] { outcome = static_cast<int>(mig::reconfigure(*session, "all-1g.10gb", "", options(), hooks())); });
    ASSERT_TRUE(eventually([&] { return event_log().find("MigConfigWaiting") != std::string::npos; })) << event_log();
    EXPECT_THAT(event_log(), HasSubstr("waits for GPU 3 (NVIDIA A100-SXM4-80GB) (pods team-a/starting) to be free"));
    EXPECT_THAT(event_log(), Not(HasSubstr("team-c"))) << "GPU 1's 1g.10gb instance is kept";
    EXPECT_TRUE(eventually([&] { return layout()[1] == "7x1g.10gb"; }));
    EXPECT_EQ(layout()[3], "off");
    set_pods({{1, gi_3g, "team-d/gone-soon"}});  // not a GPU that is still to change: nothing
    set_pods({});
    run.join();
    EXPECT_EQ(outcome.load(), static_cast<int>(mig::Outcome::success)) << event_log();
    EXPECT_EQ(layout()[3], "7x1g.10gb");
}

// A GPU whose mode change only a reboot applies (fixture mig.reset_required: a GPU passed through
// to a VM): failed with the reason, or with --with-reboot, rebooting; after that reboot, a mode
// still not changed is failed, never a loop of reboots.
TEST_F(MigManager, AModeChangeOnlyARebootAppliesIsFailedOrRebootingNeverPending) {
    auto text = files::read(std::string(KGPU_SOURCE_DIR) + "/sim/nodes/a100-mig.yaml");
    ASSERT_TRUE(text);
    const std::string vm = std::regex_replace(*text, std::regex(R"(mig: \{mode: disabled, max_devices: 7\})"),
                                              "mig: {mode: disabled, max_devices: 7, reset_required: true}");
    ASSERT_NE(vm, *text);
    start(dir.write("vm.yaml", vm));
    EXPECT_EQ(mig::reconfigure(*session, "all-1g.10gb", "", options(), hooks()), mig::Outcome::failed);
    EXPECT_THAT(state_log(), ElementsAre("pending", "failed"));
    EXPECT_THAT(event_log(), HasSubstr("the MIG mode change is pending a GPU reset (the driver says only a reboot applies it"));
    EXPECT_THAT(event_log(), HasSubstr("reboot the node, or run the MIG manager with --with-reboot"));
    EXPECT_FALSE(fs::exists(paused));
    EXPECT_EQ(layout()[1], "7x1g.10gb") << "the GPUs that need no reset change first";

    // With --with-reboot: not while a GPU is still waited for (its pod would die with the node).
    sim("mig 1 3g.40gb,2g.20gb");  // GPU 1 to change again, with a pod on its 3g.40gb
    ASSERT_TRUE(eventually([&] { return layout()[1] == "1x2g.20gb 1x3g.40gb"; })) << layout()[1];
    auto gpus = mig::read_node(*session);
    ASSERT_TRUE(gpus);
    for (const auto& i : (*gpus)[1].instances)
        if (i.profile == "3g.40gb") set_pods({{1, i.gi_id, "team-a/on-gpu-1"}});
    auto o = options();
    o.with_reboot = true;
    std::atomic<int> outcome{-1};
    std::thread run([&] { outcome = static_cast<int>(mig::reconfigure(*session, "all-1g.10gb", "failed", o, hooks())); });
    ASSERT_TRUE(eventually([&] { return event_log().find("(pods team-a/on-gpu-1)") != std::string::npos; })) << event_log();
    EXPECT_EQ(reboots.load(), 0) << "no reboot while GPU 1 is in use";
    set_pods({});
    run.join();
    EXPECT_EQ(outcome.load(), static_cast<int>(mig::Outcome::rebooting)) << event_log();
    EXPECT_EQ(reboots.load(), 1);
    EXPECT_EQ(layout()[1], "7x1g.10gb") << "GPU 1 changed before the reboot";
    EXPECT_EQ(state_log().back(), "rebooting");
    EXPECT_THAT(event_log(), HasSubstr("Warning MigConfigRebooting: GPU 2 (NVIDIA A100-SXM4-80GB): the MIG mode change is "
                                       "pending a GPU reset"));
    // The node came back (this simulator keeps the pending mode: nothing reset it).
    EXPECT_EQ(mig::reconfigure(*session, "all-1g.10gb", "rebooting", o, hooks()), mig::Outcome::failed);
    EXPECT_EQ(reboots.load(), 1);
    EXPECT_THAT(event_log(), HasSubstr("MIG mode change did not take effect after rebooting: GPU 2"));
}

}  // namespace
}  // namespace kgpu::test

namespace kgpu::test {
namespace {

// Bad flags are refused before anything starts (exit 2, naming the flag and what is expected);
// a missing API server configuration is exit 1 naming what is missing.
TEST(MigManagerCli, BadInputIsRefusedNamingTheFlag) {
    TempDir dir;
    const std::string config = dir.write("config.yaml", kMigConfigs);
    const std::map<std::string, std::string> env = {{"KGPU_SIM_NODE", std::string(KGPU_SOURCE_DIR) + "/sim/nodes/a100-mig.yaml"},
                                                    {"KGPU_SIM_EVENTS", dir.write("events", "")},
                                                    {"NODE_NAME", ""}, {"CONFIG_FILE", ""}, {"DEFAULT_CONFIG_FILE", ""},
                                                    {"KUBECONFIG", ""}, {"KUBERNETES_SERVICE_HOST", ""}};
    auto mm = [&](std::vector<std::string> args) {
        std::vector<std::string> argv = {KGPU_BINARY, "mig-manager", "--nvml-library", KGPU_SIM_LIBRARY};
        argv.insert(argv.end(), args.begin(), args.end());
        return run_process(argv, env);
    };
    auto r = mm({"-f", config});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("invalid -n <node-name> flag: must not be empty string"));
    r = mm({"-n", "Node_1", "-f", config});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("Node_1"));
    r = mm({"-n", "node-1"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("-f <config-file> is required"));
    r = mm({"-n", "node-1", "-f", config, "--process-timeout", "0s"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("--process-timeout / KGPU_MIG_PROCESS_TIMEOUT '0s': expected a duration above zero"));
    r = mm({"-n", "node-1", "-f", config, "--with-reboot=maybe"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("--with-reboot / WITH_REBOOT"));
    // Everything right but no API server to ask.
    r = mm({"-n", "node-1", "-f", config});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr("kgpu mig-manager: "));
    EXPECT_THAT(r.err, HasSubstr("KUBERNETES_SERVICE_HOST"));
}

}  // namespace
}  // namespace kgpu::test
