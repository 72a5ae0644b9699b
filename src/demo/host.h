// The simulated node as the demo sees it: the inventory (`kgpu info --json` of the simulator)
// and a fake host filesystem laid out under the work dir, so `kgpu doctor --root` finds what a
// healthy GPU node has (/proc/modules, /proc/driver/nvidia/version, /dev/nvidia*, PCI functions in
// sysfs, containerd with the nvidia runtime, the toolkit binaries, a kernel log) and the kubelet's
// sockets where a real node has them (var/lib/kubelet/...).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace kgpu::demo {

struct SimGpu {
    int index = 0;
    std::string uuid, name, pci_bus_id;
    int minor = 0;
    std::optional<int> numa;
};

struct SimNode {
    std::string driver_version, cuda_version;
    std::vector<SimGpu> gpus;
    std::vector<std::vector<std::string>> matrix;  // nvidia-smi topo -m labels, [a][b]

    const SimGpu* by_id(std::string_view device_id) const;  // a UUID or an index
    std::string connection(int a, int b) const;              // "NV18", "PXB", ... or "?"
    static bool is_nvlink(std::string_view connection) { return connection.starts_with("NV"); }
};

// Parses `kgpu info --json` (schema kgpu.info/v1, docs/info-json.md). Errors: parse.
Result<SimNode> parse_info_json(std::string_view text);

// Paths of the fake host under `root`.
struct HostPaths {
    std::filesystem::path root;
    std::filesystem::path device_plugins() const { return root / "var/lib/kubelet/device-plugins"; }
    std::filesystem::path pod_resources_socket() const { return root / "var/lib/kubelet/pod-resources/kubelet.sock"; }
    std::filesystem::path kernel_log() const { return root / "var/log/kern.log"; }
    std::filesystem::path cdi_dir() const { return root / "var/run/cdi"; }
};

// Lays out a healthy GPU node for `node` under paths.root. Errors: io naming the file.
Status write_fake_host(const HostPaths& paths, const SimNode& node);

// The line the NVIDIA kernel module logs for an XID, as `kgpu doctor` (and dmesg readers) parse it.
std::string kernel_xid_line(const SimGpu& gpu, int xid);

}  // namespace kgpu::demo
