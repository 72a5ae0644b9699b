// Label computation and the device plugin config subset on hand-built inventories.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "labels/config.h"
#include "labels/labels.h"
#include "support/process.h"

using namespace kgpu;
using ::testing::HasSubstr;

namespace {

inventory::Gpu gpu(unsigned index, bool mig, std::vector<std::string> profiles = {}) {
    inventory::Gpu g;
    g.index = index;
    g.uuid = "GPU-" + std::to_string(index);
    g.name = "NVIDIA A100-SXM4-80GB";
    g.memory_total_mib = 81920;
    g.cc_major = 8;
    g.architecture = "ampere";
    g.mig_mode = mig ? inventory::MigMode::enabled : inventory::MigMode::disabled;
    unsigned i = 0;
    for (const auto& p : profiles) {
        inventory::MigDevice m;
        m.index = i++;
        m.uuid = "MIG-" + std::to_string(index) + "-" + std::to_string(m.index);
        m.profile = p;
        m.memory_mib = p == "1g.10gb" ? 9728 : 19968;
        m.sm_count = p == "1g.10gb" ? 14 : 28;
        m.slices = p == "1g.10gb" ? 1 : 2;
        g.mig_devices.push_back(m);
    }
    return g;
}

inventory::Node node(std::vector<inventory::Gpu> gpus) {
    inventory::Node n;
    n.driver_version = "550.54.15";
    n.cuda_driver_version = 12040;
    n.gpus = std::move(gpus);
    return n;
}

}  // namespace

TEST(LabelsSanitize, KubernetesLabelValueRules) {
    EXPECT_EQ(labels::sanitize_value("NVIDIA A100-SXM4-80GB"), "NVIDIA-A100-SXM4-80GB");
    EXPECT_EQ(labels::sanitize_value(" (Tesla T4) "), "Tesla-T4");
    EXPECT_EQ(labels::sanitize_value("a/b:c"), "a-b-c");
    const std::string longv = labels::sanitize_value(std::string(70, 'x') + "-y");
    EXPECT_EQ(longv.size(), 63u);
    EXPECT_EQ(labels::sanitize_value(std::string(62, 'x') + "-y"), std::string(62, 'x'));  // no trailing '-'
    EXPECT_EQ(labels::sanitize_value("---"), "");
}

TEST(LabelsGenerate, WholeGpusWithDriverAndCudaVersions) {
    auto l = labels::generate(node({gpu(0, false), gpu(1, false)}), {});
    ASSERT_TRUE(l);
    EXPECT_EQ(l->at("nvidia.com/gpu.present"), "true");
    EXPECT_EQ(l->at("nvidia.com/gpu.count"), "2");
    EXPECT_EQ(l->at("nvidia.com/gpu.product"), "NVIDIA-A100-SXM4-80GB");
    EXPECT_EQ(l->at("nvidia.com/gpu.memory"), "81920");
    EXPECT_EQ(l->at("nvidia.com/gpu.family"), "ampere");
    EXPECT_EQ(l->at("nvidia.com/gpu.compute.major"), "8");
    EXPECT_EQ(l->at("nvidia.com/cuda.driver-version.major"), "550");
    EXPECT_EQ(l->at("nvidia.com/cuda.driver-version.revision"), "15");
    EXPECT_EQ(l->at("nvidia.com/cuda.runtime-version.full"), "12.4");
    EXPECT_EQ(l->at("nvidia.com/mig.capable"), "true");
    EXPECT_EQ(l->at("nvidia.com/gpu.replicas"), "1");
    EXPECT_EQ(l->at("nvidia.com/gpu.sharing-strategy"), "none");
}

