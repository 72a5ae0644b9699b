// MIG strategies, time-slicing, their validation, preferred allocation of replicas and MIG
// devices, and Allocate answers for them (pure logic; the gRPC side is in plugin_test.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "deviceplugin/allocate.h"
#include "deviceplugin/allocator.h"
#include "deviceplugin/mig_caps.h"
#include "deviceplugin/resources.h"
#include "support/expect.h"
#include "cdi_names.h"

namespace kgpu::deviceplugin {
namespace {

using kgpu::test::kDp;

using kgpu::test::must;

using ::testing::HasSubstr;

inventory::MigDevice mig(unsigned index, const std::string& profile, unsigned gi, unsigned gpu) {
    inventory::MigDevice m;
    m.index = index;
    m.profile = profile;
    m.gpu_instance_id = gi;
    m.compute_instance_id = 0;
    m.uuid = fmt::format("MIG-{:08x}-0000-0000-0000-{:012x}", gpu, index);
    return m;
}

// Like sim/nodes/a100-mig.yaml: GPU 0 7x 1g.10gb, GPU 1 3g.40gb + 2g.20gb + 2x 1g.10gb, GPUs 2
// and 3 MIG capable but disabled.
inventory::Node a100_mig() {
    inventory::Node node;
    for (unsigned i = 0; i < 4; ++i) {
        inventory::Gpu g;
        g.index = i;
        g.minor = i;
        g.uuid = fmt::format("GPU-{:08x}-0000-0000-0000-000000000000", i);
        g.numa_node = static_cast<int>(i / 2);
        g.mig_mode = inventory::MigMode::disabled;
        node.gpus.push_back(g);
    }
    node.gpus[0].mig_mode = inventory::MigMode::enabled;
    for (unsigned j = 0; j < 7; ++j) node.gpus[0].mig_devices.push_back(mig(j, "1g.10gb", 7 + j, 0));
    node.gpus[1].mig_mode = inventory::MigMode::enabled;
    node.gpus[1].mig_devices = {mig(0, "3g.40gb", 2, 1), mig(1, "2g.20gb", 5, 1), mig(2, "1g.10gb", 13, 1),
                                mig(3, "1g.10gb", 14, 1)};
    node.topology = inventory::Topology(4);
    return node;
}

// The advertised ID of a device of a100_mig() written in index spelling: "2" -> "GPU-…",
// "1:3" -> "MIG-…", "1::3" -> "GPU-…::3" (IDs are UUIDs under every deviceIDStrategy).
std::string uid(std::string_view index_id) {
    const auto sep = index_id.find("::");
    const std::string_view base = index_id.substr(0, sep);
    const std::string suffix(sep == std::string_view::npos ? std::string_view() : index_id.substr(sep));
    const auto colon = base.find(':');
    const unsigned g = static_cast<unsigned>(std::stoul(std::string(base.substr(0, colon))));
    if (colon == std::string_view::npos) return fmt::format("GPU-{:08x}-0000-0000-0000-000000000000", g) + suffix;
    const unsigned m = static_cast<unsigned>(std::stoul(std::string(base.substr(colon + 1))));
    return fmt::format("MIG-{:08x}-0000-0000-0000-{:012x}", g, m) + suffix;
}
std::vector<std::string> uids(std::initializer_list<std::string_view> index_ids) {
    std::vector<std::string> out;
    for (auto i : index_ids) out.push_back(uid(i));
    return out;
}

std::map<std::string, size_t> counts(const std::vector<Resource>& rs) {
    std::map<std::string, size_t> out;
    for (const auto& r : rs) out[r.name] = r.devices.size();
    return out;
}

Config strategy(MigStrategy s, DeviceIdStrategy id = DeviceIdStrategy::uuid) {
    Config c;
    c.mig_strategy = s;
    c.device_id_strategy = id;
    return c;
}

TEST(DevicePluginMig, NoneServesWholeGpus) {
    auto rs = must(build_resources(a100_mig(), strategy(MigStrategy::none)));
    EXPECT_EQ(counts(rs), (std::map<std::string, size_t>{{"nvidia.com/gpu", 4}}));
}

TEST(DevicePluginMig, MixedServesOneResourcePerProfile) {
    auto rs = must(build_resources(a100_mig(), strategy(MigStrategy::mixed, DeviceIdStrategy::index)));
    EXPECT_EQ(counts(rs), (std::map<std::string, size_t>{{"nvidia.com/gpu", 2},
                                                          {"nvidia.com/mig-1g.10gb", 9},
                                                          {"nvidia.com/mig-2g.20gb", 1},
                                                          {"nvidia.com/mig-3g.40gb", 1}}));
    const Resource& small = rs[1];
    ASSERT_EQ(small.name, "nvidia.com/mig-1g.10gb");
    EXPECT_EQ(small.devices.front().id, uid("0:0"));
    EXPECT_EQ(small.devices.back().id, uid("1:3"));
    ASSERT_TRUE(small.devices.back().mig.has_value());
    EXPECT_EQ(small.devices.back().mig->gpu_instance_id, 14u);
    EXPECT_EQ(small.devices.back().minor, 1u);
    EXPECT_EQ(small.devices.back().numa, std::optional<int>(0));
    EXPECT_EQ(rs[0].devices[0].id, uid("2"));
}

TEST(DevicePluginMig, MixedUsesMigUuidsAndMapsPlusToDot) {
    auto node = a100_mig();
    node.gpus[1].mig_devices[1].profile = "1g.10gb+me";
    auto rs = must(build_resources(node, strategy(MigStrategy::mixed)));
    auto c = counts(rs);
    EXPECT_EQ(c["nvidia.com/mig-1g.10gb.me"], 1u);
    EXPECT_EQ(rs[1].devices[0].id, node.gpus[0].mig_devices[0].uuid);
    EXPECT_EQ(mig_resource_name("1g.10gb+me"), "nvidia.com/mig-1g.10gb.me");
}

TEST(DevicePluginMig, SingleRefusesMixedNodesNamingTheGpus) {
    auto r = build_resources(a100_mig(), strategy(MigStrategy::single));
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, Code::not_supported);
    EXPECT_THAT(r.error().message, HasSubstr("GPU(s) 2, 3"));
    EXPECT_THAT(r.error().message, HasSubstr("mixed"));
}

TEST(DevicePluginMig, SingleRefusesMixedProfiles) {
    auto node = a100_mig();
    node.gpus.resize(2);
    auto r = build_resources(node, strategy(MigStrategy::single));
    ASSERT_FALSE(r.has_value());
    EXPECT_THAT(r.error().message, HasSubstr("one MIG profile"));
    EXPECT_THAT(r.error().message, HasSubstr("3g.40gb on GPU(s) 1"));
}

TEST(DevicePluginMig, SingleServesUniformMigDevicesAsGpu) {
    auto node = a100_mig();
    node.gpus.resize(2);
    node.gpus[1].mig_devices = {mig(0, "1g.10gb", 7, 1), mig(1, "1g.10gb", 8, 1)};
    auto rs = must(build_resources(node, strategy(MigStrategy::single, DeviceIdStrategy::index)));
    EXPECT_EQ(counts(rs), (std::map<std::string, size_t>{{"nvidia.com/gpu", 9}}));
    EXPECT_EQ(rs[0].devices[8].id, uid("1:1"));
    // Without any MIG GPU, single serves whole GPUs.
    node.gpus[0].mig_mode = node.gpus[1].mig_mode = inventory::MigMode::disabled;
    EXPECT_EQ(counts(must(build_resources(node, strategy(MigStrategy::single)))),
              (std::map<std::string, size_t>{{"nvidia.com/gpu", 2}}));
}

TEST(DevicePluginMig, MigEnabledWithoutInstancesIsAWarningNotAnError) {
    auto node = a100_mig();
    node.gpus[1].mig_devices.clear();
    std::vector<std::string> warnings;
    auto rs = must(build_resources(node, strategy(MigStrategy::mixed), &warnings));
    EXPECT_EQ(counts(rs)["nvidia.com/mig-1g.10gb"], 7u);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_THAT(warnings[0], HasSubstr("GPU 1"));
    EXPECT_THAT(warnings[0], HasSubstr("no MIG devices"));
}

// ---------------------------------------------------------------------------------------------
// Time-slicing

// `naming`: kgpu's resource naming extensions (rename, devices subsets) applied, not ignored as
// NVIDIA v0.14-v0.20 do.
Config sharing(std::string_view yaml, MigStrategy s = MigStrategy::none, bool naming = false) {
    auto parsed = parse_config(yaml, "ts.yaml");
    EXPECT_TRUE(parsed.has_value()) << parsed.error().message;
    Config base = parsed ? *parsed : Config{};
    Overrides flags;
    flags.mig_strategy = s;
    if (naming) flags.apply_resource_naming = true;
    flags.device_id_strategy = DeviceIdStrategy::index;
    auto c = resolve(base, {}, flags);
    EXPECT_TRUE(c.has_value()) << c.error().message;
    return c ? *c : Config{};
}

TEST(DevicePluginTimeSlicing, ReplicasOfEveryGpu) {
    auto c = sharing("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n");
    auto rs = must(build_resources(a100_mig(), c));
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].name, "nvidia.com/gpu");
    EXPECT_EQ(rs[0].replicas, 4u);
    ASSERT_EQ(rs[0].devices.size(), 16u);
    EXPECT_EQ(rs[0].devices[0].id, uid("0::0"));
    EXPECT_EQ(rs[0].devices[5].id, uid("1::1"));
    EXPECT_EQ(rs[0].devices[5].physical_id, uid("1"));
    EXPECT_EQ(rs[0].devices[5].replica, std::optional<unsigned>(1));
    EXPECT_EQ(rs[0].find(uid("3::3")), &rs[0].devices[15]);
}

