// Label computation on hand-built inventories: each rule of gpu-feature-discovery (internal/lm of
// NVIDIA/k8s-device-plugin v0.20) that the simulator's fixtures do not reach.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "labels/labels.h"

using namespace kgpu;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Key;
using ::testing::Not;

namespace {

inventory::MigDevice mig_device(unsigned index, const std::string& profile) {
    inventory::MigDevice m;
    m.index = index;
    m.uuid = "MIG-" + std::to_string(index);
    m.profile = profile;
    const unsigned slices = static_cast<unsigned>(profile[0] - '0');
    m.slices = m.compute_slices = slices;
    m.memory_mib = slices == 1 ? 9728 : 19968;
    m.sm_count = 14 * slices;
    m.copy_engines = slices;
    m.decoders = slices - 1;
    return m;
}

inventory::Gpu gpu(unsigned index, bool mig, std::vector<std::string> profiles = {}) {
    inventory::Gpu g;
    g.index = index;
    g.uuid = "GPU-" + std::to_string(index);
    g.name = "NVIDIA A100-SXM4-80GB";
    g.memory_total_mib = 81920;
    g.cc_major = 8;
    g.pci_class = 0x030200;
    g.mig_mode = mig ? inventory::MigMode::enabled : inventory::MigMode::disabled;
    unsigned i = 0;
    for (const auto& p : profiles) g.mig_devices.push_back(mig_device(i++, p));
    return g;
}

inventory::Node node(std::vector<inventory::Gpu> gpus) {
    inventory::Node n;
    n.driver_version = "550.54.15";
    n.cuda_driver_version = 12040;
    n.gpus = std::move(gpus);
    return n;
}

labels::Options with(labels::MigStrategy s) {
    labels::Options o;
    o.mig_strategy = s;
    return o;
}

labels::Labels gen(const inventory::Node& n, const labels::Options& o = {}) {
    auto g = labels::generate(n, o);
    EXPECT_TRUE(g) << g.error().message;
    return g ? g->labels : labels::Labels{};
}

}  // namespace

TEST(LabelsSanitize, GfdRulesThenKubernetesLimits) {
    EXPECT_EQ(labels::sanitize_value("NVIDIA A100-SXM4-80GB"), "NVIDIA-A100-SXM4-80GB");
    EXPECT_EQ(labels::sanitize_value("NVIDIA A100 (80GB)"), "NVIDIA-A100-80GB");  // GFD drops brackets
    EXPECT_EQ(labels::sanitize_value("  Tesla   T4 "), "Tesla-T4");                 // blank runs: one '-'
    EXPECT_EQ(labels::sanitize_value("a/b:c"), "abc");
    EXPECT_EQ(labels::sanitize_value("x.y_z-1"), "x.y_z-1");
    EXPECT_EQ(labels::sanitize_value(std::string(70, 'x') + "-y").size(), 63u);
    EXPECT_EQ(labels::sanitize_value(std::string(62, 'x') + "-y"), std::string(62, 'x'));  // no trailing '-'
    EXPECT_EQ(labels::sanitize_value("(-)"), "");
}

TEST(LabelsSanitize, ArchitectureFamiliesAsGfdNamesThem) {
    EXPECT_EQ(labels::arch_family(7, 0), "volta");
    EXPECT_EQ(labels::arch_family(7, 5), "turing");
    EXPECT_EQ(labels::arch_family(8, 6), "ampere");
    EXPECT_EQ(labels::arch_family(8, 9), "ada-lovelace");
    EXPECT_EQ(labels::arch_family(9, 0), "hopper");
    EXPECT_EQ(labels::arch_family(10, 0), "blackwell");
    EXPECT_EQ(labels::arch_family(12, 0), "blackwell");
    EXPECT_EQ(labels::arch_family(4, 0), "undefined");
}

