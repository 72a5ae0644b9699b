// common/pci.h: one conversion of PCI addresses to sysfs's names, domains above 0xffff included.
#include "common/pci.h"

#include <gtest/gtest.h>

using kgpu::pci::sysfs_address;

TEST(PciAddress, NvmlsFormAndSysfsFormBecomeSysfsForm) {
    EXPECT_EQ(sysfs_address("00000000:3B:00.0"), "0000:3b:00.0");  // NVML's busId
    EXPECT_EQ(sysfs_address("0000:3B:00.0"), "0000:3b:00.0");      // NVML's busIdLegacy
    EXPECT_EQ(sysfs_address("0000:3b:00.0"), "0000:3b:00.0");
    EXPECT_EQ(sysfs_address("0:1a:0.1"), "0000:1a:00.1");
}

// The conversion this replaced kept the last 12 characters: "0000:3b:00.0" for domain 0x10000.
TEST(PciAddress, ADomainAboveFfffKeepsItsDigits) {
    EXPECT_EQ(sysfs_address("00010000:3B:00.0"), "10000:3b:00.0");
    EXPECT_EQ(sysfs_address("FFFFFFFF:FF:1F.7"), "ffffffff:ff:1f.7");
}

TEST(PciAddress, WhatIsNotAnAddressIsEmpty) {
    for (const char* bad : {"", "3b:00.0", "0000:3b:00", "0000:3b:00.", "0000:3g:00.0", "0000:3b:00.0:1", "1:2:3.4.5",
                            "100000000:3b:00.0", "0000:100:00.0", "0000:3b:20.0", "0000:3b:00.8", "GPU-0", "0000: 3b:00.0"})
        EXPECT_EQ(sysfs_address(bad), "") << bad;
}
