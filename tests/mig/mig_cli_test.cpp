// `kgpu mig apply | assert | export` end to end: the built binary on the simulated A100 node
// (sim/nodes/a100-mig.yaml: GPU 0 7x 1g.10gb, GPU 1 3g.40gb + 2g.20gb + 2x 1g.10gb, GPUs 2-3 MIG
// off), every change made through NVML and seen by other processes through the events file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

#include "mig_configs.h"
#include "support/files.h"
#include "support/process.h"

namespace kgpu::test {
namespace {

using ::testing::HasSubstr;


class MigCli : public ::testing::Test {
protected:
    TempDir dir;
    std::string config = dir.write("config.yaml", kMigConfigs);
    std::string events = dir.write("events", "");

    std::map<std::string, std::string> env() const {
        return {{"KGPU_SIM_NODE", std::string(KGPU_SOURCE_DIR) + "/sim/nodes/a100-mig.yaml"}, {"KGPU_SIM_EVENTS", events}};
    }
    RunResult mig(std::vector<std::string> args) const {
        std::vector<std::string> argv = {KGPU_BINARY, "mig"};
        argv.insert(argv.end(), args.begin(), args.end());
        argv.insert(argv.end(), {"--nvml-library", KGPU_SIM_LIBRARY});
        return run_process(argv, env());
    }
    RunResult apply(const std::string& name, std::vector<std::string> extra = {}) const {
        std::vector<std::string> a = {"apply", "-f", config, "-c", name};
        a.insert(a.end(), extra.begin(), extra.end());
        return mig(a);
    }
    // Another process's view: `kgpu info --json`, MIG devices per GPU.
    std::vector<std::vector<std::string>> profiles() const {
        auto r = run_process({KGPU_BINARY, "info", "--json", "--nvml-library", KGPU_SIM_LIBRARY}, env());
        EXPECT_EQ(r.exit_code, 0) << r.err;
        std::vector<std::vector<std::string>> out;
        const auto info = nlohmann::json::parse(r.out);
        for (const auto& g : info["gpus"]) {
            out.emplace_back();
            for (const auto& m : g["mig"]["devices"]) out.back().push_back(m["profile"]);
            std::sort(out.back().begin(), out.back().end());
        }
        return out;
    }
    void sim(const std::string& line) const {
        std::ofstream(events, std::ios::app) << line << "\n";
    }
};

TEST_F(MigCli, ExportPrintsTheLayoutInMigPartedsFormat) {
    auto r = mig({"export"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, R"(version: v1
mig-configs:
  current:
  - devices: [0]
    mig-enabled: true
    mig-devices:
      "1g.10gb": 7
  - devices: [1]
    mig-enabled: true
    mig-devices:
      "1g.10gb": 2
      "2g.20gb": 1
      "3g.40gb": 1
  - devices: [2,3]
    mig-enabled: false
    mig-devices: {}
)");
    auto j = mig({"export", "-o", "json", "-l", "now"});
    ASSERT_EQ(j.exit_code, 0) << j.err;
    EXPECT_EQ(nlohmann::json::parse(j.out)["mig-configs"]["now"][1]["mig-devices"]["3g.40gb"], 1);
    // What export prints is a config that apply and assert take back.
    const std::string exported = dir.write("exported.yaml", r.out);
    auto a = mig({"assert", "-f", exported});
    EXPECT_EQ(a.exit_code, 0) << a.err;
    EXPECT_THAT(a.out, HasSubstr("Selected MIG configuration currently applied"));
}

TEST_F(MigCli, ApplyMakesEveryGpuMatchOnceAndASecondApplyChangesNothing) {
    auto before = mig({"assert", "-f", config, "-c", "all-1g.10gb"});
    EXPECT_EQ(before.exit_code, 1);
    EXPECT_THAT(before.err, HasSubstr("GPU 1 (NVIDIA A100-SXM4-80GB): has 2 x 1g.10gb, 1 x 2g.20gb, 1 x 3g.40gb"));
    EXPECT_THAT(before.err, HasSubstr("GPU 2 (NVIDIA A100-SXM4-80GB): MIG mode is disabled"));
    auto r = apply("all-1g.10gb");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("MIG configuration applied successfully"));
    const std::vector<std::string> seven(7, "1g.10gb");
    EXPECT_EQ(profiles(), (std::vector<std::vector<std::string>>{seven, seven, seven, seven}));
    EXPECT_EQ(mig({"assert", "-f", config, "-c", "all-1g.10gb"}).exit_code, 0);
    // Idempotent: nothing is written to the node's state the second time.
    const std::string state = slurp(events);
    auto again = apply("all-1g.10gb");
    EXPECT_EQ(again.exit_code, 0) << again.err;
    EXPECT_EQ(slurp(events), state);
    // GPU 0's instances were right from the start: they were not re-created.
    EXPECT_THAT(state, ::testing::Not(HasSubstr("mig 0 ")));
    // And back: MIG off everywhere.
    auto off = apply("all-disabled");
    ASSERT_EQ(off.exit_code, 0) << off.err;
    EXPECT_EQ(profiles(), (std::vector<std::vector<std::string>>(4)));
    EXPECT_EQ(mig({"assert", "-f", config, "-c", "all-disabled"}).exit_code, 0);
}

TEST_F(MigCli, ALayoutThatCannotFitIsRefusedBeforeAnythingChanges) {
    auto r = apply("too-much");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("nothing changed"));
    EXPECT_THAT(r.err, HasSubstr("GPU 0 (NVIDIA A100-SXM4-80GB): no arrangement of 1 x 1g.10gb, 2 x 3g.40gb fits"));
    EXPECT_EQ(slurp(events), "");
    auto unknown = apply("all-3g.20gb");
    EXPECT_EQ(unknown.exit_code, 1);
    EXPECT_THAT(unknown.err, HasSubstr("selected mig-config not present: all-3g.20gb"));
    auto missing = mig({"apply", "-c", "all-disabled"});
    EXPECT_EQ(missing.exit_code, 1);
    EXPECT_THAT(missing.err, HasSubstr("config-file"));
}

TEST_F(MigCli, AGpuWithProcessesIsLeftAloneUnlessForced) {
    sim("proc 1:0 4242 1048576 trainer");  // on GPU 1's 3g.40gb
    auto r = apply("all-1g.10gb");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("GPU 1 (NVIDIA A100-SXM4-80GB) has processes on what would change (pids 4242)"));
    EXPECT_THAT(r.err, HasSubstr("nothing changed"));
    // GPUs 2 and 3 alone can change: their entry does not touch GPU 1.
    auto two = apply("two-3g");
    ASSERT_EQ(two.exit_code, 0) << two.err;
    EXPECT_EQ(profiles()[2], (std::vector<std::string>{"3g.40gb", "3g.40gb"}));
    // --force goes ahead, but the driver does not destroy an instance a process runs on.
    auto forced = apply("all-1g.10gb", {"--force"});
    EXPECT_EQ(forced.exit_code, 1);
    EXPECT_THAT(forced.err, HasSubstr("GPU 1 (NVIDIA A100-SXM4-80GB): destroying GPU instance 2: "));
    sim("noproc 1 4242");
    auto done = apply("all-1g.10gb");
    EXPECT_EQ(done.exit_code, 0) << done.err;
    EXPECT_EQ(profiles()[1], std::vector<std::string>(7, "1g.10gb"));
}

