#include "demo/host.h"

#include <algorithm>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/pci.h"

namespace kgpu::demo {

namespace fs = std::filesystem;

const SimGpu* SimNode::by_id(std::string_view id) const {
    for (const auto& g : gpus)
        if (g.uuid == id || std::to_string(g.index) == id) return &g;
    return nullptr;
}

std::string SimNode::connection(int a, int b) const {
    if (a < 0 || b < 0 || static_cast<size_t>(a) >= matrix.size() || static_cast<size_t>(b) >= matrix[a].size()) return "?";
    return matrix[a][b];
}

Result<SimNode> parse_info_json(std::string_view text) {
    auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return fail(Code::parse, "kgpu info --json: output is not a JSON object");
    try {
        SimNode n;
        n.driver_version = j.at("driver_version").get<std::string>();
        n.cuda_version = j.at("cuda_version").get<std::string>();
        for (const auto& g : j.at("gpus")) {
            SimGpu s;
            s.index = g.at("index").get<int>();
            if (g.value("state", "ok") == "lost") return fail(Code::parse, "kgpu info --json: GPU {} is lost", s.index);
            s.uuid = g.at("uuid").get<std::string>();
            s.name = g.at("name").get<std::string>();
            s.pci_bus_id = g.at("pci_bus_id").get<std::string>();
            // It names a directory of the fake host's sysfs: it must not reach outside it.
            if (s.pci_bus_id.empty() || s.pci_bus_id.find('/') != std::string::npos ||
                s.pci_bus_id.find("..") != std::string::npos)
                return fail(Code::parse, "kgpu info --json: GPU {} has pci_bus_id '{}', expected a PCI address such as "
                                         "00000000:18:00.0",
                            s.index, s.pci_bus_id);
            s.minor = g.at("minor").get<int>();
            if (g.contains("numa_node") && g["numa_node"].is_number()) s.numa = g["numa_node"].get<int>();
            n.gpus.push_back(std::move(s));
        }
        for (const auto& row : j.at("topology").at("matrix")) n.matrix.push_back(row.get<std::vector<std::string>>());
        return n;
    } catch (const nlohmann::json::exception& e) {
        return fail(Code::parse, "kgpu info --json: {}", e.what());
    }
}

std::string kernel_xid_line(const SimGpu& gpu, int xid) {
    // NVRM prints the bus id without the function: "NVRM: Xid (PCI:0000:18:00): 94, pid=…".
    std::string bus = pci::sysfs_address(gpu.pci_bus_id);
    if (auto dot = bus.rfind('.'); dot != std::string::npos) bus.resize(dot);
    return fmt::format("kernel: NVRM: Xid (PCI:{}): {}, pid=4242, name=python3, Contained: SM (0x1). RST: No, D-RST: No",
                       bus, xid);
}

Status write_fake_host(const HostPaths& p, const SimNode& node) {
    auto put = [&](const std::string& rel, const std::string& content, unsigned mode = 0644) -> Status {
        fs::path path = p.root / rel;
        std::error_code ec;
        fs::create_directories(path.parent_path(), ec);
        if (ec) return fail(Code::io, "creating {}: {}", path.parent_path().string(), ec.message());
        auto st = files::write_atomic(path, content, mode);
        if (!st) return st;
        fs::permissions(path, static_cast<fs::perms>(mode), ec);  // exact mode, whatever the umask
        return {};
    };
    const std::string release = "6.1.0-kgpu-demo-amd64";
    std::vector<std::pair<std::string, std::string>> text{
        {"proc/modules",
         "nvidia_uvm 1527808 0 - Live 0x0000000000000000 (PO)\n"
         "nvidia_drm 77824 0 - Live 0x0000000000000000 (PO)\n"
         "nvidia_modeset 1306624 1 nvidia_drm, Live 0x0000000000000000 (PO)\n"
         "nvidia 56717312 2 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (PO)\n"},
        {"proc/driver/nvidia/version",
         fmt::format("NVRM version: NVIDIA UNIX x86_64 Kernel Module  {}  (simulated by kgpu demo)\n", node.driver_version)},
        {"proc/sys/kernel/osrelease", release + "\n"},
        {"etc/containerd/config.toml",
         "# written by kgpu demo: the nvidia runtime as containerd's default (what `kgpu runtime configure\n"
         "# --runtime containerd --set-as-default` produces)\n"
         "version = 2\n\n"
         "[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n"
         "  default_runtime_name = \"nvidia\"\n\n"
         "  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\n"
         "    runtime_type = \"io.containerd.runc.v2\"\n"
         "    [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\n"
         "      BinaryName = \"/usr/bin/nvidia-container-runtime\"\n"
         "      SystemdCgroup = true\n"},
        {"var/log/kern.log",
         fmt::format("kernel: nvidia: loading out-of-tree module taints kernel.\n"
                     "kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {}\n"
                     "kernel: nvidia-uvm: Loaded the UVM driver, major device number 510.\n",
                     node.driver_version)},
        {"lib/modules/" + release + "/updates/dkms/nvidia.ko", ""},
    };
    for (const auto& [rel, content] : text)
        if (auto st = put(rel, content); !st) return st;
    for (const char* exe : {"usr/bin/nvidia-container-runtime", "usr/bin/nvidia-container-runtime-hook", "usr/bin/nvidia-ctk"})
        if (auto st = put(exe, "#!/bin/sh\nexit 0\n", 0755); !st) return st;
    // Device nodes: regular files with the modes the driver gives its character devices.
    std::vector<std::string> devs{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"};
    for (const auto& g : node.gpus) devs.push_back("nvidia" + std::to_string(g.minor));
    for (const auto& d : devs)
        if (auto st = put("dev/" + d, "", 0666); !st) return st;
    for (const auto& g : node.gpus) {
        const std::string dir = "sys/bus/pci/devices/" + pci::sysfs_address(g.pci_bus_id) + "/";
        for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
                 {"vendor", "0x10de"}, {"class", "0x030200"}, {"numa_node", std::to_string(g.numa.value_or(-1))}})
            if (auto st = put(dir + name, value + "\n"); !st) return st;
    }
    std::error_code ec;
    for (const auto& d : {p.device_plugins(), p.pod_resources_socket().parent_path(), p.cdi_dir()}) {
        fs::create_directories(d, ec);
        if (ec) return fail(Code::io, "creating {}: {}", d.string(), ec.message());
    }
    return {};
}

}  // namespace kgpu::demo