TEST(DevicePluginTimeSlicing, RenameByDefaultAndShortNames) {
    auto c = sharing("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
                     "    resources:\n    - name: gpu\n      replicas: 2\n");
    EXPECT_EQ(counts(must(build_resources(a100_mig(), c))),
              (std::map<std::string, size_t>{{"nvidia.com/gpu.shared", 8}}));
}

TEST(DevicePluginTimeSlicing, SubsetByIndexRangeAndUuidStaysApartFromWholeGpus) {
    auto node = a100_mig();
    auto c = sharing(fmt::format("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                                 "    - name: nvidia.com/mig-1g.10gb\n      rename: nvidia.com/small-shared\n"
                                 "      devices: [\"0:1\", \"{}\"]\n      replicas: 3\n"
                                 "    - name: nvidia.com/gpu\n      rename: gpu-shared\n      devices: 1\n      replicas: 2\n",
                                 node.gpus[1].mig_devices[3].uuid),
                     MigStrategy::mixed, /*naming=*/true);
    auto rs = must(build_resources(node, c));
    auto n = counts(rs);
    EXPECT_EQ(n["nvidia.com/small-shared"], 6u);
    EXPECT_EQ(n["nvidia.com/mig-1g.10gb"], 7u);  // the other 1g.10gb devices stay whole
    EXPECT_EQ(n["nvidia.com/gpu-shared"], 2u);   // the first whole GPU (index 2), twice
    EXPECT_EQ(n["nvidia.com/gpu"], 1u);
    for (const auto& r : rs)
        if (r.name == "nvidia.com/small-shared") {
            EXPECT_EQ(r.devices[0].id, uid("0:1::0"));
            EXPECT_EQ(r.devices[5].id, uid("1:3::2"));
        }
}