TEST(LabelsGenerate, WholeGpusWriteGfdBaseLabels) {
    labels::Options o;
    o.machine = "ProLiant XL675d Gen10 Plus\n";
    o.timestamp = 1700000000;
    auto l = gen(node({gpu(0, false), gpu(1, false)}), o);
    EXPECT_EQ(l.at("nvidia.com/gfd.timestamp"), "1700000000");
    EXPECT_EQ(l.at("nvidia.com/gpu.present"), "true");
    EXPECT_EQ(l.at("nvidia.com/gpu.machine"), "ProLiant-XL675d-Gen10-Plus");
    EXPECT_EQ(l.at("nvidia.com/gpu.count"), "2");
    EXPECT_EQ(l.at("nvidia.com/gpu.product"), "NVIDIA-A100-SXM4-80GB");
    EXPECT_EQ(l.at("nvidia.com/gpu.memory"), "81920");
    EXPECT_EQ(l.at("nvidia.com/gpu.family"), "ampere");
    EXPECT_EQ(l.at("nvidia.com/gpu.compute.major"), "8");
    EXPECT_EQ(l.at("nvidia.com/gpu.compute.minor"), "0");
    EXPECT_EQ(l.at("nvidia.com/gpu.replicas"), "1");
    EXPECT_EQ(l.at("nvidia.com/gpu.sharing-strategy"), "none");
    EXPECT_EQ(l.at("nvidia.com/gpu.mode"), "compute");
    EXPECT_EQ(l.at("nvidia.com/mig.capable"), "true");
    EXPECT_EQ(l.at("nvidia.com/mps.capable"), "false");
    // Both of GFD's spellings of the versions.
    EXPECT_EQ(l.at("nvidia.com/cuda.driver.major"), "550");
    EXPECT_EQ(l.at("nvidia.com/cuda.driver.minor"), "54");
    EXPECT_EQ(l.at("nvidia.com/cuda.driver.rev"), "15");
    EXPECT_EQ(l.at("nvidia.com/cuda.driver-version.revision"), "15");
    EXPECT_EQ(l.at("nvidia.com/cuda.driver-version.full"), "550.54.15");
    EXPECT_EQ(l.at("nvidia.com/cuda.runtime.major"), "12");
    EXPECT_EQ(l.at("nvidia.com/cuda.runtime.minor"), "4");
    EXPECT_EQ(l.at("nvidia.com/cuda.runtime-version.full"), "12.4");
    EXPECT_THAT(l, Not(Contains(Key("nvidia.com/mig.strategy"))));  // GFD: only single and mixed
}

TEST(LabelsGenerate, NoTimestampAndUnknownMachineByDefault) {
    auto l = gen(node({gpu(0, false)}));
    EXPECT_THAT(l, Not(Contains(Key("nvidia.com/gfd.timestamp"))));
    EXPECT_EQ(l.at("nvidia.com/gpu.machine"), "unknown");
}

TEST(LabelsGenerate, DriverVersionShapes) {
    auto n = node({gpu(0, false)});
    n.driver_version = "535.104";
    auto l = gen(n);
    EXPECT_EQ(l.at("nvidia.com/cuda.driver.rev"), "");
    EXPECT_EQ(l.at("nvidia.com/cuda.driver-version.revision"), "");
    n.driver_version = "garbage";
    auto bad = labels::generate(n, {});
    ASSERT_FALSE(bad);
    EXPECT_THAT(bad.error().message, HasSubstr("'garbage'"));
    n.driver_version = "550.54.15";
    n.cuda_driver_version = 0;
    auto no_cuda = labels::generate(n, {});
    ASSERT_TRUE(no_cuda);
    EXPECT_THAT(no_cuda->labels, Not(Contains(Key("nvidia.com/cuda.runtime-version.full"))));
    EXPECT_THAT(no_cuda->warnings, Contains(HasSubstr("CUDA version")));
}

TEST(LabelsGenerate, GpuCountIncludesMigEnabledGpusUnderEveryStrategy) {
    const auto n = node({gpu(0, true, {"1g.10gb", "1g.10gb"}), gpu(1, true, {"2g.20gb"}), gpu(2, false), gpu(3, false)});
    for (auto s : {labels::MigStrategy::none, labels::MigStrategy::mixed}) {
        auto l = gen(n, with(s));
        EXPECT_EQ(l.at("nvidia.com/gpu.count"), "4") << labels::to_string(s);
        EXPECT_EQ(l.at("nvidia.com/gpu.replicas"), "1");
    }
}

TEST(LabelsGenerate, OnlyMigEnabledGpusAreLabelledWithoutSharing) {
    labels::Options o;
    o.sharing.strategy = "time-slicing";
    o.sharing.resources["nvidia.com/gpu"] = {4, false};
    auto l = gen(node({gpu(0, true, {"2g.20gb"}), gpu(1, true, {"2g.20gb"})}), o);
    EXPECT_EQ(l.at("nvidia.com/gpu.count"), "2");
    EXPECT_EQ(l.at("nvidia.com/gpu.replicas"), "0");
    EXPECT_EQ(l.at("nvidia.com/gpu.sharing-strategy"), "none");
    EXPECT_EQ(l.at("nvidia.com/gpu.product"), "NVIDIA-A100-SXM4-80GB");
}

