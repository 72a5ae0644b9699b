// Discovery rules on an in-memory NVML: NVLink counting (direct and through NVSwitches), NUMA
// from sysfs with NVML as the fallback, a GPU lost during discovery, MIG profile names.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "inventory/discovery.h"
#include "inventory/json.h"
#include "support/fake_nvml.h"

using namespace kgpu;
using ::testing::HasSubstr;

namespace {

class InventoryFakeTest : public ::testing::Test {
protected:
    void SetUp() override {
        test::fake_node() = {};
        auto& gpus = test::fake_node().gpus;
        gpus.resize(3);
        for (unsigned i = 0; i < 3; ++i) {
            gpus[i].uuid = fmt::format("GPU-{0}{0}{0}{0}{0}{0}{0}{0}-0000-0000-0000-000000000000", i);
            gpus[i].bus = 0x10 * (i + 1);
            gpus[i].bus_id = fmt::format("00000000:{:02X}:00.0", gpus[i].bus);
            gpus[i].numa = static_cast<int>(i);
        }
        sysfs_ = std::filesystem::temp_directory_path() / fmt::format("kgpu-sysfs-{}", ::getpid());
        std::filesystem::remove_all(sysfs_);
    }
    void TearDown() override { std::filesystem::remove_all(sysfs_); }

