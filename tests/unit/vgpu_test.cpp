// vGPU detection from PCI configuration spaces (gpu-feature-discovery's internal/vgpu rules) on
// configuration spaces built byte by byte from the documented layouts (support/pci_config.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "inventory/pci.h"
#include "inventory/vgpu.h"
#include "support/pci_config.h"
#include "support/process.h"

using namespace kgpu;
using kgpu::test::nvidia_gpu_config;
using kgpu::test::nvidia_vgpu_config;
using kgpu::test::PciConfig;
using kgpu::test::vendor_specific;
using kgpu::test::vgpu_body;
using ::testing::HasSubstr;

namespace {

std::optional<std::string> cap_of(const PciConfig& c) {
    auto cap = inventory::vendor_capability(c.bytes(), "dev");
    EXPECT_TRUE(cap) << cap.error().message;
    return cap ? *cap : std::nullopt;
}

TEST(VgpuCapability, APassthroughGpuHasNone) {
    EXPECT_EQ(cap_of(nvidia_gpu_config()), std::nullopt);
    EXPECT_EQ(cap_of(PciConfig(0x10de, 0x2330, 0x030200)), std::nullopt);  // no capability list at all
}

TEST(VgpuCapability, TheVfCapabilityAndItsHostDriverRecord) {
    auto cap = cap_of(nvidia_vgpu_config("550.54.16", "r550_00"));
    ASSERT_TRUE(cap);
    EXPECT_EQ(cap->size(), 27u);  // id, next, length, "VF", record id, record length, 10 + 10
    EXPECT_EQ((*cap)[0], '\x09');
    EXPECT_TRUE(inventory::is_vgpu_capability(*cap));
    auto host = inventory::vgpu_host_driver(*cap);
    ASSERT_TRUE(host);
    EXPECT_EQ(host->version, "550.54.16");
    EXPECT_EQ(host->branch, "r550_00");
}

TEST(VgpuCapability, RecordsBeforeTheHostDriverRecordAreSkippedByTheirLength) {
    PciConfig c = nvidia_gpu_config();
    c.capability(0xa0, 0x09, vendor_specific(vgpu_body("535.161.05", "r535_14", {{3, "abcd"}, {7, ""}, {1, "x"}})));
    auto cap = cap_of(c);
    ASSERT_TRUE(cap);
    auto host = inventory::vgpu_host_driver(*cap);
    ASSERT_TRUE(host);
    EXPECT_EQ(host->version, "535.161.05");
    EXPECT_EQ(host->branch, "r535_14");
}

TEST(VgpuCapability, TheStatusBitGatesTheList) {
    PciConfig c = nvidia_vgpu_config("550.54.16", "r550_00");
    c.set(0x06, c.byte(0x06) & ~0x10);
    EXPECT_EQ(cap_of(c), std::nullopt);
}

TEST(VgpuCapability, OnlyTheFirstVendorSpecificCapabilityCounts) {
    PciConfig c = nvidia_gpu_config();
    c.capability(0x90, 0x09, vendor_specific("XY"));  // another vendor-specific capability first
    c.capability(0xc8, 0x09, vendor_specific(vgpu_body("550.54.16", "r550_00")));
    auto cap = cap_of(c);
    ASSERT_TRUE(cap);
    EXPECT_EQ(cap->size(), 5u);
    EXPECT_FALSE(inventory::is_vgpu_capability(*cap));
}

TEST(VgpuCapability, LoopedAndBrokenListsEnd) {
    PciConfig loop = nvidia_gpu_config();
    loop.set(0x78 + 1, 0x60);  // PCIe -> PM again
    EXPECT_EQ(cap_of(loop), std::nullopt);
    PciConfig self = nvidia_gpu_config();
    self.set(0x60 + 1, 0x60);
    EXPECT_EQ(cap_of(self), std::nullopt);
    PciConfig broken = nvidia_vgpu_config("550.54.16", "r550_00");
    broken.set(0x68, 0xff);  // MSI's id reads as all ones: the chain is broken before the vGPU one
    EXPECT_EQ(cap_of(broken), std::nullopt);
}

TEST(VgpuCapability, AShortReadIsAnErrorThatSaysWhy) {
    auto r = inventory::vendor_capability(nvidia_gpu_config(64).bytes(), "/sys/bus/pci/devices/0000:3b:00.0/config");
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().message, HasSubstr("/sys/bus/pci/devices/0000:3b:00.0/config"));
    EXPECT_THAT(r.error().message, HasSubstr("64 bytes"));
    EXPECT_THAT(r.error().message, HasSubstr("CAP_SYS_ADMIN"));
}