TEST(LabelsGenerate, MixedStrategyLabelsEachProfileWithEnginesAndSharing) {
    labels::Options o = with(labels::MigStrategy::mixed);
    o.sharing.strategy = "time-slicing";
    o.sharing.resources["nvidia.com/mig-1g.10gb"] = {2, false};
    o.sharing.resources["nvidia.com/mig-2g.20gb"] = {3, true};  // renamed: no -SHARED
    auto l = gen(node({gpu(0, true, {"1g.10gb", "1g.10gb", "2g.20gb"}), gpu(1, false)}), o);
    EXPECT_EQ(l.at("nvidia.com/mig.strategy"), "mixed");
    EXPECT_EQ(l.at("nvidia.com/gpu.count"), "2");
    EXPECT_EQ(l.at("nvidia.com/mig-1g.10gb.count"), "2");
    EXPECT_EQ(l.at("nvidia.com/mig-1g.10gb.memory"), "9728");
    EXPECT_EQ(l.at("nvidia.com/mig-1g.10gb.multiprocessors"), "14");
    EXPECT_EQ(l.at("nvidia.com/mig-1g.10gb.slices.gi"), "1");
    EXPECT_EQ(l.at("nvidia.com/mig-1g.10gb.slices.ci"), "1");
    EXPECT_EQ(l.at("nvidia.com/mig-1g.10gb.engines.copy"), "1");
    EXPECT_EQ(l.at("nvidia.com/mig-1g.10gb.engines.decoder"), "0");
    EXPECT_EQ(l.at("nvidia.com/mig-1g.10gb.engines.encoder"), "0");
    EXPECT_EQ(l.at("nvidia.com/mig-1g.10gb.engines.jpeg"), "0");
    EXPECT_EQ(l.at("nvidia.com/mig-1g.10gb.engines.ofa"), "0");
    EXPECT_EQ(l.at("nvidia.com/mig-1g.10gb.replicas"), "2");
    EXPECT_EQ(l.at("nvidia.com/mig-1g.10gb.sharing-strategy"), "time-slicing");
    EXPECT_EQ(l.at("nvidia.com/mig-1g.10gb.product"), "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb-SHARED");
    EXPECT_EQ(l.at("nvidia.com/mig-2g.20gb.engines.decoder"), "1");
    EXPECT_EQ(l.at("nvidia.com/mig-2g.20gb.replicas"), "3");
    EXPECT_EQ(l.at("nvidia.com/mig-2g.20gb.product"), "NVIDIA-A100-SXM4-80GB-MIG-2g.20gb");
    // The whole GPU is not shared: its resource has no entry.
    EXPECT_EQ(l.at("nvidia.com/gpu.sharing-strategy"), "none");
}

TEST(LabelsGenerate, MediaExtensionProfilesAreNamedWithADot) {
    auto g0 = gpu(0, true);
    g0.mig_devices.push_back(mig_device(0, "1g.10gb+me"));
    auto l = gen(node({g0}), with(labels::MigStrategy::mixed));
    EXPECT_EQ(l.at("nvidia.com/mig-1g.10gb.me.count"), "1");
    EXPECT_EQ(l.at("nvidia.com/mig-1g.10gb.me.product"), "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb.me");
}

TEST(LabelsGenerate, SingleStrategyOnAUniformNode) {
    labels::Options o = with(labels::MigStrategy::single);
    o.sharing.strategy = "time-slicing";
    o.sharing.resources["nvidia.com/gpu"] = {2, false};
    auto l = gen(node({gpu(0, true, {"1g.10gb", "1g.10gb"}), gpu(1, true, {"1g.10gb"})}), o);
    EXPECT_EQ(l.at("nvidia.com/mig.strategy"), "single");
    EXPECT_EQ(l.at("nvidia.com/gpu.count"), "3");
    EXPECT_EQ(l.at("nvidia.com/gpu.product"), "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb-SHARED");
    EXPECT_EQ(l.at("nvidia.com/gpu.replicas"), "2");
    EXPECT_EQ(l.at("nvidia.com/gpu.sharing-strategy"), "time-slicing");
    EXPECT_EQ(l.at("nvidia.com/gpu.memory"), "9728");
    EXPECT_EQ(l.at("nvidia.com/gpu.multiprocessors"), "14");
    EXPECT_EQ(l.at("nvidia.com/gpu.engines.copy"), "1");
    EXPECT_EQ(l.at("nvidia.com/gpu.slices.ci"), "1");
    EXPECT_EQ(l.at("nvidia.com/gpu.family"), "ampere");  // the whole-GPU labels stay
}

