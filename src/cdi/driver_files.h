// The driver's files on the host that a container needs, found under a driver root and a device
// root (the GPU Operator installs the driver under /run/nvidia/driver; device nodes may live
// under another root). Paths are kept twice: as the container sees them (the absolute path
// without the root) and where they are on the host.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace kgpu::cdi {

struct HostFile {
    std::string path;       // in the container, e.g. /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
    std::string host_path;  // on the host, e.g. /run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
};

struct DeviceNode {
    std::string path;       // /dev/nvidia0
    std::string host_path;
    // Set when host_path is a character device (from stat): CDI then carries type "c" and the
    // numbers; otherwise the runtime reads them from host_path when the container starts.
    std::optional<unsigned> major, minor;
};

// The library directories of facts/nvml.md, relative to a root, in search order.
const std::vector<std::string>& library_dirs();

// Every `*.so.<driver_version>` regular file (or link to one) directly in the library dirs under
// `root`, sorted by path; a directory reached twice through a symlink (merged /usr) is read once.
std::vector<HostFile> find_libraries(const std::filesystem::path& root, const std::string& driver_version);

// The driver binaries (nvidia-smi, nvidia-debugdump, nvidia-persistenced, nvidia-cuda-mps-control,
// nvidia-cuda-mps-server) found in usr/bin, usr/sbin, bin, sbin under `root`.
std::vector<HostFile> find_binaries(const std::filesystem::path& root);

// /lib/firmware/nvidia/<version>/gsp*.bin under `root`.
std::vector<HostFile> find_firmware(const std::filesystem::path& root, const std::string& driver_version);

// /run/nvidia-persistenced/socket under `root`, when present.
std::optional<HostFile> find_persistenced_socket(const std::filesystem::path& root);

// The device node `path` (absolute, e.g. /dev/nvidiactl) under `dev_root`; nullopt when absent.
std::optional<DeviceNode> find_device_node(const std::filesystem::path& dev_root, const std::string& path);

// /proc/driver/nvidia-caps/mig-minors under `proc_root` (the parent of driver/): "gpu0/gi7/access"
// -> 66. Errors: the file is missing or a line is not "<name> <minor>" (message names file:line).
Result<std::map<std::string, unsigned>> read_mig_minors(const std::filesystem::path& proc_root);

}  // namespace kgpu::cdi
