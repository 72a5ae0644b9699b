// Reading the host for `kgpu doctor`: every path goes through a root prefix (--root) so tests lay
// out fake hosts; nothing here calls NVML.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace kgpu::doctor {

// Names in /proc/modules (first column).
std::vector<std::string> parse_modules(std::string_view proc_modules);

// The driver version in /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64 Kernel
// Module  550.54.15  Tue Mar ..."), or "" when the text has no such line.
std::string parse_driver_version(std::string_view proc_version);

// XIDs in kernel log text ("NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus").
struct XidEvent {
    std::string pci;  // as logged, "0000:3b:00"
    int xid = 0;
    std::string line;
};
std::vector<XidEvent> parse_xids(std::string_view log);

// Recovery classes of facts/diagnostics.md.
enum class XidClass { application, recoverable, reset_required, unknown };
XidClass classify_xid(int xid);

// Reads a kernel log: /dev/kmsg (a character device: read record by record without blocking) or a
// plain file (a saved dmesg, /var/log/kern.log, a test fixture).
Result<std::string> read_kernel_log(const std::filesystem::path& path);

// Connects to a unix socket and closes it. Errors: not_found (no file), invalid_argument (not a
// socket), unavailable (nobody listening: a stale socket), io otherwise.
kgpu::Status probe_unix_socket(const std::filesystem::path& path);

// The first of `names` found as a regular file in one of `dirs` (all under `root`).
std::optional<std::filesystem::path> find_binary(const std::filesystem::path& root, std::string_view name,
                                                 const std::vector<std::string>& dirs);

}  // namespace kgpu::doctor