struct BadCase {
    const char* yaml;
    MigStrategy strategy;
    const char* needle;
    int line;
};

TEST(DevicePluginTimeSlicing, EveryValidationErrorNamesFileLineAndReason) {
    const std::string head = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n";
    // At parse time or resolve time.
    const BadCase config_errors[] = {
        {"    - name: gpu\n      replicas: 1\n", MigStrategy::none, "at least 2", 6},
        {"    - name: gpu\n      devices: [0, 1, 0]\n      rename: x\n      replicas: 2\n", MigStrategy::none,
         "listed twice", 6},
        {"    - name: gpu\n      devices: [\"0:1\"]\n      rename: x\n      replicas: 2\n", MigStrategy::none,
         "MIG device", 6},
        {"    - name: gpu\n      rename: nvidia.com/this-name-is-far-too-long-for-a-kubernetes-extended-resource-name\n"
         "      replicas: 2\n",
         MigStrategy::none, "expected 1..63", 6},
        {"    - name: gpu\n      rename: Example.COM/gpu\n      replicas: 2\n", MigStrategy::none, "'Example.COM/gpu': only nvidia.com/ resources are served", 6},
        {"    - name: gpu\n      devices: [0]\n      replicas: 2\n", MigStrategy::none, "without a new name", 6},
    };
    for (const auto& bc : config_errors) {
        auto parsed = parse_config(head + bc.yaml, "ts.yaml");
        Result<Config> c = parsed ? [&] {
            Overrides flags;
            flags.mig_strategy = bc.strategy;
            flags.apply_resource_naming = true;  // kgpu's checks of its rename / devices extensions
            return resolve(*parsed, {}, flags);
        }()
                                  : Result<Config>(std::unexpected(parsed.error()));
        ASSERT_FALSE(c.has_value()) << bc.yaml;
        EXPECT_EQ(c.error().code, Code::parse) << bc.yaml;
        EXPECT_THAT(c.error().message, HasSubstr(bc.needle)) << bc.yaml;
        EXPECT_THAT(c.error().message, HasSubstr(fmt::format("ts.yaml:{}:", bc.line))) << c.error().message;
    }
    auto mps = parse_config("version: v1\nsharing:\n  mps:\n    resources: []\n", "ts.yaml");
    ASSERT_FALSE(mps.has_value());
    EXPECT_THAT(mps.error().message, HasSubstr("expected at least one resource to share"));
    EXPECT_THAT(mps.error().message, HasSubstr("ts.yaml:4:"));

    // With the node (build_resources).
    const BadCase node_errors[] = {
        {"    - name: gpu\n      rename: s\n      devices: [7]\n      replicas: 2\n", MigStrategy::none,
         "unknown device '7'", 7},
        {"    - name: gpu\n      rename: s\n      devices: [\"1:0\"]\n      replicas: 2\n", MigStrategy::mixed,
         "served as nvidia.com/mig-3g.40gb", 7},
        {"    - name: gpu\n      rename: s\n      devices: [2, \"GPU-00000002-0000-0000-0000-000000000000\"]\n"
         "      replicas: 2\n",
         MigStrategy::mixed, "listed twice", 7},
        {"    - name: gpu\n      rename: s\n      devices: 5\n      replicas: 2\n", MigStrategy::none, "has only 4", 7},
        {"    - name: gpu\n      replicas: 2\n    - name: gpu\n      rename: s\n      devices: [1]\n      replicas: 2\n",
         MigStrategy::none, "also in sharing.timeSlicing.resources[0]", 9},
        {"    - name: nvidia.com/mig-1g.10gb\n      rename: nvidia.com/gpu\n      replicas: 2\n", MigStrategy::mixed,
         "another resource already has", 5},
    };
    for (const auto& bc : node_errors) {
        auto parsed = parse_config(head + bc.yaml, "ts.yaml");
        ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
        Overrides flags;
        flags.mig_strategy = bc.strategy;
        flags.apply_resource_naming = true;
        auto c = resolve(*parsed, {}, flags);
        ASSERT_TRUE(c.has_value()) << c.error().message;
        auto r = build_resources(a100_mig(), *c);
        ASSERT_FALSE(r.has_value()) << bc.yaml;
        EXPECT_EQ(r.error().code, Code::parse);
        EXPECT_THAT(r.error().message, HasSubstr(bc.needle)) << r.error().message;
        EXPECT_THAT(r.error().message, HasSubstr(fmt::format("ts.yaml:{}:", bc.line))) << r.error().message;
    }
}

