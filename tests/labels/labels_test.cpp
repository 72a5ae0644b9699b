// `kgpu labels --oneshot` on the simulator's fixtures, compared with expected feature files
// (tests/labels/expected; KGPU_UPDATE_EXPECTED=1 rewrites them after a reviewed change).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include "support/process.h"

using kgpu::test::run_process;
using kgpu::test::RunResult;
using kgpu::test::TempDir;
using ::testing::HasSubstr;

namespace {

const std::string kSource = KGPU_SOURCE_DIR;

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

RunResult labels(const std::string& fixture, const std::vector<std::string>& extra) {
    static TempDir sysfs;
    std::vector<std::string> argv = {KGPU_BINARY, "labels", "--oneshot", "--nvml-library", KGPU_SIM_LIBRARY,
                                     "--sysfs-root", sysfs.path()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_process(argv, {{"KGPU_SIM_NODE", kSource + "/sim/nodes/" + fixture + ".yaml"}});
}

struct Case {
    std::string fixture, strategy, config;
    std::string name() const { return fixture + "." + strategy + (config.empty() ? "" : "." + config); }
};

class LabelsFixture : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(LabelsFixture, FeatureFileMatchesExpectedAndEveryValueIsAValidLabel) {
    const auto& c = GetParam();
    TempDir out;
    std::vector<std::string> extra = {"--output-file", out.path() + "/kgpu", "--mig-strategy", c.strategy};
    if (!c.config.empty()) extra.insert(extra.end(), {"--config-file", kSource + "/tests/labels/fixtures/" + c.config + ".yaml"});
    auto r = labels(c.fixture, extra);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string got = slurp(out.path() + "/kgpu");
    const std::regex line(R"(nvidia\.com/[a-z0-9.\-]+=([A-Za-z0-9]([A-Za-z0-9_.\-]{0,61}[A-Za-z0-9])?)?)");
    std::istringstream lines(got);
    for (std::string l; std::getline(lines, l);) EXPECT_TRUE(std::regex_match(l, line)) << l;
    const std::string expected = kSource + "/tests/labels/expected/" + c.name() + ".txt";
    if (std::getenv("KGPU_UPDATE_EXPECTED")) std::ofstream(expected) << got;
    EXPECT_EQ(got, slurp(expected));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LabelsFixture,
                         ::testing::Values(Case{"dgx-h100", "none", ""}, Case{"t4x4", "none", ""},
                                           Case{"a100-mig", "none", ""}, Case{"a100-mig", "mixed", ""},
                                           Case{"a100-mig", "mixed", "time-slicing"}, Case{"empty", "none", ""}),
                         [](const auto& info) {
                             std::string n = info.param.name();
                             for (auto& ch : n)
                                 if (ch == '-' || ch == '.') ch = '_';
                             return n;
                         });

TEST(LabelsCli, ConfigFileStrategyAndFlagPrecedence) {
    // The config says mixed; the flag wins.
    auto r = labels("a100-mig", {"--output-file", "-", "--config-file", kSource + "/tests/labels/fixtures/time-slicing.yaml",
                                 "--mig-strategy", "none"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("nvidia.com/mig.strategy=none\n"));
    EXPECT_THAT(r.out, HasSubstr("nvidia.com/gpu.replicas=4\n"));
    EXPECT_THAT(r.out, HasSubstr("nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB-SHARED\n"));
}

TEST(LabelsCli, ErrorsNameTheInput) {
    auto single = labels("a100-mig", {"--output-file", "-", "--mig-strategy", "single"});
    EXPECT_EQ(single.exit_code, 1);
    EXPECT_THAT(single.err, HasSubstr("single"));
    auto bad = labels("t4x4", {"--output-file", "-", "--mig-strategy", "double"});
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_THAT(bad.err, HasSubstr("'double'"));
    auto interval = labels("t4x4", {"--output-file", "-", "--sleep-interval", "soon"});
    EXPECT_EQ(interval.exit_code, 2);
    EXPECT_THAT(interval.err, HasSubstr("'soon'"));
    auto config = labels("t4x4", {"--output-file", "-", "--config-file", kSource + "/tests/labels/fixtures/bad-sharing.yaml"});
    EXPECT_EQ(config.exit_code, 2);
    EXPECT_THAT(config.err, HasSubstr("bad-sharing.yaml:7"));
}
