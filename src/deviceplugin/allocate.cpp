#include "deviceplugin/allocate.h"

#include "cdi/naming.h"

#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/files.h"
#include "mps/mps.h"

namespace kgpu::deviceplugin {

std::string DevRootView::host_path(std::string_view dev_path) const {
    return files::under_root(root_, std::filesystem::path(dev_path)).string();
}

bool DevRootView::exists(std::string_view dev_path) const {
    std::error_code ec;
    return std::filesystem::exists(host_path(dev_path), ec);
}

namespace {

// What the device is called in NVIDIA_VISIBLE_DEVICES, volume mounts and CDI names: the physical
// device (a replica's suffix dropped).
std::string visible_id(const Device& d, const Config& config) {
    if (config.device_id_strategy == DeviceIdStrategy::uuid) return d.uuid;
    return d.mig ? fmt::format("{}:{}", d.gpu_index, d.mig->index) : std::to_string(d.gpu_index);
}

}  // namespace

std::string imex_channel_node(unsigned channel) {
    return fmt::format("/dev/nvidia-caps-imex-channels/channel{}", channel);
}

static_assert(kGpuKind == cdi::kDevicePluginKind, "one kind for the plugin's GPUs");

std::string cdi_spec_file_name(std::string_view kind) { return cdi::spec_file_name(kind); }

std::string legacy_cdi_spec_file_name(std::string_view device_class) {
    return fmt::format("kgpu-nvidia-{}.yaml", device_class);
}

std::string cdi_device_name(const Device& device, const Config& config) {
    // The index and UUID names are those the generator writes with its index,uuid device-name
    // strategies, in the plugin's own spec (cdi_refresh.h).
    return cdi::qualified_name(kGpuKind, visible_id(device, config));
}

std::string cdi_annotation_key(std::string_view resource_name, const Config& config) {
    std::string key = config.cdi_annotation_prefix + "kgpu_";
    for (char c : resource_name) key += c == '/' ? '-' : c;
    return key;
}

Result<ContainerAnswer> allocate(const Resource& resource, const std::vector<std::string>& ids, const Config& config,
                                 const std::set<std::string>& unhealthy_ids, const DevRootView& dev_root) {
    if (ids.empty()) return fail(Code::invalid_argument, "no device IDs requested for {}", resource.name);
    if (resource.fail_requests_greater_than_one && ids.size() > 1)
        return fail(Code::invalid_argument,
                    "{}: maximum request size for shared resources is 1 ({} requested; failRequestsGreaterThanOne "
                    "is set)",
                    resource.name, ids.size());
    std::vector<const Device*> devices;
    devices.reserve(ids.size());
    std::set<std::string_view> seen;
    for (const std::string& id : ids) {
        const Device* d = resource.find(id);
        if (d == nullptr) return fail(Code::invalid_argument, "unknown device ID '{}' for {}", id, resource.name);
        if (!seen.insert(id).second) return fail(Code::invalid_argument, "duplicate device ID '{}'", id);
        if (unhealthy_ids.contains(id))
            return fail(Code::invalid_argument, "device ID '{}' is unhealthy", id);
        devices.push_back(d);
    }
    // Replicas -> physical devices, each once, in request order.
    {
        std::set<std::string_view> physical;
        std::vector<const Device*> unique;
        for (const Device* d : devices)
            if (physical.insert(d->uuid).second) unique.push_back(d);
        devices = std::move(unique);
    }
    if (config.passes_device_specs()) {
        for (const Device* d : devices)
            if (d->mig && (!d->mig->gi_cap_minor || !d->mig->ci_cap_minor))
                return fail(Code::invalid_argument, "MIG device '{}': cannot pass its capability device nodes: {}",
                            d->physical_id, d->mig->caps_error.empty() ? "capability minors unknown" : d->mig->caps_error);
        // A DeviceSpec for a node that does not exist makes the container fail later at creation
        // ("lstat /dev/nvidia2"); refuse now, naming the path.
        for (const Device* d : devices) {
            const std::string node = fmt::format("/dev/nvidia{}", d->minor);
            if (!dev_root.exists(node))
                return fail(Code::invalid_argument,
                            "device '{}' (GPU {}): cannot pass its device node {}: {} does not exist (check "
                            "--nvidia-dev-root, and that the driver created the node)",
                            d->physical_id, d->gpu_index, node, dev_root.host_path(node));
        }
        if (!dev_root.exists(kRequiredControlNode))
            return fail(Code::invalid_argument,
                        "cannot pass the control device node {}: {} does not exist (check --nvidia-dev-root, and "
                        "that the driver created the node)",
                        kRequiredControlNode, dev_root.host_path(kRequiredControlNode));
    }

    // IMEX channels whose node exists; extra CDI kinds whose spec exists.
    std::vector<unsigned> channels;
    for (unsigned ch : config.imex.channel_ids)
        if (dev_root.exists(imex_channel_node(ch))) channels.push_back(ch);
    const bool any_cdi = config.uses(DeviceListStrategy::cdi_annotations) || config.uses(DeviceListStrategy::cdi_cri);
    auto spec_exists = [&](std::string_view kind) {
        std::error_code ec;
        return std::filesystem::exists(std::filesystem::path(config.cdi_spec_dir) / cdi_spec_file_name(kind), ec);
    };

    ContainerAnswer a;
    std::vector<std::string> visible, names;
    for (const Device* d : devices) {
        visible.push_back(visible_id(*d, config));
        names.push_back(cdi_device_name(*d, config));
    }
    if (any_cdi) {
        if (!channels.empty() && spec_exists(kImexChannelKind))
            for (unsigned ch : channels) names.push_back(cdi::qualified_name(kImexChannelKind, std::to_string(ch)));
        for (auto [on, kind] : {std::pair{config.gdrcopy_enabled, kGdrcopyKind},
                                std::pair{config.gds_enabled, kGdsKind}, std::pair{config.mofed_enabled, kMofedKind}})
            if (on && spec_exists(kind)) names.push_back(cdi::qualified_name(kind, "all"));
    }
    if (config.gdrcopy_enabled) a.envs["NVIDIA_GDRCOPY"] = "enabled";
    if (config.gds_enabled) a.envs["NVIDIA_GDS"] = "enabled";
    if (config.mofed_enabled) a.envs["NVIDIA_MOFED"] = "enabled";
    if (config.uses(DeviceListStrategy::envvar)) {
        a.envs["NVIDIA_VISIBLE_DEVICES"] = fmt::format("{}", fmt::join(visible, ","));
        if (!channels.empty()) a.envs["NVIDIA_IMEX_CHANNELS"] = fmt::format("{}", fmt::join(channels, ","));
    }
    if (config.uses(DeviceListStrategy::volume_mounts)) {
        a.envs["NVIDIA_VISIBLE_DEVICES"] = std::string(kVolumeMountsDir);
        for (const std::string& v : visible)
            a.mounts.push_back(Mount{fmt::format("{}/{}", kVolumeMountsDir, v), "/dev/null", true});
        for (unsigned ch : channels)
            a.mounts.push_back(Mount{fmt::format("{}/imex/{}", kVolumeMountsDir, ch), "/dev/null", true});
    }
    if (config.uses(DeviceListStrategy::cdi_annotations))
        a.annotations[cdi_annotation_key(resource.name, config)] = fmt::format("{}", fmt::join(names, ","));
    if (config.uses(DeviceListStrategy::cdi_cri)) a.cdi_devices = names;
    if (config.passes_device_specs()) {
        for (std::string_view node : kControlDeviceNodes)
            if (dev_root.exists(node)) a.devices.push_back(DeviceSpec{std::string(node), dev_root.host_path(node), "rw"});
        std::set<unsigned> minors;
        for (const Device* d : devices) {
            if (!minors.insert(d->minor).second) continue;
            const std::string node = fmt::format("/dev/nvidia{}", d->minor);
            a.devices.push_back(DeviceSpec{node, dev_root.host_path(node), "rw"});
        }
        std::set<unsigned> caps;
        for (const Device* d : devices) {
            if (!d->mig) continue;
            for (unsigned minor : {*d->mig->gi_cap_minor, *d->mig->ci_cap_minor}) {
                if (!caps.insert(minor).second) continue;
                const std::string node = fmt::format("/dev/nvidia-caps/nvidia-cap{}", minor);
                a.devices.push_back(DeviceSpec{node, dev_root.host_path(node), "rw"});
            }
        }
        for (unsigned ch : channels) {
            const std::string node = imex_channel_node(ch);
            a.devices.push_back(DeviceSpec{node, dev_root.host_path(node), "rw"});
        }
    }
    if (resource.mps) {
        // NVIDIA's updateReponse: the clients' view of the resource's control daemon.
        const mps::Root root{config.mps_root};
        const std::string pipe = mps::container_pipe_dir(resource.name);
        a.envs["CUDA_MPS_PIPE_DIRECTORY"] = pipe;
        a.mounts.push_back(Mount{pipe, root.pipe_dir(resource.name).string(), false});
        a.mounts.push_back(Mount{"/dev/shm", root.shm_dir().string(), false});
    }
    return a;
}

std::string missing_device_nodes(const std::vector<Resource>& resources, const Config& config,
                                 const DevRootView& dev_root) {
    if (!config.passes_device_specs()) return {};
    std::vector<std::string> required, missing_uvm;
    std::map<unsigned, const Device*> gpus;  // by GPU index: the nodes in index order
    for (const Resource& r : resources)
        for (const Device& d : r.devices) gpus.emplace(d.gpu_index, &d);
    std::set<unsigned> seen;
    for (const auto& [index, d] : gpus) {
        if (!seen.insert(d->minor).second) continue;
        const std::string node = fmt::format("/dev/nvidia{}", d->minor);
        if (!dev_root.exists(node))
            required.push_back(d->mig ? fmt::format("{} (GPU {}, parent of MIG devices)", dev_root.host_path(node), index)
                                      : fmt::format("{} (GPU {}, {})", dev_root.host_path(node), index, d->uuid));
    }
    if (!seen.empty() && !dev_root.exists(kRequiredControlNode))
        required.push_back(dev_root.host_path(kRequiredControlNode));
    if (!seen.empty() && !dev_root.exists("/dev/nvidia-uvm")) missing_uvm.push_back(dev_root.host_path("/dev/nvidia-uvm"));
    if (required.empty() && missing_uvm.empty()) return {};
    std::string out = "--pass-device-specs: device nodes missing under the dev root:";
    if (!required.empty())
        out += fmt::format(" {}; Allocate refuses the devices that need them (check --nvidia-dev-root, and that "
                           "the driver created the nodes)",
                           fmt::join(required, ", "));
    if (!missing_uvm.empty())
        out += fmt::format("{} {}: CUDA needs it (load nvidia-uvm, e.g. nvidia-modprobe -u -c=0); it is passed once "
                           "it exists",
                           required.empty() ? "" : ";", missing_uvm.front());
    return out;
}

}  // namespace kgpu::deviceplugin
