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
#include "support/process.h"

namespace kgpu::test {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

const char* kConfig = R"(version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - device-filter: ["0x233010DE", "0x20B210DE", "0x20B510DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
  too-much:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2, "1g.10gb": 1}
)";

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 20s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (pred()) return true;
        std::this_thread::sleep_for(10ms);
    }
    return pred();
}

class MigManager : public ::testing::Test {
protected:
    TempDir dir;
    std::string config = dir.write("config.yaml", kConfig);
    std::string events = dir.write("events", "");
    std::string paused = dir.path() + "/mig-manager/paused-gpus";
    std::optional<nvml::Session> session;

    std::mutex mu;
    std::vector<std::string> states;
    std::vector<std::string> posted;  // "<type> <reason>: <message>"
    std::atomic<int> reboots{0};
    std::atomic<bool> interrupt{false};

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

    mig::ManagerOptions options() const {
        mig::ManagerOptions o;
        o.config_file = config;
        o.paused_gpus_file = paused;
        o.poll = 50ms;
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
        h.pods_on = [](const std::vector<unsigned>& gpus) {
            std::string out;
            for (unsigned g : gpus) out += (out.empty() ? "" : ", ") + std::string("team-a/train-0 on GPU ") + std::to_string(g);
            return out;
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
    ASSERT_TRUE(eventually([&] { return pids_seen(2); }));
    const std::string gpu2 = uuid(2);
    std::atomic<int> outcome{-1};
    std::thread run([&] { outcome = static_cast<int>(mig::reconfigure(*session, "all-1g.10gb", "", options(), hooks())); });
    // GPUs 1 and 3 change; GPU 2 waits, paused (with the others while they change).
    ASSERT_TRUE(eventually([&] { return event_log().find("MigConfigWaiting") != std::string::npos; })) << event_log();
    EXPECT_THAT(event_log(), HasSubstr("waits for GPU 2 (NVIDIA A100-SXM4-80GB) (pids 4242) to be free (up to 20s); "
                                       "pods: team-a/train-0 on GPU 2"));
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
    run.join();
    EXPECT_EQ(outcome.load(), static_cast<int>(mig::Outcome::success)) << event_log();
    EXPECT_THAT(state_log(), ElementsAre("pending", "success"));
    EXPECT_THAT(layout(), ElementsAre("7x1g.10gb", "7x1g.10gb", "7x1g.10gb", "7x1g.10gb"));
    EXPECT_FALSE(fs::exists(paused));
}

TEST_F(MigManager, ProcessesPastTheTimeoutFailNamingThePodsAndNeverLeaveItPending) {
    start();
    sim("proc 2 4242 1073741824");
    ASSERT_TRUE(eventually([&] { return pids_seen(2); }));
    auto o = options();
    o.process_timeout = 1s;
    EXPECT_EQ(mig::reconfigure(*session, "all-1g.10gb", "", o, hooks()), mig::Outcome::failed);
    EXPECT_THAT(state_log(), ElementsAre("pending", "failed"));
    EXPECT_THAT(event_log(), HasSubstr("Warning MigConfigFailed: MIG config 'all-1g.10gb' failed: still in use after 1s: "
                                       "GPU 2 (NVIDIA A100-SXM4-80GB) (pids 4242); pods: team-a/train-0 on GPU 2"));
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

    auto o = options();
    o.with_reboot = true;
    EXPECT_EQ(mig::reconfigure(*session, "all-1g.10gb", "failed", o, hooks()), mig::Outcome::rebooting);
    EXPECT_EQ(reboots.load(), 1);
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
