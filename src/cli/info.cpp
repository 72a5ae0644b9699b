#include "cli/info.h"

#include <iostream>

#include "common/json.h"
#include "inventory/discovery.h"
#include "inventory/json.h"

namespace kgpu::cli {

void add_info_command(CLI::App& app, InfoOptions& opts) {
    auto* cmd = app.add_subcommand("info", "Show the node's GPUs, MIG devices and topology matrix");
    add_nvml_options(*cmd, opts.nvml);
    cmd->add_flag("--json", opts.json, "Print JSON (schema: docs/info-json.md)");
    cmd->add_option("--sysfs-root", opts.sysfs_root, "Where the host's /sys is mounted")->capture_default_str();
}

void print_info_text(const inventory::Node& node, std::ostream& out) {
    out << fmt::format("Driver version: {}    CUDA driver version: {}\n", node.driver_version,
                       node.cuda_driver_version ? node.cuda_version_string() : "unknown");
    if (node.gpus.empty()) {
        out << "No NVIDIA GPUs found: the driver is loaded but reports 0 devices.\n";
    }
    for (const auto& g : node.gpus) {
        if (g.lost || g.uuid.empty()) {
            out << fmt::format("GPU {}: {} ({})\n", g.index, g.lost ? "LOST" : "UNREADABLE", g.error);
            continue;
        }
        std::string numa = g.numa_node ? std::to_string(*g.numa_node) : "-";
        out << fmt::format("GPU {}: {} (UUID: {})\n", g.index, g.name, g.uuid);
        out << fmt::format("    bus {}  /dev/nvidia{}  NUMA {}  {} MiB  compute {}.{}  {}", g.pci_bus_id, g.minor,
                           numa, g.memory_total_mib, g.cc_major, g.cc_minor, g.architecture);
        if (g.power_limit_w) out << fmt::format("  {} W", *g.power_limit_w);
        out << fmt::format("  MIG {}\n", to_string(g.mig_mode));
        if (g.mig_pending != g.mig_mode)
            out << fmt::format("    MIG mode change pending: {} (takes effect after a GPU reset)\n", to_string(g.mig_pending));
        for (const auto& m : g.mig_devices) {
            out << fmt::format("  MIG {:<8} Device {}: (UUID: {})  GI {} CI {}  {} MiB  {} SMs\n", m.profile, m.index,
                               m.uuid, m.gpu_instance_id, m.compute_instance_id, m.memory_mib, m.sm_count);
        }
    }
    if (node.gpus.size() > 1) {
        out << "\nTopology:\n";
        const auto& t = node.topology;
        out << fmt::format("{:<8}", "");
        for (size_t b = 0; b < t.size(); ++b) out << fmt::format("{:<7}", fmt::format("GPU{}", b));
        out << "NUMA\n";
        for (size_t a = 0; a < t.size(); ++a) {
            out << fmt::format("{:<8}", fmt::format("GPU{}", a));
            for (size_t b = 0; b < t.size(); ++b) out << fmt::format("{:<7}", t.label(a, b));
            const auto& numa = node.gpus[a].numa_node;
            out << (numa ? std::to_string(*numa) : "N/A") << "\n";
        }
        out << "\nLegend:\n"
               "  X    = Self\n"
               "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes\n"
               "  NODE = Connection traversing PCIe as well as the interconnect between PCIe host bridges within a NUMA node\n"
               "  PHB  = Connection traversing PCIe as well as a PCIe host bridge\n"
               "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe host bridge)\n"
               "  PIX  = Connection traversing at most a single PCIe bridge\n"
               "  NV#  = Connection traversing a bonded set of # NVLinks\n";
    }
    for (const auto& w : node.warnings) out << "warning: " << w << "\n";
}

int run_info(const InfoOptions& opts) {
    auto session = open_nvml(opts.nvml);
    if (!session) {
        std::cerr << "kgpu info: " << session.error().message << "\n";
        return 1;
    }
    inventory::DiscoveryOptions dopts;
    dopts.sysfs_root = opts.sysfs_root;
    auto node = inventory::discover(*session, dopts);
    if (!node) {
        std::cerr << "kgpu info: " << node.error().message << "\n";
        return 1;
    }
    if (opts.json) {
        std::cout << kgpu::json::dump_text(inventory::to_json(*node), 2) << "\n";
    } else {
        print_info_text(*node, std::cout);
    }
    return 0;
}

}  // namespace kgpu::cli