// Issue #23 item 3: a MIG resource named in sharing.timeSlicing under migStrategy none or single
// matches no device: NVIDIA's plugin skips it (rm/device_map.go) and serves nvidia.com/gpu
// unshared; so does kgpu, with a warning naming the line. Before, resolve() refused the config and
// the plugin (and `kgpu labels`) exited 2.
TEST(DevicePluginTimeSlicing, MigResourceWithoutMixedIsSkippedWithAWarning) {
    const std::string yaml = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                             "    - name: nvidia.com/mig-1g.10gb\n      replicas: 2\n";
    for (MigStrategy s : {MigStrategy::none, MigStrategy::single}) {
        SCOPED_TRACE(to_string(s));
        auto parsed = parse_config(yaml, "ts.yaml");
        ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
        Overrides flags;
        flags.mig_strategy = s;
        auto c = resolve(*parsed, {}, flags);
        ASSERT_TRUE(c.has_value()) << c.error().message;
        ASSERT_EQ(c->warnings.size(), 1u);
        EXPECT_THAT(c->warnings[0], HasSubstr("ts.yaml:5: key 'sharing.timeSlicing.resources[0].name': "
                                              "nvidia.com/mig-1g.10gb is a MIG resource, served only with "
                                              "migStrategy mixed"));
        EXPECT_THAT(describe(*c), HasSubstr("(skipped: a MIG resource without migStrategy mixed)"));
        // A node without MIG-enabled GPUs serves its whole GPUs under both strategies, unshared.
        auto node = a100_mig();
        for (auto& g : node.gpus) {
            g.mig_mode = inventory::MigMode::disabled;
            g.mig_devices.clear();
        }
        std::vector<std::string> warnings;
        auto rs = must(build_resources(node, *c, &warnings));
        EXPECT_EQ(counts(rs), (std::map<std::string, size_t>{{"nvidia.com/gpu", 4}}));
        EXPECT_EQ(rs[0].replicas, 1u);
        EXPECT_TRUE(warnings.empty()) << warnings.front();  // warned once, by resolve()
    }
    // The other entries still apply; under mixed the MIG entry is served as before.
    auto both = sharing(yaml + "    - name: gpu\n      replicas: 3\n", MigStrategy::none);
    EXPECT_EQ(counts(must(build_resources(a100_mig(), both))), (std::map<std::string, size_t>{{"nvidia.com/gpu", 12}}));
    auto mixed = sharing(yaml, MigStrategy::mixed);
    EXPECT_TRUE(mixed.warnings.empty());
    auto rs = must(build_resources(a100_mig(), mixed));
    EXPECT_EQ(counts(rs)["nvidia.com/mig-1g.10gb"], 18u);
    // sharing.mps still refuses MIG names (MPS cannot share MIG devices, as NVIDIA).
    auto mps = parse_config("version: v1\nsharing:\n  mps:\n    resources: [{name: mig-1g.10gb, replicas: 2}]\n", "m");
    ASSERT_TRUE(mps.has_value());
    EXPECT_FALSE(resolve(*mps, {}, {}).has_value());
}

