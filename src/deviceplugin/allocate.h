// The Allocate answer for one container, as plain values (the gRPC layer copies them into
// ContainerAllocateResponse). Strategies: facts/container-runtime-and-cdi.md.
#pragma once

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "deviceplugin/config.h"
#include "deviceplugin/resources.h"

namespace kgpu::deviceplugin {

struct Mount {
    std::string container_path;
    std::string host_path;
    bool read_only = false;
    bool operator==(const Mount&) const = default;
};

struct DeviceSpec {
    std::string container_path;  // "/dev/nvidia0"
    std::string host_path;       // the same path under the dev root
    std::string permissions;     // "rw"
    bool operator==(const DeviceSpec&) const = default;
};

struct ContainerAnswer {
    std::map<std::string, std::string> envs;
    std::map<std::string, std::string> annotations;
    std::vector<Mount> mounts;
    std::vector<DeviceSpec> devices;
    std::vector<std::string> cdi_devices;  // fully qualified CDI names for the CRI cdi_devices field
};

// The dev root as the plugin sees it: answers whether a /dev path exists under it and where it
// is on the host. The production one looks at the file system; tests lay out files in a temp dir.
class DevRootView {
public:
    explicit DevRootView(std::filesystem::path root) : root_(std::move(root)) {}
    // "/dev/nvidiactl" -> "<root>/dev/nvidiactl" (unchanged with root "/" or empty).
    std::string host_path(std::string_view dev_path) const;
    // Whether host_path(dev_path) exists (any file type; a dangling link does not count).
    bool exists(std::string_view dev_path) const;

private:
    std::filesystem::path root_;
};

// The directory NVIDIA_VISIBLE_DEVICES names under the volume-mounts strategy.
inline constexpr std::string_view kVolumeMountsDir = "/var/run/nvidia-container-devices";
// Control device nodes passed with passDeviceSpecs when they exist under the dev root.
inline constexpr std::string_view kControlDeviceNodes[] = {"/dev/nvidiactl", "/dev/nvidia-uvm",
                                                           "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"};
// The control node without which no GPU can be used: Allocate with passDeviceSpecs refuses
// when it is missing (the others are passed when present, as NVIDIA's plugin does).
inline constexpr std::string_view kRequiredControlNode = "/dev/nvidiactl";
// IMEX channel N's device node (NVIDIA's path).
std::string imex_channel_node(unsigned channel);

// The CDI kinds the plugin names devices under, NVIDIA's plugin's (cdi::kDevicePluginVendor), so
// that no name collides with a node-wide spec of nvidia.com/gpu (cdi/naming.h): GPUs and MIG
// devices "k8s.device-plugin.nvidia.com/gpu=<id>"; then the extra devices NVIDIA's plugin names
// under the CDI strategies, in its order: IMEX channels ("…/imex-channel=<id>"), then
// "…/gdrcopy=all", "…/gds=all", "…/mofed=all" when enabled.
inline constexpr std::string_view kGpuKind = "k8s.device-plugin.nvidia.com/gpu";
inline constexpr std::string_view kImexChannelKind = "k8s.device-plugin.nvidia.com/imex-channel";
inline constexpr std::string_view kGdrcopyKind = "k8s.device-plugin.nvidia.com/gdrcopy";
inline constexpr std::string_view kGdsKind = "k8s.device-plugin.nvidia.com/gds";
inline constexpr std::string_view kMofedKind = "k8s.device-plugin.nvidia.com/mofed";
// The spec file the plugin writes for a CDI kind, NVIDIA's name (cdi::spec_file_name):
// "k8s.device-plugin.nvidia.com/gds" -> "k8s.device-plugin.nvidia.com-gds.json". Allocate names
// an extra device only while its spec file exists, so the name resolves.
std::string cdi_spec_file_name(std::string_view kind);
// The file an earlier kgpu (before issue #23) wrote for a kind's class, with nvidia.com names:
// "gds" -> "kgpu-nvidia-gds.yaml". Removed under a CDI strategy: its names collide with a
// node-wide spec.
std::string legacy_cdi_spec_file_name(std::string_view device_class);

// The CDI device a container asks for: "k8s.device-plugin.nvidia.com/gpu=<index>" ("<i>:<j>" for
// a MIG device) with deviceIDStrategy index, "…/gpu=<UUID>" (GPU- or MIG-) with uuid; a replica is
// named after its physical device — the names src/cdi's generator gives the spec's devices
// (cdi::device_name with NameStrategy index / uuid), as NVIDIA's plugin names them (its
// QualifiedName("gpu", id)). The one place the plugin spells them.
std::string cdi_device_name(const Device& device, const Config& config);

// The annotation key of the cdi-annotations strategy: "<cdiAnnotationPrefix>kgpu_<resource name
// with '/' replaced by '-'>", e.g. "cdi.k8s.io/kgpu_nvidia.com-gpu". Stable per resource, so one
// container's annotations from different resources never collide; the value lists the CDI
// device names, comma separated, in request order.
std::string cdi_annotation_key(std::string_view resource_name, const Config& config);

// The answer for one container that was allotted `ids` of `resource`. Replicas are mapped to
// their physical devices, each named once (two replicas of one GPU give that GPU once). Every
// strategy in config.device_list_strategy contributes, in any combination:
// - envvar: NVIDIA_VISIBLE_DEVICES=<UUIDs or indices per deviceIDStrategy, request order>;
// - volume-mounts: NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices (this wins over
//   envvar's value when both are on, as in NVIDIA's plugin) and one read-only mount of host
//   /dev/null at /var/run/nvidia-container-devices/<UUID or index> per device;
// - cdi-annotations: annotations[cdi_annotation_key()] = "k8s.device-plugin.nvidia.com/gpu=<id>,...";
// - cdi-cri: cdi_devices = ["k8s.device-plugin.nvidia.com/gpu=<id>", ...] (CRI's CDIDevices, which
//   the kubelet passes to the runtime: containerd 1.7+ and 2.x inject them, 1.6 ignores them).
// As NVIDIA's plugin (v0.17-v0.20): annotations only under cdi-annotations, cdi_devices only under
// cdi-cri, both with the same names.
// With passDeviceSpecs (and a strategy that is not CDI: Config::passes_device_specs, as NVIDIA
// v0.17-v0.20 return early when every strategy is CDI), DeviceSpecs ("rw") for the control nodes
// that exist under the dev root,
// then /dev/nvidia<minor> per physical GPU (in request order, once each), then for each MIG
// device /dev/nvidia-caps/nvidia-cap<gi> and nvidia-cap<ci> (MigInstance's cap minors).
// IDs are the advertised ones (UUIDs, "<UUID>::<n>" for replicas); indices, with
// deviceIDStrategy index, appear only in what the container is handed, as in NVIDIA's plugin.
//
// Extras every container gets, as NVIDIA's plugin hands them:
// - gdrcopyEnabled / gdsEnabled / mofedEnabled: NVIDIA_GDRCOPY / NVIDIA_GDS / NVIDIA_MOFED =
//   "enabled" (every strategy), and under the CDI strategies "k8s.device-plugin.nvidia.com/<set>=all"
//   while its spec file exists in cdiSpecDir;
// - imex.channelIDs, for each channel whose node exists under the dev root: envvar
//   NVIDIA_IMEX_CHANNELS=<ids>, volume-mounts a /dev/null mount at <dir>/imex/<id>, CDI
//   "k8s.device-plugin.nvidia.com/imex-channel=<id>" (while its spec file exists), passDeviceSpecs
//   its node.
//
// An MPS resource (sharing.mps) adds what NVIDIA's plugin adds for its replicas: env
// CUDA_MPS_PIPE_DIRECTORY=/mps/<resource>/pipe, a mount of <mpsRoot>/<resource>/pipe there and
// one of <mpsRoot>/shm at /dev/shm (both read-write: clients create their sockets and segments).
//
// Errors, Code::invalid_argument naming the ID or path, and then no answer at all: an empty ID
// list, an ID the resource does not have, a duplicate ID, an ID in unhealthy_ids, more than one
// ID of a resource with fail_requests_greater_than_one ("maximum request size for shared
// resources is 1", NVIDIA's words); under passDeviceSpecs a MIG device whose capability minors
// are unknown, a GPU whose /dev/nvidia<minor> or a missing /dev/nvidiactl under the dev root
// (the container would fail later at creation with "lstat /dev/nvidia2").
Result<ContainerAnswer> allocate(const Resource& resource, const std::vector<std::string>& ids, const Config& config,
                                 const std::set<std::string>& unhealthy_ids, const DevRootView& dev_root);

// The device nodes passDeviceSpecs needs that are missing under the dev root, as one sentence
// for a warning at start (empty when nothing is missing, or no DeviceSpecs are handed out: see
// Config::passes_device_specs): each GPU's
// /dev/nvidia<minor> (named with its index and UUID) and /dev/nvidiactl, which Allocate refuses
// without; /dev/nvidia-uvm (CUDA needs it; passed when it appears); the optional
// /dev/nvidia-uvm-tools and /dev/nvidia-modeset are not named.
std::string missing_device_nodes(const std::vector<Resource>& resources, const Config& config,
                                 const DevRootView& dev_root);

}  // namespace kgpu::deviceplugin
