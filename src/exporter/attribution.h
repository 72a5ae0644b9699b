// Who uses a GPU. Pods come from the kubelet's PodResources API (which device IDs each container
// was allocated); processes come from NVML (host PIDs) and are named through their cgroup and the
// CRI runtime socket (facts/cri-and-process-attribution.md). Everything here is called by the
// collector thread, off the request path; a failing socket is logged once per distinct failure
// and the caller carries on without the labels.
#pragma once

#include <chrono>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "inventory/node.h"

namespace kgpu::exporter {

struct PodRef {
    std::string pod;
    std::string namespace_name;
    std::string container;
    auto operator<=>(const PodRef&) const = default;
};

// What a device plugin ID names on this node.
struct DeviceTarget {
    unsigned gpu_index = 0;                    // the (parent) GPU, NVML index
    std::optional<unsigned> gpu_instance_id;   // set when the ID names a MIG instance
    auto operator<=>(const DeviceTarget&) const = default;
};

// Resolves an ID as any device plugin strategy writes it: "GPU-<uuid>", an index "3", a replica
// "GPU-<uuid>::2" or "3::2", a MIG UUID "MIG-<uuid>", or "<gpu>:<mig>" (MIG slot index j of
// inventory::MigDevice::index). nullopt when nothing on `node` matches.
std::optional<DeviceTarget> resolve_device_id(std::string_view id, const inventory::Node& node);

// True for the resource names whose devices are GPUs: nvidia.com/gpu, nvidia.com/gpu.shared,
// nvidia.com/mig-*, and any name in `extra` (renamed time-slicing resources; "<domain>/*" names
// every resource of the domain).
bool is_gpu_resource(std::string_view resource_name, std::span<const std::string> extra = {});

// The replica part of a shared device's ID ("2" of "GPU-<uuid>::2", or of GKE's "nvidia0/vgpu2"),
// which dcgm-exporter serves as the `vgpu` label; "" for an ID without one.
std::string replica_of(std::string_view id);

struct DeviceUse {
    DeviceTarget target;
    PodRef pod;
    std::string replica{};  // replica_of(the device ID)
    auto operator<=>(const DeviceUse&) const = default;
};

struct PodResourcesOptions {
    std::string socket = "/var/lib/kubelet/pod-resources/kubelet.sock";  // a path, or unix://path
    std::chrono::milliseconds timeout{2000};
    std::vector<std::string> extra_resources;  // see is_gpu_resource
    // Containers attributed per GPU (its MIG instances included); the others are counted in
    // PodResourcesMap::overflow. Each attributed container multiplies the GPU's series, so this
    // bounds the exporter's memory and scrape size whatever the kubelet lists (issue #14).
    unsigned max_pods_per_gpu = 64;
    // The largest List answer accepted (Kubernetes' own PodResources client allows 16 MiB; 100k
    // pods are about 8 MiB). A larger one is an "over-size" failure.
    std::size_t max_message_bytes = 16u << 20;
};

// Containers on one GPU beyond PodResourcesOptions::max_pods_per_gpu.
struct PodOverflow {
    unsigned gpu_index = 0;
    std::size_t attributed = 0;      // containers that got series (= max_pods_per_gpu)
    std::size_t left_out = 0;        // containers that did not
    std::vector<PodRef> examples;    // the first few left out, in sort order (at most 8)
    bool operator==(const PodOverflow&) const = default;
};

// A summary of the entries a List answer had that could not be used, for one log line.
struct SkippedEntries {
    std::size_t count = 0;
    std::vector<std::string> examples;  // the first few, described for a log line (at most 5)
    std::uint64_t digest = 0;           // changes when the set of skipped entries changes
};

// What one List answer maps to.
struct PodResourcesMap {
    // Sorted and de-duplicated (two replicas of one GPU in one container give one DeviceUse); at
    // most max_pods_per_gpu containers per GPU: the first in (pod, namespace, container) order.
    std::vector<DeviceUse> uses;
    std::vector<PodOverflow> overflow;  // GPUs over the limit, by index
    SkippedEntries unknown_ids;         // device IDs of GPU resources that name nothing on `node`
    SkippedEntries bad_names;           // pod, namespace or container names no Kubernetes object has
};

// Maps a serialized v1.ListPodResourcesResponse onto `node` in one pass over the bytes, without
// building the message (so 100k pods cost their 8 MiB of wire bytes, not a parsed tree). Only
// GPU resources count (is_gpu_resource with options.extra_resources); entries whose pod,
// namespace or container name is empty, longer than 253 bytes, not UTF-8 or holds control
// characters are skipped (they would become label values). Errors: Code::parse when the bytes
// are not a valid message ("garbage"), naming the byte offset and what was expected there.
Result<PodResourcesMap> map_pod_resources(std::string_view serialized, const inventory::Node& node,
                                          const PodResourcesOptions& options);

// A PodResources v1 client that keeps its channel between calls.
class PodResourcesClient {
public:
    explicit PodResourcesClient(PodResourcesOptions options);
    ~PodResourcesClient();
    PodResourcesClient(const PodResourcesClient&) = delete;
    PodResourcesClient& operator=(const PodResourcesClient&) = delete;

