// The container runtime's inventory cache (toolkit/inventory_cache.h): what the file keeps, and
// which changes on the node change the witness. The runtime using it end to end, with the
// simulator keeping /proc: container_runtime_test.cpp (RuntimeCache.*).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "driver_root.h"
#include "node_fixture.h"
#include "toolkit/inventory_cache.h"

using namespace kgpu;
using namespace kgpu::toolkit;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

TEST(InventoryCache, KeepsEveryFieldTheRuntimeCanRead) {
    CachedInventory c;
    c.witness = "w\nx";
    c.node = test::toolkit_node();
    c.node.nvml_version = "12.550.54.15";
    c.node.warnings = {"NUMA unknown"};
    auto& g = c.node.gpus[0];
    g.serial = "1650923000000";
    g.pci_device_id = 0x233010DE;
    g.pci_class = 0x030200;
    g.numa_node = 1;
    g.numa_source = inventory::NumaSource::sysfs;
    g.architecture = "hopper";
    g.power_limit_w = 700;
    g.persistence_mode = false;
    g.mig_pending = inventory::MigMode::enabled;
    auto& m = c.node.gpus[1].mig_devices[1];
    m.memory_mib = 40192;
    m.sm_count = 60;
    m.slices = m.compute_slices = 3;
    m.copy_engines = 3, m.decoders = 2, m.encoders = 0, m.jpeg_decoders = 1, m.optical_flow_accelerators = 1;
    c.brands = {{g.uuid, "nvidia"}};

    const std::string text = to_cache_text(c).value();
    auto back = from_cache_text(text);
    ASSERT_TRUE(back) << back.error().message;
    EXPECT_EQ(to_cache_text(*back).value(), text);
    EXPECT_EQ(back->witness, "w\nx");
    const auto& bg = back->node.gpus[0];
    EXPECT_EQ(bg.pci_class, 0x030200u);
    EXPECT_EQ(bg.numa_node, 1);
    EXPECT_EQ(bg.numa_source, inventory::NumaSource::sysfs);
    EXPECT_EQ(bg.power_limit_w, 700u);
    EXPECT_EQ(bg.persistence_mode, false);
    EXPECT_EQ(bg.mig_pending, inventory::MigMode::enabled);
    EXPECT_FALSE(back->node.gpus[1].numa_node.has_value());
    EXPECT_EQ(back->node.gpus[1].mig_mode, inventory::MigMode::enabled);
    EXPECT_EQ(back->node.gpus[1].mig_devices[1].optical_flow_accelerators, 1u);
    EXPECT_EQ(back->node.gpus[1].mig_devices[1].gpu_instance_id, 2u);
    EXPECT_TRUE(back->node.gpus[2].lost);
    EXPECT_EQ(back->node.cuda_version_string(), "12.4");
    EXPECT_EQ(back->brands.at(g.uuid), "nvidia");
}

// JSON cannot hold a string that is not UTF-8: such an inventory is not cached (NVML is asked
// at each create), where dump() threw out of the runtime's create.
TEST(InventoryCache, AStringNvmlGaveThatIsNotUtf8IsNotCached) {
    CachedInventory c;
    c.node.gpus.resize(1);
    c.node.gpus[0].name = std::string("NVIDIA H100 \xff");
    auto text = to_cache_text(c);
    ASSERT_FALSE(text);
    EXPECT_EQ(text.error().code, Code::invalid_argument);
    EXPECT_THAT(text.error().message, HasSubstr("not UTF-8"));
}