TEST(LabelsGenerate, SingleStrategyOnANodeItCannotServeWritesInvalidLabels) {
    struct Case {
        std::vector<inventory::Gpu> gpus;
        std::string warning;
    };
    const std::vector<Case> cases = {
        {{gpu(0, true, {"1g.10gb"}), gpu(1, false)}, "enabled and disabled"},
        {{gpu(0, true, {"1g.10gb"}), gpu(1, true)}, "enabled but empty"},
        {{gpu(0, true, {"1g.10gb", "2g.20gb"})}, "more than one MIG device type"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.warning);
        auto g = labels::generate(node(c.gpus), with(labels::MigStrategy::single));
        ASSERT_TRUE(g);
        const auto& l = g->labels;
        EXPECT_EQ(l.at("nvidia.com/gpu.product"), "NVIDIA-A100-SXM4-80GB-MIG-INVALID");
        EXPECT_EQ(l.at("nvidia.com/gpu.count"), "0");
        EXPECT_EQ(l.at("nvidia.com/gpu.replicas"), "0");
        EXPECT_EQ(l.at("nvidia.com/gpu.memory"), "0");
        EXPECT_EQ(l.at("nvidia.com/gpu.sharing-strategy"), "");
        EXPECT_EQ(l.at("nvidia.com/mig.strategy"), "single");
        EXPECT_THAT(l, Not(Contains(Key("nvidia.com/gpu.multiprocessors"))));
        EXPECT_THAT(g->warnings, Contains(HasSubstr(c.warning)));
    }
}

TEST(LabelsGenerate, SingleStrategyWithoutMigIsLikeNone) {
    auto single = gen(node({gpu(0, false), gpu(1, false)}), with(labels::MigStrategy::single));
    auto none = gen(node({gpu(0, false), gpu(1, false)}));
    EXPECT_EQ(single.at("nvidia.com/mig.strategy"), "single");
    single.erase("nvidia.com/mig.strategy");
    EXPECT_EQ(single, none);
}

TEST(LabelsGenerate, NoGpusWriteNoDeviceLabels) {
    labels::Options o;
    o.timestamp = 42;
    auto l = gen(node({}), o);
    EXPECT_EQ(l, (labels::Labels{{"nvidia.com/gfd.timestamp", "42"}, {"nvidia.com/gpu.present", "false"}}));
    auto lost = gpu(1, false);
    lost.lost = true;
    EXPECT_EQ(gen(node({lost})).size(), 1u);
    EXPECT_EQ(gen(node({gpu(0, false), lost})).at("nvidia.com/gpu.count"), "1");
}

// nvidia.com/gpu.present as the GPU Operator derives it: the PCI bus has an NVIDIA GPU. A node
// whose driver reports none (NVML failing, GPUs bound elsewhere) keeps "true", with a warning.
TEST(LabelsGenerate, GpuPresentFollowsThePciBus) {
    labels::Options o;
    o.pci_gpus = std::vector<std::string>{"0000:3b:00.0", "0000:86:00.0"};
    auto g = labels::generate(node({}), o);
    ASSERT_TRUE(g) << g.error().message;
    EXPECT_EQ(g->labels, (labels::Labels{{"nvidia.com/gpu.present", "true"}}));
    ASSERT_EQ(g->warnings.size(), 1u);
    EXPECT_THAT(g->warnings[0], HasSubstr("2 NVIDIA GPU(s) (0000:3b:00.0, 0000:86:00.0)"));
    o.pci_gpus->clear();
    EXPECT_EQ(gen(node({}), o).at("nvidia.com/gpu.present"), "false");
    o.pci_gpus.reset();  // the scan failed: NVML alone decides
    EXPECT_EQ(gen(node({}), o).at("nvidia.com/gpu.present"), "false");
    EXPECT_EQ(gen(node({gpu(0, false)}), o).at("nvidia.com/gpu.present"), "true");
    o.pci_gpus = std::vector<std::string>{"0000:3b:00.0"};
    auto both = labels::generate(node({gpu(0, false)}), o);
    ASSERT_TRUE(both);
    EXPECT_EQ(both->labels.at("nvidia.com/gpu.present"), "true");
    EXPECT_TRUE(both->warnings.empty());
}