    // Calls List and maps the answer (map_pod_resources). Skipped IDs and names, and GPUs over
    // max_pods_per_gpu, are logged in one line each when what is skipped changes, not at every
    // call. An error names the socket and what went wrong (failure() says which kind); the
    // caller keeps going without pod labels.
    Result<PodResourcesMap> list(const inventory::Node& node);

    // The kind of the last call's failure, for /health: "" after a good answer; "unreachable"
    // (no socket, connection refused), "hung" (no answer within the timeout), "garbage" (not a
    // ListPodResourcesResponse), "over-size" (larger than max_message_bytes), "unimplemented"
    // (the socket serves something else), "denied", "misconfigured" (no socket path).
    std::string_view failure() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// The pod UID and container ID in the text of /proc/<pid>/cgroup (v1 or v2; cgroupfs or systemd
// driver; containerd, CRI-O or docker scope names). nullopt for a process outside kubepods.
// pod_uid is always in its dashed form ("1f2e...-..."), container_id is the bare 64-hex ID.
struct CgroupRef {
    std::string pod_uid;
    std::string container_id;
    auto operator<=>(const CgroupRef&) const = default;
};
std::optional<CgroupRef> parse_cgroup(std::string_view cgroup_text);

// A CRI runtime.v1 client (RuntimeService/ListContainers) on a unix socket.
class CriClient {
public:
    // endpoint: "unix:///run/containerd/containerd.sock" or a bare path.
    explicit CriClient(std::string endpoint, std::chrono::milliseconds timeout = std::chrono::milliseconds{2000});
    ~CriClient();
    CriClient(const CriClient&) = delete;
    CriClient& operator=(const CriClient&) = delete;

    // container ID -> pod/namespace/container, from the io.kubernetes.* labels of every container.
    Result<std::unordered_map<std::string, PodRef>> list_containers();

    struct Sandbox {
        std::string name, namespace_name, uid;
        bool ready = false;
        std::map<std::string, std::string> labels;  // the pod's labels (io.kubernetes.pod.* removed)
    };
    // Every pod sandbox (RuntimeService/ListPodSandbox).
    Result<std::vector<Sandbox>> list_pod_sandboxes();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// A pod's UID and labels, for --kubernetes-enable-pod-uid and --kubernetes-enable-pod-labels. The
// kubelet copies a pod's labels onto its sandbox, so the CRI runtime answers without the
// Kubernetes API (dcgm-exporter asks the API server, which needs RBAC and a watch per node).
struct PodMetadata {
    std::string uid;
    std::map<std::string, std::string> labels;
};

// Pod metadata by namespace and name, cached from ListPodSandbox: the runtime is asked again only
// when a pod not in the cache is looked up (at most once per lookup, and a pod it did not list is
// not asked about again for a minute); pods no longer asked about are forgotten. A ready sandbox
// wins over a stopped one of the same pod. A failing runtime is logged once per distinct failure;
// lookups then answer from the cache.
class PodDirectory {
public:
    explicit PodDirectory(std::string cri_endpoint);
    ~PodDirectory();
    PodDirectory(const PodDirectory&) = delete;
    PodDirectory& operator=(const PodDirectory&) = delete;

    // (namespace, name) -> metadata for each of `pods` the runtime knows.
    std::map<std::pair<std::string, std::string>, PodMetadata> lookup(std::span<const PodRef> pods);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Names the pods behind GPU processes: reads <proc_root>/<pid>/cgroup, then looks the container
// ID up in a cache that is refreshed from the CRI socket only when an unknown container ID shows
// up (at most once per call), and pruned of containers no longer seen.
class ProcessAttributor {
public:
    ProcessAttributor(std::string proc_root, std::string cri_endpoint);
    ~ProcessAttributor();
    ProcessAttributor(const ProcessAttributor&) = delete;
    ProcessAttributor& operator=(const ProcessAttributor&) = delete;

    // pid -> pod for each PID it could name; PIDs outside pods or gone are left out.
    std::unordered_map<unsigned, PodRef> attribute(std::span<const unsigned> pids);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace kgpu::exporter
