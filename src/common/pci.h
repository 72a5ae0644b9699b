// A PCI function's address as sysfs names it (/sys/bus/pci/devices/<address>, udev's
// /dev/dri/by-path/pci-<address>-card), from NVML's form or a user's: one conversion for kgpu.
#pragma once

#include <string>
#include <string_view>

namespace kgpu::pci {

// "domain:bus:device.function" in hex ("00000000:3B:00.0", NVML's; "0000:3b:00.0"; "3b:00.0" is
// not one) as sysfs spells it: lower case, the domain with at least four digits and no more
// leading zeros ("0000:3b:00.0"; a domain above 0xffff keeps its digits: "10000:3b:00.0"), the bus
// and device two digits, the function one. "" when `id` is not such an address (a part that is not
// hex, too long for its field, or missing).
std::string sysfs_address(std::string_view id);

}  // namespace kgpu::pci
