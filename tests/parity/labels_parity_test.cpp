// gpu-feature-discovery v0.18.2 and `kgpu labels` on the same simulated node, compared as data:
// every fixture of sim/nodes × every MIG strategy × every sharing config of tests/parity/configs
// (and no config), plus the graphics and vGPU shapes of the PCI functions. Both run once
// (`--oneshot --no-timestamp`) on the simulator with the same machine-type file and PCI sysfs
// (GFD sees it bind-mounted over /sys); the labels (and the exit code) must be equal except for
// the differences documented in docs/migration.md.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <sstream>

#include "parity/parity.h"
#include "parity/sysfs.h"
#include "support/process.h"

namespace fs = std::filesystem;
using kgpu::parity::Flat;
using kgpu::test::run_process;
using kgpu::test::RunResult;
using kgpu::test::TempDir;

namespace {

const std::string kSource = KGPU_SOURCE_DIR;

struct Case {
    std::string fixture, strategy, config;  // config: a file of tests/parity/configs without .yaml, or ""
    kgpu::parity::PciKind pci = kgpu::parity::PciKind::compute;
    std::string name() const {
        std::string n = fixture + "/" + strategy + "/" + (config.empty() ? "no-config" : config);
        if (pci == kgpu::parity::PciKind::graphics) n += "/graphics";
        if (pci == kgpu::parity::PciKind::vgpu) n += "/vgpu";
        return n;
    }
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

// The feature file's labels and the exit code.
Flat result(const RunResult& r, const std::string& file) {
    Flat f{{"exit", std::to_string(r.exit_code)}};
    std::istringstream in(kgpu::parity::slurp(file));
    for (std::string line; std::getline(in, line);) {
        const auto eq = line.find('=');
        f[eq == std::string::npos ? "line " + line : line.substr(0, eq)] = eq == std::string::npos ? "" : line.substr(eq + 1);
    }
    return f;
}

class LabelsParity : public ::testing::TestWithParam<Case> {};

TEST_P(LabelsParity, GfdAndKgpuWriteTheSameLabels) {
    KGPU_REQUIRE_PEER(gfd, "gpu-feature-discovery");
    const Case& c = GetParam();
    const std::string node = kSource + "/sim/nodes/" + c.fixture + ".yaml";
    TempDir sys, out;
    kgpu::parity::write_sysfs(sys, node, c.pci);
    const std::string machine = out.write("product_name", "DGX H100\n");
    std::vector<std::string> args = {"--oneshot", "--no-timestamp", "--machine-type-file", machine, "--mig-strategy", c.strategy};
    if (!c.config.empty()) args.insert(args.end(), {"--config-file", kSource + "/tests/parity/configs/" + c.config + ".yaml"});

    std::vector<std::string> nvidia = {gfd, "--output-file", out.path() + "/gfd"};
    nvidia.insert(nvidia.end(), args.begin(), args.end());
    const auto g = run_process(kgpu::parity::in_namespace({{sys.path(), "/sys"}}, nvidia),
                               {{"KGPU_SIM_NODE", node}, {"LD_LIBRARY_PATH", fs::path(KGPU_SIM_LIBRARY).parent_path().string()}});
    ASSERT_NE(g.exit_code, 127) << "cannot run " << gfd << ": " << g.err;

    std::vector<std::string> kgpu = {KGPU_BINARY, "labels", "--nvml-library", KGPU_SIM_LIBRARY, "--sysfs-root", sys.path(),
                                     "--output-file", out.path() + "/kgpu"};
    kgpu.insert(kgpu.end(), args.begin(), args.end());
    const auto k = run_process(kgpu, {{"KGPU_SIM_NODE", node}});

    SCOPED_TRACE("GFD stderr:\n" + g.err + "\nkgpu stderr:\n" + k.err);
    kgpu::parity::expect_parity("labels", c.name(), result(k, out.path() + "/kgpu"), result(g, out.path() + "/gfd"));
    // Not a comparison of two empty results: GFD labelled the node whenever it succeeded.
    if (g.exit_code == 0) {
        EXPECT_TRUE(fs::exists(out.path() + "/gfd"));
    }
}

std::vector<Case> cases() {
    std::vector<Case> out;
    for (const char* fixture : {"a100-mig", "a100-mig-uniform", "dgx-h100", "empty", "pcie-nvlink-pairs", "t4x4"})
        for (const char* strategy : {"none", "single", "mixed"})
            for (const char* config : {"", "time-slicing", "time-slicing-rename", "mps", "mig-time-slicing"})
                out.push_back({fixture, strategy, config});
    // The PCI functions' other shapes: gpu.mode graphics, vGPU guests (vgpu.* labels).
    for (const char* config : {"", "time-slicing"}) {
        out.push_back({"t4x4", "none", config, kgpu::parity::PciKind::graphics});
        out.push_back({"t4x4", "none", config, kgpu::parity::PciKind::vgpu});
    }
    out.push_back({"a100-mig", "mixed", "", kgpu::parity::PciKind::vgpu});
    return out;
}

std::string test_name(std::string n) {
    for (auto& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return n;
}

INSTANTIATE_TEST_SUITE_P(Nodes, LabelsParity, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return test_name(info.param.name()); });

// The suite is as wide as the issue asks: at least 48 cases, every fixture in sim/nodes.
TEST(LabelsParityCases, EveryFixtureEveryStrategyAtLeast48) {
    std::set<std::string> fixtures;
    for (const auto& e : fs::directory_iterator(kSource + "/sim/nodes"))
        if (e.path().extension() == ".yaml") fixtures.insert(e.path().stem().string());
    std::set<std::string> covered;
    for (const auto& c : cases()) covered.insert(c.fixture);
    EXPECT_EQ(covered, fixtures);
    EXPECT_GE(cases().size(), 48u);
}

// GFD's own settings from the config file (its `flags:` and `flags.gfd:` sections, as GFD's
// NewConfig reads them), and what wins over them: both binaries get the same file, with only the
// output file's name different, and the same flags and variables.
struct FileCase {
    std::string name;
    std::string flags;                           // the file's flags: section, {out} and {machine} replaced
    std::vector<std::string> args;               // given to both, {out} replaced by each one's file
    std::map<std::string, std::string> env;      // given to both
    bool nvml = true;                            // false: neither finds an NVML library
};

void PrintTo(const FileCase& c, std::ostream* os) { *os << c.name; }

class LabelsFromConfigFile : public ::testing::TestWithParam<FileCase> {};

TEST_P(LabelsFromConfigFile, GfdAndKgpuReadTheSameSettings) {
    KGPU_REQUIRE_PEER(gfd, "gpu-feature-discovery");
    const FileCase& c = GetParam();
    const std::string node = kSource + "/sim/nodes/a100-mig.yaml";
    TempDir sys, out;
    kgpu::parity::write_sysfs(sys, node, kgpu::parity::PciKind::compute);
    const std::string machine = out.write("product_name", "DGX H100\n");
    auto filled = [&](std::string text, const std::string& who) {
        for (const auto& [key, value] : {std::pair<std::string, std::string>{"{out}", out.path() + "/" + who},
                                         {"{machine}", machine}}) {
            for (auto at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
                text.replace(at, key.size(), value);
        }
        return text;
    };
    auto run = [&](const std::string& who, std::vector<std::string> argv, std::map<std::string, std::string> env) {
        const std::string config = out.write(who + ".yaml", "version: v1\nflags:\n" + filled(c.flags, who + "-file"));
        argv.insert(argv.end(), {"--config-file", config});
        for (const auto& a : c.args) argv.push_back(filled(a, who));
        env.insert(c.env.begin(), c.env.end());
        env["KGPU_SIM_NODE"] = node;
        // GFD runs until told otherwise when it misses `oneshot`: bounded, so the failure is an exit code.
        argv.insert(argv.begin(), {"/usr/bin/timeout", "30"});
        return run_process(argv, env);
    };
    const std::string sim_dir = fs::path(KGPU_SIM_LIBRARY).parent_path().string();
    const auto g = run("gfd", kgpu::parity::in_namespace({{sys.path(), "/sys"}}, {gfd}),
                       {{"LD_LIBRARY_PATH", c.nvml ? sim_dir : out.path() + "/no-nvml"}});
    ASSERT_NE(g.exit_code, 127) << "cannot run " << gfd << ": " << g.err;
    const auto k = run("kgpu",
                       {KGPU_BINARY, "labels", "--nvml-library", c.nvml ? KGPU_SIM_LIBRARY : out.path() + "/no-nvml/libnvidia-ml.so.1",
                        "--sysfs-root", sys.path()},
                       {});
    SCOPED_TRACE("GFD stderr:\n" + g.err + "\nkgpu stderr:\n" + k.err);
    EXPECT_NE(g.exit_code, 124) << "GFD did not run once";
    EXPECT_NE(k.exit_code, 124) << "kgpu did not run once";
    // Each wrote where the winning setting said, and only there.
    EXPECT_EQ(fs::exists(out.path() + "/gfd"), fs::exists(out.path() + "/kgpu")) << "the flag's output file";
    EXPECT_EQ(fs::exists(out.path() + "/gfd-file"), fs::exists(out.path() + "/kgpu-file")) << "the file's output file";
    const std::string gfd_out = fs::exists(out.path() + "/gfd") ? "/gfd" : "/gfd-file";
    const std::string kgpu_out = fs::exists(out.path() + "/kgpu") ? "/kgpu" : "/kgpu-file";
    kgpu::parity::expect_parity("labels", "config-file/" + c.name, result(k, out.path() + kgpu_out),
                                result(g, out.path() + gfd_out));
    if (g.exit_code == 0) {
        EXPECT_TRUE(fs::exists(out.path() + gfd_out)) << "GFD labelled nothing: a comparison of two empty results";
    }
}

std::vector<FileCase> file_cases() {
    const std::string gfd_block = "  gfd:\n    oneshot: true\n    machineTypeFile: {machine}\n";
    return {
        // Everything from the file: no flag at all.
        {"everything-from-the-file",
         "  migStrategy: mixed\n  gfd:\n    oneshot: true\n    noTimestamp: true\n    outputFile: {out}\n"
         "    machineTypeFile: {machine}\n",
         {}, {}},
        // A flag and a variable win over the file: the strategy from GFD_MIG_STRATEGY, the output file
        // and the timestamp from flags.
        {"flags-and-variables-win",
         "  migStrategy: single\n  gfd:\n    oneshot: true\n    noTimestamp: false\n    outputFile: {out}\n"
         "    machineTypeFile: {machine}\n",
         {"--output-file", "{out}", "--no-timestamp"}, {{"GFD_MIG_STRATEGY", "mixed"}}},
        // failOnInitError from the file, without a driver: labels without devices, or a failure.
        {"no-driver-fail-on-init-error-false", "  failOnInitError: false\n" + gfd_block + "    noTimestamp: true\n",
         {"--output-file", "{out}"}, {}, false},
        {"no-driver-fail-on-init-error-true", "  failOnInitError: true\n" + gfd_block + "    noTimestamp: true\n",
         {"--output-file", "{out}"}, {}, false},
    };
}

INSTANTIATE_TEST_SUITE_P(Settings, LabelsFromConfigFile, ::testing::ValuesIn(file_cases()),
                         [](const auto& info) { return test_name(info.param.name); });

}  // namespace