TEST(LabelsGenerate, MixedStrategyLabelsEachProfileAndSharing) {
    labels::Options o;
    o.mig_strategy = labels::MigStrategy::mixed;
    o.sharing.strategy = "time-slicing";
    o.sharing.replicas["nvidia.com/mig-1g.10gb"] = 2;
    auto l = labels::generate(node({gpu(0, true, {"1g.10gb", "1g.10gb", "2g.20gb"}), gpu(1, false)}), o);
    ASSERT_TRUE(l);
    EXPECT_EQ(l->at("nvidia.com/gpu.count"), "1");
    EXPECT_EQ(l->at("nvidia.com/mig-1g.10gb.count"), "2");
    EXPECT_EQ(l->at("nvidia.com/mig-1g.10gb.memory"), "9728");
    EXPECT_EQ(l->at("nvidia.com/mig-1g.10gb.replicas"), "2");
    EXPECT_EQ(l->at("nvidia.com/mig-1g.10gb.sharing-strategy"), "time-slicing");
    EXPECT_EQ(l->at("nvidia.com/mig-1g.10gb.product"), "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb-SHARED");
    EXPECT_EQ(l->at("nvidia.com/mig-2g.20gb.count"), "1");
    EXPECT_EQ(l->at("nvidia.com/mig-2g.20gb.sharing-strategy"), "none");
    EXPECT_EQ(l->at("nvidia.com/mig.strategy"), "mixed");
}

TEST(LabelsGenerate, SingleStrategyNeedsOneLayout) {
    labels::Options o;
    o.mig_strategy = labels::MigStrategy::single;
    auto ok = labels::generate(node({gpu(0, true, {"1g.10gb", "1g.10gb"}), gpu(1, true, {"1g.10gb"})}), o);
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->at("nvidia.com/gpu.count"), "3");
    EXPECT_EQ(ok->at("nvidia.com/gpu.product"), "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb");
    EXPECT_EQ(ok->at("nvidia.com/gpu.memory"), "9728");
    auto mixed_modes = labels::generate(node({gpu(0, true, {"1g.10gb"}), gpu(1, false)}), o);
    ASSERT_FALSE(mixed_modes);
    EXPECT_THAT(mixed_modes.error().message, HasSubstr("1 of 2 GPUs"));
    auto two_profiles = labels::generate(node({gpu(0, true, {"1g.10gb", "2g.20gb"})}), o);
    ASSERT_FALSE(two_profiles);
    EXPECT_THAT(two_profiles.error().message, HasSubstr("2g.20gb"));
}

TEST(LabelsGenerate, NoGpusAndLostGpus) {
    auto none = labels::generate(node({}), {});
    ASSERT_TRUE(none);
    EXPECT_EQ(none->at("nvidia.com/gpu.present"), "false");
    EXPECT_EQ(none->at("nvidia.com/gpu.count"), "0");
    auto lost = gpu(1, false);
    lost.lost = true;
    auto l = labels::generate(node({gpu(0, false), lost}), {});
    ASSERT_TRUE(l);
    EXPECT_EQ(l->at("nvidia.com/gpu.count"), "1");
}

TEST(LabelsFeatureFile, SortedKeyValueLines) {
    EXPECT_EQ(labels::to_feature_file({{"b", "2"}, {"a", "1"}}), "a=1\nb=2\n");
}

TEST(LabelsConfig, ReadsStrategyAndSharingAndRejectsUnknownKeys) {
    auto cfg = labels::read_plugin_config(std::string(KGPU_SOURCE_DIR) + "/tests/labels/fixtures/time-slicing.yaml");
    ASSERT_TRUE(cfg) << cfg.error().message;
    EXPECT_EQ(cfg->mig_strategy, labels::MigStrategy::mixed);
    EXPECT_EQ(cfg->sharing.strategy, "time-slicing");
    EXPECT_EQ(cfg->sharing.replicas.at("nvidia.com/gpu"), 4u);
    auto bad = labels::read_plugin_config(std::string(KGPU_SOURCE_DIR) + "/tests/labels/fixtures/bad-sharing.yaml");
    ASSERT_FALSE(bad);
    EXPECT_THAT(bad.error().message, HasSubstr("bad-sharing.yaml:7"));
    EXPECT_THAT(bad.error().message, HasSubstr("'replica'"));
    test::TempDir dir;
    auto one = labels::read_plugin_config(dir.write("one.yaml", "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 1\n"));
    ASSERT_FALSE(one);
    EXPECT_THAT(one.error().message, HasSubstr("at least 2"));
    auto yaml = labels::read_plugin_config(dir.write("bad.yaml", "version: v1\nflags: [\n"));
    ASSERT_FALSE(yaml);
    EXPECT_THAT(yaml.error().message, HasSubstr("bad.yaml:"));
}