TEST(LabelsGenerate, MpsCapableOnlyWithMpsSharingAndNoMig) {
    labels::Options o;
    o.sharing.strategy = "mps";
    o.sharing.resources["nvidia.com/gpu"] = {4, false};
    auto l = gen(node({gpu(0, false)}), o);
    EXPECT_EQ(l.at("nvidia.com/mps.capable"), "true");
    EXPECT_EQ(l.at("nvidia.com/gpu.sharing-strategy"), "mps");
    EXPECT_EQ(l.at("nvidia.com/gpu.product"), "NVIDIA-A100-SXM4-80GB-SHARED");
    auto mig = labels::generate(node({gpu(0, true, {"1g.10gb"})}), o);
    ASSERT_FALSE(mig);
    EXPECT_THAT(mig.error().message, HasSubstr("MPS sharing is not supported for MIG devices"));
}

TEST(LabelsGenerate, GpuModeFromThePciClassOfEveryGpu) {
    auto mode = [](std::vector<std::optional<std::uint32_t>> classes) {
        std::vector<inventory::Gpu> gpus;
        for (const auto& c : classes) {
            gpus.push_back(gpu(static_cast<unsigned>(gpus.size()), false));
            gpus.back().pci_class = c;
        }
        return gen(node(gpus)).at("nvidia.com/gpu.mode");
    };
    EXPECT_EQ(mode({0x030200, 0x030200}), "compute");
    EXPECT_EQ(mode({0x030000}), "graphics");
    EXPECT_EQ(mode({0x030000, 0x030200}), "unknown");
    EXPECT_EQ(mode({0x030200, std::nullopt}), "unknown");
    EXPECT_EQ(mode({0x038000}), "unknown");
}

TEST(LabelsGenerate, SeveralModelsCountEachAndTheFirstGpuDescribesTheNode) {
    auto t4 = gpu(1, false);
    t4.name = "Tesla T4";
    t4.memory_total_mib = 15360;
    t4.cc_major = 7;
    t4.cc_minor = 5;
    t4.mig_mode = inventory::MigMode::unsupported;
    auto g = labels::generate(node({gpu(0, false), t4, gpu(2, false)}), {});
    ASSERT_TRUE(g);
    EXPECT_EQ(g->labels.at("nvidia.com/gpu.product"), "NVIDIA-A100-SXM4-80GB");
    EXPECT_EQ(g->labels.at("nvidia.com/gpu.count"), "2");
    EXPECT_EQ(g->labels.at("nvidia.com/mig.capable"), "true");
    EXPECT_THAT(g->warnings, Contains(HasSubstr("multiple device types")));
}

// GFD's vGPU labeler runs on every node, GPUs or not; without a scan (it failed) nothing.
TEST(LabelsGenerate, VgpuLabels) {
    EXPECT_THAT(gen(node({gpu(0, false)})), Not(Contains(Key("nvidia.com/vgpu.present"))));
    labels::Options o;
    o.vgpu.emplace();
    EXPECT_EQ(gen(node({gpu(0, false)}), o).at("nvidia.com/vgpu.present"), "false");
    auto none = gen(node({}), o);
    EXPECT_EQ(none.size(), 2u);  // gpu.present and vgpu.present
    EXPECT_EQ(none.at("nvidia.com/vgpu.present"), "false");

    o.vgpu->push_back({"0000:3b:00.0", inventory::VgpuHostDriver{"550.54.15", "r550_00"}});
    o.vgpu->push_back({"0000:5e:00.0", inventory::VgpuHostDriver{"550.54.16", "r550 01"}});
    auto l = gen(node({gpu(0, false)}), o);
    EXPECT_EQ(l.at("nvidia.com/vgpu.present"), "true");
    EXPECT_EQ(l.at("nvidia.com/vgpu.host-driver-version"), "550.54.16");  // the last one, as GFD's loop
    EXPECT_EQ(l.at("nvidia.com/vgpu.host-driver-branch"), "r550-01");     // sanitised like every value
    EXPECT_EQ(l.at("nvidia.com/gpu.count"), "1");

    o.vgpu->push_back({"0000:86:00.0", std::nullopt});
    auto bad = labels::generate(node({gpu(0, false)}), o);
    ASSERT_FALSE(bad);
    EXPECT_THAT(bad.error().message, HasSubstr("vGPU 0000:86:00.0"));
    EXPECT_THAT(bad.error().message, HasSubstr("no host driver version record"));
}

TEST(LabelsFeatureFile, SortedKeyValueLines) {
    EXPECT_EQ(labels::to_feature_file({{"b", "2"}, {"a", "1"}}), "a=1\nb=2\n");
}