TEST(DevicePluginTimeSlicing, ResourceNameRules) {
    EXPECT_TRUE(validate_resource_name("nvidia.com/gpu").has_value());
    EXPECT_TRUE(validate_resource_name("nvidia.com/mig-1g.10gb").has_value());
    EXPECT_FALSE(validate_resource_name("gpu").has_value());
    EXPECT_FALSE(validate_resource_name("nvidia.com/-gpu").has_value());
    EXPECT_FALSE(validate_resource_name("nvidia..com/gpu").has_value());
    EXPECT_FALSE(validate_resource_name("nvidia.com/" + std::string(64, 'a')).has_value());
    EXPECT_TRUE(validate_resource_name("nvidia.com/" + std::string(63, 'a')).has_value());
    EXPECT_EQ(qualify_resource_name("gpu"), "nvidia.com/gpu");
    // NVIDIA's plugin serves only nvidia.com/ resources: another domain is refused, naming it.
    EXPECT_EQ(qualify_resource_name("example.com/gpu"), "nvidia.com/example.com/gpu");
    auto other = validate_resource_name(qualify_resource_name("example.com/gpu"));
    ASSERT_FALSE(other.has_value());
    EXPECT_THAT(other.error().message, HasSubstr("'example.com/gpu': only nvidia.com/ resources are served"));
}