TEST_F(MigCli, KeepsWhatIsRightAndPlacesTheRestAroundIt) {
    // GPU 1 has 3g.40gb at 0 (GI 2) and 2g.20gb at 4; balanced wants 3g + 2g + 2x 1g: all there.
    auto r = apply("all-balanced");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(slurp(events), ::testing::Not(HasSubstr("mig 1 ")));
    // GPU 0 (7x 1g) had to change; a second process sees the balanced layout.
    EXPECT_EQ(profiles()[0], (std::vector<std::string>{"1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"}));
}

TEST_F(MigCli, AGpuInstanceWithoutItsComputeInstanceIsNoMigDeviceAndIsRemade) {
    sim("mig 2 3g.40gb@0:gi1,3g.40gb@4:gi2:ci0");  // gi1 was left half made
    auto a = mig({"assert", "-f", config, "-c", "two-3g"});
    EXPECT_EQ(a.exit_code, 1);
    EXPECT_THAT(a.err, HasSubstr("GPU 2 (NVIDIA A100-SXM4-80GB): GPU instance 1 has no compute instance"));
    auto r = apply("two-3g");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(profiles()[2], (std::vector<std::string>{"3g.40gb", "3g.40gb"}));
}

TEST_F(MigCli, AModeChangeOnABusyGpuIsPendingUntilAResetAndSaysSo) {
    sim("proc 3 777 1048576");
    auto r = apply("two-3g", {"--force"});
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_THAT(r.err, HasSubstr("GPU 3 (NVIDIA A100-SXM4-80GB): MIG mode enabled is pending"));
    EXPECT_THAT(r.err, HasSubstr("reset it"));
    auto a = mig({"assert", "-f", config, "-c", "two-3g"});
    EXPECT_EQ(a.exit_code, 1);
    EXPECT_THAT(a.err, HasSubstr("(the change is pending a GPU reset)"));
    sim("noproc 3 777");
    sim("reset 3");
    auto again = apply("two-3g");
    EXPECT_EQ(again.exit_code, 0) << again.err;
    EXPECT_EQ(profiles()[3], (std::vector<std::string>{"3g.40gb", "3g.40gb"}));
}

}  // namespace
}  // namespace kgpu::test
