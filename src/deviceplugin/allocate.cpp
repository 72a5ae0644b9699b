#include "deviceplugin/allocate.h"

#include "cdi/naming.h"

#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/files.h"

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

std::string cdi_device_name(const Device& device, const Config& config) {
    // The index and UUID names are those `kgpu cdi generate` writes with its default
    // index,uuid device-name strategy; the kind is the generator's default.
    return cdi::qualified_name(cdi::kDefaultKind, visible_id(device, config));
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
    if (config.pass_device_specs) {
        for (const Device* d : devices)
            if (d->mig && (!d->mig->gi_cap_minor || !d->mig->ci_cap_minor))
                return fail(Code::invalid_argument, "MIG device '{}': cannot pass its capability device nodes: {}",
                            d->physical_id, d->mig->caps_error.empty() ? "capability minors unknown" : d->mig->caps_error);
    }

    ContainerAnswer a;
    std::vector<std::string> visible, names;
    for (const Device* d : devices) {
        visible.push_back(visible_id(*d, config));
        names.push_back(cdi_device_name(*d, config));
    }
    if (config.uses(DeviceListStrategy::envvar))
        a.envs["NVIDIA_VISIBLE_DEVICES"] = fmt::format("{}", fmt::join(visible, ","));
    if (config.uses(DeviceListStrategy::volume_mounts)) {
        a.envs["NVIDIA_VISIBLE_DEVICES"] = std::string(kVolumeMountsDir);
        for (const std::string& v : visible)
            a.mounts.push_back(Mount{fmt::format("{}/{}", kVolumeMountsDir, v), "/dev/null", true});
    }
    if (config.uses(DeviceListStrategy::cdi_annotations))
        a.annotations[cdi_annotation_key(resource.name, config)] = fmt::format("{}", fmt::join(names, ","));
    if (config.uses(DeviceListStrategy::cdi_cri)) a.cdi_devices = names;
    if (config.pass_device_specs) {
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
    }
    return a;
}

}  // namespace kgpu::deviceplugin