TEST(VgpuCapability, ACapabilityPastTheEndIsAnError) {
    PciConfig c = nvidia_gpu_config();
    c.capability(0xf0, 0x09, vendor_specific(vgpu_body("550.54.16", "r550_00")).substr(0, 14));
    c.set(0xf2, 27);  // 0xf0 + 27 > 256
    auto r = inventory::vendor_capability(c.bytes(), "dev");
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().message, HasSubstr("0xf0"));
}

// Found by fuzz/targets/pci_config.cpp (corpus crash-6f02767…): in a PCIe function's 4096-byte
// space a capability list entry near 0xff ran on into the extended space.
TEST(VgpuCapability, ACapabilityCrossingIntoTheExtendedSpaceIsAnError) {
    PciConfig c = nvidia_gpu_config(4096);
    c.capability(0xf8, 0x09, vendor_specific(vgpu_body("550.54.16", "r550_00")));  // 27 bytes from 0xf8
    auto r = inventory::vendor_capability(c.bytes(), "dev");
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().message, HasSubstr("0xf8"));
    EXPECT_THAT(r.error().message, HasSubstr("256-byte"));
    // The same capability inside the header is fine in a 4096-byte space.
    PciConfig ok = nvidia_gpu_config(4096);
    ok.capability(0xc8, 0x09, vendor_specific(vgpu_body("550.54.16", "r550_00")));
    auto cap = cap_of(ok);
    ASSERT_TRUE(cap);
    EXPECT_TRUE(inventory::is_vgpu_capability(*cap));
}

TEST(VgpuCapability, MalformedRecordsHaveNoHostDriver) {
    auto cap = [](std::string body) { return std::string("\x09\x00", 2) + vendor_specific(body); };
    EXPECT_FALSE(inventory::vgpu_host_driver(cap("VF")));                        // no record at all
    EXPECT_FALSE(inventory::vgpu_host_driver(cap(std::string("VF\x05\x00", 4))));  // a zero length
    EXPECT_FALSE(inventory::vgpu_host_driver(cap(std::string("VF\x05\x30", 4))));  // past the end
    EXPECT_FALSE(inventory::vgpu_host_driver(cap(std::string("VF\x00\x16", 4) + "550.54")));  // 20 bytes short
    // NULs are trimmed at both ends of each field, as GFD's strings.Trim does.
    auto host = inventory::vgpu_host_driver(cap(std::string("VF\x00\x16", 4) + std::string(2, '\0') + "550.54" +
                                                std::string(2, '\0') + "r550" + std::string(6, '\0')));
    ASSERT_TRUE(host);
    EXPECT_EQ(host->version, "550.54");
    EXPECT_EQ(host->branch, "r550");
    EXPECT_FALSE(inventory::is_vgpu_capability(cap("VX")));
    EXPECT_FALSE(inventory::is_vgpu_capability("\x09\x00\x04V"));
}

// ---- the sysfs scan ----------------------------------------------------------------------------

// The vGPUs as `kgpu labels` finds them: the one PCI scan, then each NVIDIA function's config.
Result<std::vector<inventory::VgpuDevice>> vgpus(const std::string& sysfs_root) {
    auto functions = inventory::nvidia_pci_functions(sysfs_root);
    if (!functions) return std::unexpected(functions.error());
    return inventory::find_vgpu_devices(*functions);
}

class VgpuScan : public ::testing::Test {
protected:
    void device(const std::string& address, const std::string& vendor, const std::string& config) {
        sys_.write("bus/pci/devices/" + address + "/vendor", vendor + "\n");
        sys_.write("bus/pci/devices/" + address + "/class", "0x030200\n");
        if (!config.empty()) sys_.write("bus/pci/devices/" + address + "/config", config);
    }
    test::TempDir sys_;
};

TEST_F(VgpuScan, FindsNvidiaVirtualFunctionsByAddress) {
    sys_.write("bus/pci/devices/0000:00:00.0/vendor", "0x8086\n");  // a host bridge: nothing else read
    device("0000:3b:00.0", "0x10de", nvidia_gpu_config().bytes());
    device("0000:af:00.0", "0x10de", nvidia_vgpu_config("550.54.16", "r550_00").bytes());
    device("0000:5e:00.0", "0x10de", nvidia_vgpu_config("550.54.15", "r550_00").bytes());
    device("0000:86:00.0", "0x15b3", nvidia_vgpu_config("1", "2").bytes());  // "VF" on a NIC: not NVIDIA
    auto found = vgpus(sys_.path());
    ASSERT_TRUE(found) << found.error().message;
    ASSERT_EQ(found->size(), 2u);
    EXPECT_EQ((*found)[0].address, "0000:5e:00.0");
    EXPECT_EQ((*found)[0].host_driver->version, "550.54.15");
    EXPECT_EQ((*found)[1].address, "0000:af:00.0");
    EXPECT_EQ((*found)[1].host_driver->version, "550.54.16");
}

