// What a user reads when a command line is wrong or the environment is missing something
// (issue #23 "Messages"): each message names the input and says what to do, and NVIDIA's Go
// spellings (`-debug`) work as in the binaries kgpu replaces. The built binary, end to end.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "support/process.h"

using kgpu::test::run_process;
using kgpu::test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

TEST(Messages, AnUnknownSubcommandIsNamedWithASuggestion) {
    auto r = run_process({KGPU_BINARY, "exporterr"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("kgpu: unknown subcommand 'exporterr' (did you mean 'exporter'?)"));
    EXPECT_THAT(r.err, HasSubstr("device-plugin"));  // the list
    EXPECT_THAT(r.err, Not(HasSubstr("A subcommand is required")));
    auto far = run_process({KGPU_BINARY, "--log-level", "debug", "frobnicate"});
    EXPECT_EQ(far.exit_code, 2);
    EXPECT_THAT(far.err, HasSubstr("unknown subcommand 'frobnicate'"));
    EXPECT_THAT(far.err, Not(HasSubstr("did you mean")));
    // Nothing at all is still CLI11's own answer.
    EXPECT_EQ(run_process({KGPU_BINARY}).exit_code, 2);
}

TEST(Messages, HelpAndVersionAreSubcommandsToo) {
    auto version = run_process({KGPU_BINARY, "version"});
    EXPECT_EQ(version.exit_code, 0) << version.err;
    auto flag = run_process({KGPU_BINARY, "--version"});
    EXPECT_EQ(version.out, flag.out);
    EXPECT_FALSE(version.out.empty());
    auto help = run_process({KGPU_BINARY, "help"});
    EXPECT_EQ(help.exit_code, 0) << help.err;
    EXPECT_THAT(help.out, HasSubstr("device-plugin"));
    EXPECT_THAT(help.out, HasSubstr("exporter"));
    auto sub = run_process({KGPU_BINARY, "help", "exporter"});
    EXPECT_EQ(sub.exit_code, 0) << sub.err;
    EXPECT_THAT(sub.out, HasSubstr("--collect-interval"));
    auto bad = run_process({KGPU_BINARY, "help", "exportr"});
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_THAT(bad.err, HasSubstr("did you mean 'exporter'?"));
}

// dcgm-exporter (urfave/cli on Go's flag package) takes `-debug` as `--debug`; CLI11 read it as
// `-d ebug` and blamed --devices.
TEST(Messages, GoStyleSingleDashFlags) {
    auto r = run_process({KGPU_BINARY, "exporter", "-debug", "-print-default-counters"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("DCGM_FI_DEV_GPU_UTIL"));
    auto bad = run_process({KGPU_BINARY, "exporter", "-debugg"});
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_THAT(bad.err, HasSubstr("kgpu exporter: unknown flag -debugg"));
    EXPECT_THAT(bad.err, Not(HasSubstr("--devices")));
    // NVIDIA's device plugin and GFD take them too: a Go spelling with a value.
    auto labels = run_process({KGPU_BINARY, "labels", "-oneshot", "-output-file=-", "-nvml-library=/nonexistent/lib.so",
                               "-fail-on-init-error=false", "--sysfs-root", "/nonexistent"});
    EXPECT_EQ(labels.exit_code, 0) << labels.err;
    EXPECT_THAT(labels.out, HasSubstr("nvidia.com/gpu.present=false"));
}

TEST(Messages, SmiSaysWhichModesItHas) {
    for (const std::string form : {"--query-gpu=name,uuid", "-q"}) {
        auto r = run_process({KGPU_BINARY, "smi", form});
        EXPECT_EQ(r.exit_code, 2) << form;
        EXPECT_THAT(r.err, HasSubstr(form)) << r.err;
        EXPECT_THAT(r.err, HasSubstr("-L, --list-gpus")) << r.err;
        EXPECT_THAT(r.err, HasSubstr("kgpu info --json")) << r.err;
    }
    // Run as nvidia-smi.
    TempDir dir;
    std::filesystem::create_symlink(KGPU_BINARY, dir.path() + "/nvidia-smi");
    auto r = run_process({dir.path() + "/nvidia-smi", "--query-gpu=name"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("nvidia-smi (kgpu): "));
    EXPECT_THAT(r.err, HasSubstr("default table"));
}

// The simulator without its node: not the real driver's "kernel module is not loaded".
TEST(Messages, TheSimulatorWithoutKgpuSimNodeSaysWhatToSet) {
    auto r = run_process({KGPU_BINARY, "info", "--nvml-library", KGPU_SIM_LIBRARY}, {{"KGPU_SIM_NODE", ""}});
    EXPECT_EQ(r.exit_code, 1);
    const std::string fixture = std::filesystem::path(KGPU_SIM_LIBRARY).parent_path().string() + "/nodes/dgx-h100.yaml";
    EXPECT_THAT(r.err, HasSubstr("KGPU_SIM_NODE is unset"));
    EXPECT_THAT(r.err, HasSubstr("KGPU_SIM_NODE=" + fixture));
    EXPECT_THAT(r.err, Not(HasSubstr("kernel module")));
}

// A feature file that cannot be written (non-root: NFD's features.d is root's) points to stdout.
TEST(Messages, LabelsThatCannotBeWrittenSuggestStdout) {
    TempDir dir;
    const std::string not_a_dir = dir.write("file", "");
    auto r = run_process({KGPU_BINARY, "labels", "--oneshot", "--output-file", not_a_dir + "/kgpu", "--nvml-library",
                          KGPU_SIM_LIBRARY, "--sysfs-root", dir.path()},
                         {{"KGPU_SIM_NODE", std::string(KGPU_SOURCE_DIR) + "/sim/nodes/t4x4.yaml"}});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr(not_a_dir + " is not a directory"));
    EXPECT_THAT(r.err, HasSubstr("to print the labels instead, pass --output-file -"));
}

}  // namespace
