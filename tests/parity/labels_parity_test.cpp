// gpu-feature-discovery v0.18.2 and `kgpu labels` on the same simulated node, compared as data:
// every fixture of sim/nodes × every MIG strategy × every sharing config of tests/parity/configs
// (and no config), plus the graphics and vGPU shapes of the PCI functions. Both run once
// (`--oneshot --no-timestamp`) on the simulator with the same machine-type file and PCI sysfs
// (GFD sees it bind-mounted over /sys); the labels (and the exit code) must be equal except for
// the differences documented in docs/migration.md.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
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

}  // namespace