TEST_F(VgpuScan, ANodeWithoutVgpusFindsNone) {
    device("0000:3b:00.0", "0x10de", nvidia_gpu_config().bytes());
    auto found = vgpus(sys_.path());
    ASSERT_TRUE(found) << found.error().message;
    EXPECT_TRUE(found->empty());
    std::filesystem::create_directories(sys_.path() + "/empty/bus/pci/devices");
    EXPECT_TRUE(vgpus(sys_.path() + "/empty")->empty());
}

TEST_F(VgpuScan, AVfWithoutHostDriverRecordIsListedWithoutOne) {
    PciConfig c = nvidia_gpu_config();
    c.capability(0xc8, 0x09, vendor_specific("VF"));
    device("0000:3b:00.0", "0x10de", c.bytes());
    auto found = vgpus(sys_.path());
    ASSERT_TRUE(found) << found.error().message;
    ASSERT_EQ(found->size(), 1u);
    EXPECT_FALSE((*found)[0].host_driver);
}

TEST_F(VgpuScan, ErrorsNameTheFile) {
    auto missing = vgpus(sys_.path() + "/nowhere");
    ASSERT_FALSE(missing);
    EXPECT_THAT(missing.error().message, HasSubstr(sys_.path() + "/nowhere/bus/pci/devices"));

    device("0000:3b:00.0", "0x10de", "");  // no config file
    auto no_config = vgpus(sys_.path());
    ASSERT_FALSE(no_config);
    EXPECT_THAT(no_config.error().message, HasSubstr("0000:3b:00.0/config"));

    device("0000:3b:00.0", "0x10de", nvidia_gpu_config(64).bytes());  // what a non-root read gives
    auto short_read = vgpus(sys_.path());
    ASSERT_FALSE(short_read);
    EXPECT_THAT(short_read.error().message, HasSubstr("0000:3b:00.0/config: 64 bytes"));

    device("0000:3b:00.0", "0x10de", nvidia_gpu_config().bytes());
    std::filesystem::create_directories(sys_.path() + "/bus/pci/devices/0000:00:1f.0");  // no vendor
    auto no_vendor = vgpus(sys_.path());
    ASSERT_FALSE(no_vendor);
    EXPECT_THAT(no_vendor.error().message, HasSubstr("0000:00:1f.0/vendor"));
}

// The PCI scan itself (shared by labels and doctor): NVIDIA's functions by address with their
// class; what the GPU Operator counts as a GPU (VGA, 3D controller) and what doctor lists.
TEST_F(VgpuScan, NvidiaFunctionsAndWhichAreGpus) {
    sys_.write("bus/pci/devices/0000:00:00.0/vendor", "0x8086\n");
    for (const auto& [address, cls] : std::vector<std::pair<std::string, std::string>>{
             {"0000:86:00.0", "0x030200"}, {"0000:3b:00.0", "0x030000"}, {"0000:3b:00.1", "0x040300"},
             {"0000:c1:00.0", "0x068000"}, {"0000:d0:00.0", "0x038000"}}) {
        sys_.write("bus/pci/devices/" + address + "/vendor", "0x10de\n");
        sys_.write("bus/pci/devices/" + address + "/class", cls + "\n");
    }
    auto found = inventory::nvidia_pci_functions(sys_.path());
    ASSERT_TRUE(found) << found.error().message;
    std::vector<std::string> all, gpus, display;
    for (const auto& f : *found) {
        all.push_back(f.address);
        if (inventory::is_gpu_class(f.class_code)) gpus.push_back(f.address);
        if (inventory::is_display_class(f.class_code)) display.push_back(f.address);
    }
    EXPECT_EQ(all, (std::vector<std::string>{"0000:3b:00.0", "0000:3b:00.1", "0000:86:00.0", "0000:c1:00.0",
                                             "0000:d0:00.0"}));
    EXPECT_EQ(gpus, (std::vector<std::string>{"0000:3b:00.0", "0000:86:00.0"}));
    EXPECT_EQ(display, (std::vector<std::string>{"0000:3b:00.0", "0000:86:00.0", "0000:d0:00.0"}));
    EXPECT_EQ((*found)[2].class_code, 0x030200u);

    sys_.write("bus/pci/devices/0000:86:00.0/class", "three-d\n");
    auto bad = inventory::nvidia_pci_functions(sys_.path());
    ASSERT_FALSE(bad);
    EXPECT_THAT(bad.error().message, HasSubstr("0000:86:00.0/class: 'three-d' is not a PCI class code"));
}

}  // namespace
