// What NVIDIA's XID catalogue says an XID number means, in a few words (shared/facts/diagnostics.md).
// One table for every feature that names XIDs (device-plugin health, doctor, exporter).
#pragma once

#include <string_view>

namespace kgpu::nvml {

// "double-bit ECC error" for 48; "" for an XID without an entry.
std::string_view xid_meaning(unsigned xid);

}  // namespace kgpu::nvml