TEST(InventoryCache, AFileItDidNotWriteIsAnError) {
    EXPECT_THAT(from_cache_text("{not json").error().message, HasSubstr("not JSON"));
    EXPECT_THAT(from_cache_text(R"({"schema":"kgpu.runtime-inventory/v0"})").error().message,
                HasSubstr("schema 'kgpu.runtime-inventory/v0', expected 'kgpu.runtime-inventory/v1'"));
    CachedInventory c;
    c.node = test::toolkit_node();
    std::string text = to_cache_text(c).value();
    text.replace(text.find("\"minor\""), 7, "\"minr\"");
    EXPECT_EQ(from_cache_text(text).error().code, Code::parse);
    text = to_cache_text(c).value();
    text.replace(text.find("\"mig_mode\": \"enabled\""), 21, "\"mig_mode\": \"maybe\"");
    EXPECT_THAT(from_cache_text(text).error().message, HasSubstr("unknown MIG mode 'maybe'"));
}

// A loaded driver's /proc and a driver root with device nodes and the library.
struct Witness : ::testing::Test {
    test::FakeDriverRoot drv;
    test::TempDir proc;
    RuntimeConfig config;
    Witness() {
        proc.write("driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar 5 2024\n");
        proc.write("driver/nvidia/gpus/0000:18:00.0/information", "Model: H100\n");
        proc.write("driver/nvidia/capabilities/gpu1/mig/gi1/access", "DeviceFileMinor: 147\n");
        proc.write("driver/nvidia/capabilities/gpu1/mig/gi1/ci0/access", "DeviceFileMinor: 148\n");
        drv.link("usr/lib64/libnvidia-ml.so.1", "libnvidia-ml.so.550.54.15");
        config.proc_root = proc.path();
        config.driver_root = drv.path();
    }
    std::string now() {
        auto w = inventory_witness(config);
        EXPECT_TRUE(w.has_value());
        return w.value_or("");
    }
};

TEST_F(Witness, NoneWithoutALoadedDriver) {
    fs::remove(proc.path() + "/driver/nvidia/version");
    EXPECT_FALSE(inventory_witness(config).has_value());
}

TEST_F(Witness, ChangesWithEverythingTheInventoryComesFrom) {
    const std::string base = now();
    EXPECT_EQ(now(), base);
    // The file the link names (resolved inside the driver root).
    EXPECT_THAT(base, HasSubstr("library: " + drv.path() + "/usr/lib64/libnvidia-ml.so.550.54.15 "));
    // What does not change the inventory leaves it alone.
    proc.write("driver/nvidia/gpus/0000:18:00.0/information", "Model: H100\nIRQ: 12\n");
    drv.file("usr/lib64/libcuda.so.550.54.15.extra");
    EXPECT_EQ(now(), base);

    std::string before = base;
    auto changed = [&](const char* what) {
        const std::string w = now();
        EXPECT_NE(w, before) << what;
        before = w;
    };
    proc.write("driver/nvidia/capabilities/gpu1/mig/gi2/access", "");
    changed("a GPU instance created");
    proc.write("driver/nvidia/capabilities/gpu1/mig/gi2/ci0/access", "");
    changed("its compute instance");
    fs::remove_all(proc.path() + "/driver/nvidia/capabilities/gpu1/mig/gi1");
    changed("an instance destroyed");
    proc.write("driver/nvidia/gpus/0000:2a:00.0/information", "");
    changed("a GPU bound");
    drv.link("dev/nvidia4", "/dev/full");
    changed("a device node");
    fs::remove(drv.path() + "/dev/nvidia4");
    drv.link("dev/nvidia4", "/dev/zero");
    changed("a device node's number");
    drv.link("dev/nvidia-caps/nvidia-cap200", "/dev/urandom");
    changed("a capability node");
    proc.write("driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Tue Mar 5 2024\n");
    changed("the loaded module");
    proc.write("sys/kernel/random/boot_id", "6c0a\n");
    changed("a boot");
    {
        std::ofstream(drv.path() + "/usr/lib64/libnvidia-ml.so.550.54.15", std::ios::app) << "x";
    }
    changed("the library file");
    config.nvml_library = drv.path() + "/usr/lib64/libcuda.so.550.54.15";
    changed("the configured library");
}

}  // namespace