// ---------------------------------------------------------------------------------------------
// Preferred allocation for replicas and MIG devices

std::vector<std::string> ids_of(const Resource& r) {
    std::vector<std::string> out;
    for (const auto& d : r.devices) out.push_back(d.id);
    return out;
}

TEST(DevicePluginSharedAllocation, DistributedSpreadsPackedFills) {
    auto c = sharing("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 4\n");
    auto node = a100_mig();
    auto rs = must(build_resources(node, c));
    const Resource& r = rs[0];
    Allocator spread(r, node.topology, SharedAllocationPolicy::distributed);
    EXPECT_EQ(must(spread.prefer(ids_of(r), {}, 3)), uids({"0::0", "1::0", "2::0"}));
    // GPU 0 already has two replicas in use elsewhere: the others are used twice before it is.
    std::vector<std::string> avail = ids_of(r);
    avail.erase(avail.begin(), avail.begin() + 2);
    EXPECT_EQ(must(spread.prefer(avail, {}, 4)), uids({"1::0", "1::1", "2::0", "3::0"}));
    EXPECT_EQ(must(spread.prefer(avail, {}, 7)),
              uids({"0::2", "1::0", "1::1", "2::0", "2::1", "3::0", "3::1"}));
    EXPECT_EQ(must(spread.prefer(avail, uids({"1::2"}), 2)), uids({"1::2", "2::0"}));

    Allocator pack(r, node.topology, SharedAllocationPolicy::packed);
    EXPECT_EQ(must(pack.prefer(ids_of(r), {}, 3)), uids({"0::0", "0::1", "0::2"}));
    // The busiest GPU with a free replica first: GPU 0 (2 in use), then on to GPU 1.
    EXPECT_EQ(must(pack.prefer(avail, {}, 3)), uids({"0::2", "0::3", "1::0"}));
    // Same validation as for whole GPUs.
    EXPECT_FALSE(pack.prefer(avail, uids({"0::0"}), 1).has_value());
    EXPECT_FALSE(pack.prefer(avail, {}, 100).has_value());
}

TEST(DevicePluginSharedAllocation, MigDevicesSpreadOverParentGpus) {
    auto node = a100_mig();
    auto rs = must(build_resources(node, strategy(MigStrategy::mixed, DeviceIdStrategy::index)));
    const Resource& r = rs[1];
    ASSERT_EQ(r.name, "nvidia.com/mig-1g.10gb");
    Allocator a(r, node.topology);
    EXPECT_EQ(must(a.prefer(ids_of(r), {}, 2)), uids({"0:0", "1:2"}));
    EXPECT_EQ(must(a.prefer(ids_of(r), {}, 4)), uids({"0:0", "0:1", "1:2", "1:3"}));
}

// ---------------------------------------------------------------------------------------------
// Allocate

