// Checks deploy/ (Kubernetes manifests, examples, Helm chart, Dockerfile, the image's files) and
// docs/configuration.md against the built binary, without a cluster, helm or docker: each TEST
// runs one check of check_deploy.py (its docstring lists what each one asserts) with Debian's
// /usr/bin/python3 (python3-yaml) and shows the problems it printed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/process.h"

namespace {

const std::string kSource = KGPU_SOURCE_DIR;

void check(const std::vector<std::string>& what) {
    std::vector<std::string> argv = {"/usr/bin/python3", kSource + "/tests/deploy/check_deploy.py", kSource,
                                     KGPU_BINARY, KGPU_SIM_LIBRARY};
    argv.insert(argv.end(), what.begin(), what.end());
    auto r = kgpu::test::run_process(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
}

TEST(Deploy, ManifestsAndExamplesAreValid) { check({"manifests"}); }
TEST(Deploy, DevicePluginArgsAreAccepted) { check({"args", "device-plugin"}); }
TEST(Deploy, LabelsArgsAreAccepted) { check({"args", "labels"}); }
TEST(Deploy, ExporterArgsAreAccepted) { check({"args", "exporter"}); }
TEST(Deploy, DevicePluginHostPathsAreTheDefaults) { check({"hostpaths", "device-plugin"}); }
TEST(Deploy, LabelsHostPathsAreTheDefaults) { check({"hostpaths", "labels"}); }
TEST(Deploy, ExporterHostPathsAreTheDefaults) { check({"hostpaths", "exporter"}); }
TEST(Deploy, ImageHoldsTheBinaryItsLibrariesAndNothingElse) { check({"dockerfile"}); }
TEST(Deploy, ManifestsRunWhatTheImageHas) { check({"image"}); }
TEST(Deploy, HelmChartMatchesTheManifests) { check({"helm"}); }
TEST(Docs, ConfigurationReferenceCoversEveryFlag) { check({"configdoc"}); }
TEST(Docs, MeasuredFiguresLiveOnlyInTheReadme) { check({"docs-figures"}); }
TEST(Docs, OperatorGuideListsEveryManifest) { check({"docs-manifests"}); }
TEST(Docs, CommandsThatNeverReturnAreBackgrounded) { check({"docs-commands"}); }
TEST(Deploy, MpsControlDaemonIsNvidias) { check({"mps"}); }
TEST(Deploy, HelmPrometheusRuleHasTheRulesOfThePlainFile) { check({"helm-prometheusrule"}); }
TEST(Deploy, HelmChartKeepsNvidiasToolkitOrInstallsKgpus) { check({"helm-toolkit"}); }
TEST(Deploy, HelmExporterWebConfigServesTlsAndBasicAuth) { check({"helm-webconfig"}); }
TEST(Setup, QuickStartInstallsAndBuildsOnlyWhatTheDemoRuns) { check({"setup"}); }

}  // namespace