    Result<inventory::Node> discover(nvml::EntryPoints table) {
        auto lib = nvml::Library::from_table(table, "in-memory");
        if (!lib) return std::unexpected(lib.error());
        auto session = nvml::Session::open(*lib);
        if (!session) return std::unexpected(session.error());
        return inventory::discover(*session, {sysfs_, true});
    }
    void write_numa(const std::string& sysfs_bus_id, const std::string& value) {
        auto dir = sysfs_ / "bus/pci/devices" / sysfs_bus_id;
        std::filesystem::create_directories(dir);
        std::ofstream(dir / "numa_node") << value << "\n";
    }
    std::filesystem::path sysfs_;
};

TEST_F(InventoryFakeTest, DirectNvLinksCountTowardThePeer) {
    auto& gpus = test::fake_node().gpus;
    gpus[0].nvlink_remote = {gpus[1].bus_id, gpus[1].bus_id, gpus[1].bus_id};
    gpus[1].nvlink_remote = {gpus[0].bus_id, gpus[0].bus_id, gpus[0].bus_id};
    auto node = discover(test::fake_table());
    ASSERT_TRUE(node) << node.error().message;
    EXPECT_EQ(node->topology.at(0, 1).nvlinks, 3u);
    EXPECT_EQ(node->topology.at(1, 0).nvlinks, 3u);
    EXPECT_EQ(node->topology.at(0, 2).nvlinks, 0u);
    EXPECT_EQ(node->topology.label(0, 1), "NV3");
    EXPECT_EQ(node->topology.label(0, 2), "SYS");
    EXPECT_EQ(node->topology.label(2, 2), "X");
}

TEST_F(InventoryFakeTest, SwitchLinksConnectEverySwitchAttachedPair) {
    auto& gpus = test::fake_node().gpus;
    for (int i : {0, 1}) {
        gpus[i].nvlink_remote.assign(4, "00000000:C1:00.0");
        gpus[i].nvlink_is_switch.assign(4, true);
    }
    gpus[1].nvlink_remote.resize(2);  // GPU 1 has only two links up
    gpus[1].nvlink_is_switch.resize(2);
    auto node = discover(test::fake_table());
    ASSERT_TRUE(node) << node.error().message;
    EXPECT_EQ(node->topology.at(0, 1).nvlinks, 2u);  // the smaller side
    EXPECT_EQ(node->topology.at(0, 2).nvlinks, 0u);  // GPU 2 has no switch links
}

TEST_F(InventoryFakeTest, NumaFromSysfsFirstThenNvml) {
    write_numa("0000:10:00.0", "1");   // GPU 0: sysfs says 1 (NVML says 0)
    write_numa("0000:20:00.0", "-1");  // GPU 1: no NUMA affinity
    auto node = discover(test::fake_table());  // GPU 2: no sysfs file -> NVML
    ASSERT_TRUE(node) << node.error().message;
    EXPECT_EQ(node->gpus[0].numa_node, 1);
    EXPECT_EQ(node->gpus[0].numa_source, inventory::NumaSource::sysfs);
    EXPECT_EQ(node->gpus[1].numa_node, std::nullopt);
    EXPECT_EQ(node->gpus[1].numa_source, inventory::NumaSource::sysfs);
    EXPECT_EQ(node->gpus[2].numa_node, 2);
    EXPECT_EQ(node->gpus[2].numa_source, inventory::NumaSource::nvml);
}

TEST_F(InventoryFakeTest, GpuLostDuringDiscoveryIsListedAndOthersStillAre) {
    test::fake_node().gpus[1].lost = 1;
    auto node = discover(test::fake_table());
    ASSERT_TRUE(node) << node.error().message;
    ASSERT_EQ(node->gpus.size(), 3u);
    EXPECT_FALSE(node->gpus[0].lost);
    EXPECT_TRUE(node->gpus[1].lost);
    EXPECT_THAT(node->gpus[1].error, HasSubstr("GPU_IS_LOST"));
    EXPECT_FALSE(node->gpus[2].lost);
    EXPECT_EQ(node->gpus[2].uuid, test::fake_node().gpus[2].uuid);
    EXPECT_EQ(node->topology.at(0, 1).pcie, inventory::PcieLevel::unknown);
    EXPECT_EQ(node->topology.at(0, 2).pcie, inventory::PcieLevel::system);
    ASSERT_FALSE(node->warnings.empty());
    EXPECT_THAT(node->warnings.front(), HasSubstr("GPU 1"));
    auto json = inventory::to_json(*node);
    EXPECT_EQ(json["gpus"][1]["state"], "lost");
    EXPECT_EQ(json["gpus"][0]["state"], "ok");
}

TEST_F(InventoryFakeTest, FailingDeviceCountFailsDiscoveryWithContext) {
    auto t = test::fake_table();
    t.DeviceGetCount = [](unsigned*) { return NVML_ERROR_UNKNOWN; };
    auto node = discover(t);
    ASSERT_FALSE(node);
    EXPECT_THAT(node.error().message, HasSubstr("counting GPUs"));
    EXPECT_THAT(node.error().message, HasSubstr("nvmlDeviceGetCount_v2"));
}

TEST_F(InventoryFakeTest, OptionalValuesMissingOnAnOldDriverAreNotErrors) {
    auto node = discover(test::fake_table());  // no serial, minor, cc, power, MIG entries
    ASSERT_TRUE(node) << node.error().message;
    EXPECT_TRUE(node->warnings.empty()) << node->warnings.front();
    EXPECT_EQ(node->gpus[0].mig_mode, inventory::MigMode::unsupported);
    EXPECT_EQ(node->gpus[0].power_limit_w, std::nullopt);
    EXPECT_EQ(node->gpus[0].memory_total_mib, 16u * 1024);
}

TEST(MigProfileName, RoundsLikeNvidia) {
    EXPECT_EQ(inventory::mig_profile_name(1, 9728, 81920), "1g.10gb");
    EXPECT_EQ(inventory::mig_profile_name(2, 19968, 81920), "2g.20gb");
    EXPECT_EQ(inventory::mig_profile_name(3, 40192, 81920), "3g.40gb");
    EXPECT_EQ(inventory::mig_profile_name(7, 80896, 81920), "7g.80gb");
    EXPECT_EQ(inventory::mig_profile_name(1, 4864, 40960), "1g.5gb");
    EXPECT_EQ(inventory::mig_profile_name(1, 9856, 81559), "1g.10gb");
}

TEST(NodeStrings, CudaVersionAndArchitecture) {
    inventory::Node n;
    n.cuda_driver_version = 12040;
    EXPECT_EQ(n.cuda_version_string(), "12.4");
    n.cuda_driver_version = 11080;
    EXPECT_EQ(n.cuda_version_string(), "11.8");
    EXPECT_EQ(inventory::architecture_name(9), "hopper");
    EXPECT_EQ(inventory::architecture_name(42), "unknown");
}

}  // namespace