class DevicePluginSharedAllocate : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/kgpu-shared-XXXXXX";
        root_ = mkdtemp(tmpl);
        std::filesystem::create_directories(root_ / "dev/nvidia-caps");
        for (const char* f : {"dev/nvidiactl", "dev/nvidia0", "dev/nvidia1", "dev/nvidia-caps/nvidia-cap66",
                              "dev/nvidia-caps/nvidia-cap67"})
            std::ofstream(root_ / f).flush();
    }
    void TearDown() override { std::filesystem::remove_all(root_); }
    void write(const std::string& rel, const std::string& text) {
        std::filesystem::create_directories((root_ / rel).parent_path());
        std::ofstream(root_ / rel) << text;
    }
    std::filesystem::path root_;
};

TEST_F(DevicePluginSharedAllocate, MigDeviceGetsParentAndCapabilityNodes) {
    auto node = a100_mig();
    Config c = strategy(MigStrategy::mixed);
    c.pass_device_specs = true;
    c.device_list_strategy = {DeviceListStrategy::envvar, DeviceListStrategy::cdi_cri};
    auto rs = must(build_resources(node, c));
    // GI 8 CI 0 on GPU 0 (MIG device 0:1): per-instance access files; GI 13 on GPU 1: the table.
    write("proc/driver/nvidia/capabilities/gpu0/mig/gi8/access", "DeviceFileMinor: 66\nDeviceFileMode: 292\n");
    write("proc/driver/nvidia/capabilities/gpu0/mig/gi8/ci0/access", "DeviceFileMinor: 67\nDeviceFileMode: 292\n");
    write("proc/driver/nvidia-caps/mig-minors", "config 1\nmonitor 2\ngpu1/gi13/access 150\ngpu1/gi13/ci0/access 151\n");
    auto problems = fill_mig_caps(rs, root_ / "proc");
    EXPECT_FALSE(problems.empty());  // the other MIG devices have no files
    const Resource& r = rs[1];
    const std::string a = node.gpus[0].mig_devices[1].uuid, b = node.gpus[1].mig_devices[2].uuid;
    auto answer = must(allocate(r, {a, b}, c, {}, DevRootView(root_)));
    EXPECT_EQ(answer.envs["NVIDIA_VISIBLE_DEVICES"], a + "," + b);
    EXPECT_EQ(answer.cdi_devices, (std::vector<std::string>{kDp + "gpu=" + a, kDp + "gpu=" + b}));
    std::vector<std::string> paths;
    for (const auto& d : answer.devices) paths.push_back(d.container_path);
    EXPECT_EQ(paths, (std::vector<std::string>{"/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1",
                                               "/dev/nvidia-caps/nvidia-cap66", "/dev/nvidia-caps/nvidia-cap67",
                                               "/dev/nvidia-caps/nvidia-cap150", "/dev/nvidia-caps/nvidia-cap151"}));
    EXPECT_EQ(answer.devices[3].host_path, (root_ / "dev/nvidia-caps/nvidia-cap66").string());
    // A MIG device without capability files is refused under passDeviceSpecs, with the reason.
    auto refused = allocate(r, {node.gpus[0].mig_devices[0].uuid}, c, {}, DevRootView(root_));
    ASSERT_FALSE(refused.has_value());
    EXPECT_THAT(refused.error().message, HasSubstr("gi7/access"));
    // With deviceIDStrategy index the container is handed i:j (the ID stays the MIG UUID).
    Config ci = strategy(MigStrategy::mixed, DeviceIdStrategy::index);
    auto ri = must(build_resources(node, ci));
    EXPECT_EQ(must(allocate(ri[1], {uid("1:3")}, ci, {}, DevRootView(root_))).envs["NVIDIA_VISIBLE_DEVICES"], "1:3");
}

