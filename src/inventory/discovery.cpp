#include "inventory/discovery.h"

#include <algorithm>
#include <charconv>
#include <map>

#include "common/files.h"
#include "inventory/pci.h"
#include "nvml/library.h"

namespace kgpu::inventory {
namespace {

constexpr unsigned kMaxNvLinks = 36;  // NVML_NVLINK_MAX_LINKS

// Reads a value that a GPU may not support: the value, or nullopt for NOT_SUPPORTED. Any other
// error is recorded on the GPU (the first one wins) and also yields nullopt.
template <class T>
std::optional<T> optional_value(Result<T> r, Gpu& gpu, std::vector<std::string>& warnings, std::string_view what) {
    if (r) return std::move(*r);
    if (r.error().code == Code::not_supported) return std::nullopt;
    if (r.error().code == Code::gpu_lost) gpu.lost = true;
    if (gpu.error.empty()) gpu.error = r.error().message;
    warnings.push_back(fmt::format("GPU {}: reading {}: {}", gpu.index, what, r.error().message));
    return std::nullopt;
}

// NUMA node from sysfs (what the kernel uses for allocation), else from NVML.
void read_numa(const nvml::Device& dev, const nvml::PciInfo& pci, const DiscoveryOptions& opts, Gpu& gpu) {
    auto path = opts.sysfs_root / "bus/pci/devices" / pci.sysfs_bus_id() / "numa_node";
    if (auto text = files::read_line(path)) {
        int node = -1;
        auto [p, ec] = std::from_chars(text->data(), text->data() + text->size(), node);
        if (ec == std::errc() && p == text->data() + text->size()) {
            gpu.numa_source = NumaSource::sysfs;
            if (node >= 0) gpu.numa_node = node;  // -1: no NUMA affinity
            return;
        }
    }
    if (auto n = dev.numa_node(); n && *n >= 0) {
        gpu.numa_node = *n;
        gpu.numa_source = NumaSource::nvml;
    }
}

// PCI class code ("0x030200\n") from sysfs; nothing when absent or unreadable.
void read_pci_class(const nvml::PciInfo& pci, const DiscoveryOptions& opts, Gpu& gpu) {
    auto text = files::read_line(opts.sysfs_root / "bus/pci/devices" / pci.sysfs_bus_id() / "class");
    if (!text) return;
    gpu.pci_class = parse_pci_class(*text);
}

void read_mig(const nvml::Device& dev, Gpu& gpu, std::vector<std::string>& warnings) {
    auto mode = dev.mig_mode();
    if (!mode) {
        if (mode.error().code != Code::not_supported)
            warnings.push_back(fmt::format("GPU {}: reading MIG mode: {}", gpu.index, mode.error().message));
        return;
    }
    gpu.mig_mode = mode->current ? MigMode::enabled : MigMode::disabled;
    gpu.mig_pending = mode->pending ? MigMode::enabled : MigMode::disabled;
    if (!mode->current) return;
    auto max = dev.max_mig_devices();
    if (!max) {
        warnings.push_back(fmt::format("GPU {}: reading MIG device count: {}", gpu.index, max.error().message));
        return;
    }
    for (unsigned i = 0; i < *max; ++i) {
        auto slot = dev.mig_device(i);
        if (!slot) {
            warnings.push_back(fmt::format("GPU {}: reading MIG device {}: {}", gpu.index, i, slot.error().message));
            continue;
        }
        if (!slot->has_value()) continue;
        const nvml::Device& mig = **slot;
        MigDevice m;
        m.index = i;
        auto uuid = mig.uuid();
        auto gi = mig.gpu_instance_id();
        auto ci = mig.compute_instance_id();
        auto attrs = mig.attributes();
        if (!uuid || !gi || !ci || !attrs) {
            const Error& e = !uuid ? uuid.error() : !gi ? gi.error() : !ci ? ci.error() : attrs.error();
            warnings.push_back(fmt::format("GPU {}: MIG device {}: {}", gpu.index, i, e.message));
            continue;
        }
        m.uuid = *uuid;
        m.gpu_instance_id = *gi;
        m.compute_instance_id = *ci;
        m.memory_mib = attrs->memory_size_mb;
        m.sm_count = attrs->multiprocessor_count;
        m.slices = attrs->gpu_instance_slice_count;
        m.compute_slices = attrs->compute_instance_slice_count;
        m.copy_engines = attrs->copy_engines;
        m.decoders = attrs->decoders;
        m.encoders = attrs->encoders;
        m.jpeg_decoders = attrs->jpeg_decoders;
        m.optical_flow_accelerators = attrs->optical_flow_accelerators;
        m.profile = mig_profile_name(m.slices, m.memory_mib, gpu.memory_total_mib);
        gpu.mig_devices.push_back(std::move(m));
    }
}

Gpu read_gpu(const nvml::Session& session, unsigned index, const DiscoveryOptions& opts,
             std::vector<std::string>& warnings, std::optional<nvml::Device>& handle) {
    Gpu gpu;
    gpu.index = index;
    auto dev = session.device_by_index(index);
    if (!dev) {
        gpu.lost = dev.error().code == Code::gpu_lost;
        gpu.error = dev.error().message;
        warnings.push_back(fmt::format("GPU {}: {}", index, dev.error().message));
        return gpu;
    }
    handle = *dev;
    auto uuid = dev->uuid();
    if (!uuid) {
        gpu.lost = uuid.error().code == Code::gpu_lost;
        gpu.error = uuid.error().message;
        warnings.push_back(fmt::format("GPU {}: {}", index, uuid.error().message));
        handle.reset();  // nothing else will answer either
        return gpu;
    }
    gpu.uuid = *uuid;
    gpu.name = optional_value(dev->name(), gpu, warnings, "name").value_or("");
    gpu.serial = optional_value(dev->serial(), gpu, warnings, "serial").value_or("");
    gpu.minor = optional_value(dev->minor_number(), gpu, warnings, "minor number").value_or(index);
    if (auto pci = optional_value(dev->pci_info(), gpu, warnings, "PCI info")) {
        gpu.pci_bus_id = pci->bus_id;
        gpu.pci_device_id = pci->device_id;
        read_numa(*dev, *pci, opts, gpu);
        read_pci_class(*pci, opts, gpu);
    }
    if (auto mem = optional_value(dev->memory(), gpu, warnings, "memory")) gpu.memory_total_mib = mem->total / (1024 * 1024);
    if (auto cc = optional_value(dev->compute_capability(), gpu, warnings, "compute capability")) {
        gpu.cc_major = cc->first;
        gpu.cc_minor = cc->second;
    }
    gpu.architecture = architecture_name(
        optional_value(dev->architecture(), gpu, warnings, "architecture").value_or(0xffffffffu));
    if (auto mw = optional_value(dev->power_limit_mw(), gpu, warnings, "power limit")) gpu.power_limit_w = *mw / 1000;
    gpu.persistence_mode = optional_value(dev->persistence_mode(), gpu, warnings, "persistence mode");
    if (!gpu.lost) read_mig(*dev, gpu, warnings);
    if (gpu.lost) handle.reset();
    return gpu;
}

// Pairwise NVLink counts and PCIe levels. Direct links count toward the GPU at the other end;
// links to NVSwitches connect every pair of switch-attached GPUs, with the smaller link count of
// the two (what nvidia-smi topo -m shows as NV18 on an 8-GPU HGX H100).
void read_topology(const std::vector<std::optional<nvml::Device>>& devs, Node& node) {
    const size_t n = devs.size();
    node.topology = Topology(n);
    std::map<std::string, size_t> by_bus;
    for (size_t i = 0; i < n; ++i)
        if (devs[i] && !node.gpus[i].pci_bus_id.empty()) by_bus[node.gpus[i].pci_bus_id] = i;

    std::vector<std::vector<unsigned>> direct(n, std::vector<unsigned>(n, 0));
    std::vector<unsigned> to_switch(n, 0);
    for (size_t i = 0; i < n; ++i) {
        if (!devs[i]) continue;
        for (unsigned link = 0; link < kMaxNvLinks; ++link) {
            auto active = devs[i]->nvlink_active(link);
            if (!active) {
                if (active.error().code == Code::not_supported) continue;
                node.warnings.push_back(fmt::format("GPU {}: NVLink {} state: {}", i, link, active.error().message));
                break;
            }
            if (!*active) continue;
            auto remote = devs[i]->nvlink_remote_bus_id(link);
            if (!remote) continue;
            if (auto it = by_bus.find(*remote); it != by_bus.end()) {
                if (it->second != i) ++direct[i][it->second];
                continue;
            }
            auto type = devs[i]->nvlink_remote_type(link);
            // Without the device-type call, a peer that is not one of our GPUs is taken as a switch.
            if (!type || *type == nvml::NvLinkPeerType::switch_) ++to_switch[i];
        }
    }
    for (size_t a = 0; a < n; ++a) {
        for (size_t b = 0; b < n; ++b) {
            if (a == b || !devs[a] || !devs[b]) continue;
            Link& l = node.topology.at(a, b);
            l.nvlinks = std::max(direct[a][b], direct[b][a]);
            if (to_switch[a] > 0 && to_switch[b] > 0) l.nvlinks += std::min(to_switch[a], to_switch[b]);
            if (b < a) {
                l.pcie = node.topology.at(b, a).pcie;
                continue;
            }
            auto level = devs[a]->common_ancestor(*devs[b]);
            if (level) {
                l.pcie = static_cast<PcieLevel>(*level);
            } else if (level.error().code != Code::not_supported) {
                node.warnings.push_back(fmt::format("GPUs {} and {}: PCIe topology: {}", a, b, level.error().message));
            }
        }
    }
}

}  // namespace

Result<Node> discover(const nvml::Session& session, const DiscoveryOptions& options) {
    Node node;
    auto driver = session.driver_version();
    if (!driver) return std::unexpected(driver.error().context("reading the driver version"));
    node.driver_version = *driver;
    if (auto v = session.nvml_version()) node.nvml_version = *v;
    if (auto cuda = session.cuda_driver_version()) {
        node.cuda_driver_version = *cuda;
    } else if (cuda.error().code != Code::not_supported) {
        node.warnings.push_back(fmt::format("reading the CUDA driver version: {}", cuda.error().message));
    }
    auto count = session.device_count();
    if (!count) return std::unexpected(count.error().context("counting GPUs"));

    std::vector<std::optional<nvml::Device>> devs(*count);
    node.gpus.reserve(*count);
    for (unsigned i = 0; i < *count; ++i) node.gpus.push_back(read_gpu(session, i, options, node.warnings, devs[i]));
    if (options.topology) read_topology(devs, node);
    return node;
}

}  // namespace kgpu::inventory