TEST_F(DevicePluginSharedAllocate, ReplicasMapToPhysicalGpusOnce) {
    auto c = sharing("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 4\n");
    c.pass_device_specs = true;
    auto rs = must(build_resources(a100_mig(), c));
    auto answer = must(allocate(rs[0], uids({"1::3", "0::0", "1::0"}), c, {}, DevRootView(root_)));
    EXPECT_EQ(answer.envs["NVIDIA_VISIBLE_DEVICES"], "1,0");
    std::vector<std::string> paths;
    for (const auto& d : answer.devices) paths.push_back(d.container_path);
    EXPECT_EQ(paths, (std::vector<std::string>{"/dev/nvidiactl", "/dev/nvidia1", "/dev/nvidia0"}));
    EXPECT_FALSE(allocate(rs[0], uids({"1::3", "1::3"}), c, {}, DevRootView(root_)).has_value());

    c.sharing.time_slicing->fail_requests_greater_than_one = true;
    auto strict = must(build_resources(a100_mig(), c));
    auto refused = allocate(strict[0], uids({"1::3", "0::0"}), c, {}, DevRootView(root_));
    ASSERT_FALSE(refused.has_value());
    EXPECT_THAT(refused.error().message, HasSubstr("maximum request size for shared resources is 1"));
    EXPECT_TRUE(allocate(strict[0], {uid("1::3")}, c, {}, DevRootView(root_)).has_value());
}

// Issue #23 item 4: MPS refuses more than one replica per container whatever
// failRequestsGreaterThanOne says, as NVIDIA's plugin (NewConfig forces it; ValidateRequest
// ignores it for MPS). Before, `false` let one container have two replicas on two GPUs.
TEST_F(DevicePluginSharedAllocate, MpsRefusesTwoReplicasWhateverFailRequestsGreaterThanOneSays) {
    auto c = sharing("version: v1\nsharing:\n  mps:\n    failRequestsGreaterThanOne: false\n    resources:\n"
                     "    - name: gpu\n      replicas: 2\n");
    auto node = a100_mig();
    for (auto& g : node.gpus) {
        g.mig_mode = inventory::MigMode::disabled;
        g.mig_devices.clear();
    }
    auto rs = must(build_resources(node, c));
    ASSERT_EQ(rs.size(), 1u);
    ASSERT_TRUE(rs[0].mps);
    auto refused = allocate(rs[0], uids({"0::0", "1::1"}), c, {}, DevRootView(root_));
    ASSERT_FALSE(refused.has_value());
    EXPECT_THAT(refused.error().message, HasSubstr("maximum request size for shared resources is 1"));
    EXPECT_TRUE(allocate(rs[0], {uid("1::1")}, c, {}, DevRootView(root_)).has_value());
}

TEST(DevicePluginMigCaps, ReadsAccessFilesThenTheTableAndNamesWhatItTried) {
    char tmpl[] = "/tmp/kgpu-caps-XXXXXX";
    const std::filesystem::path root = mkdtemp(tmpl);
    auto missing = find_mig_caps(root, 3, 1, 0);
    ASSERT_FALSE(missing.has_value());
    EXPECT_THAT(missing.error().message, HasSubstr("gpu3/mig/gi1/access"));
    EXPECT_THAT(missing.error().message, HasSubstr("mig-minors"));
    std::filesystem::create_directories(root / "driver/nvidia/capabilities/gpu3/mig/gi1/ci0");
    std::ofstream(root / "driver/nvidia/capabilities/gpu3/mig/gi1/access") << "DeviceFileMinor: 30\n";
    std::ofstream(root / "driver/nvidia/capabilities/gpu3/mig/gi1/ci0/access") << "DeviceFileMinor: 31\n";
    auto found = find_mig_caps(root, 3, 1, 0);
    ASSERT_TRUE(found.has_value()) << found.error().message;
    EXPECT_EQ(found->gi, 30u);
    EXPECT_EQ(found->ci, 31u);
    std::ofstream(root / "driver/nvidia/capabilities/gpu3/mig/gi1/ci0/access") << "garbage\n";
    auto bad = find_mig_caps(root, 3, 1, 0);
    ASSERT_FALSE(bad.has_value());
    EXPECT_THAT(bad.error().message, HasSubstr("DeviceFileMinor"));
    std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace kgpu::deviceplugin
