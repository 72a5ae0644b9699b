// MPS (CUDA Multi-Process Service) sharing as NVIDIA's device plugin does it (v0.15+): the
// directory layout shared by the control daemons and the plugin, the limits each daemon gets,
// and the client side of `nvidia-cuda-mps-control`.
//
// Layout under the MPS root (flag --mps-root, env MPS_ROOT, default /run/nvidia/mps; the same
// host directory is mounted at the same path into the daemon's and the plugin's containers):
//   <root>/<resource>/pipe      CUDA_MPS_PIPE_DIRECTORY of that resource's control daemon; mounted
//                               into a workload at /mps/<resource>/pipe
//   <root>/<resource>/log       CUDA_MPS_LOG_DIRECTORY (control.log, server.log)
//   <root>/<resource>/.started  exists while that daemon runs with its limits set (NVIDIA's name)
//   <root>/<resource>/status.json  kgpu's: state, restarts and limits, for the exporter and humans
//   <root>/shm                  the tmpfs mounted at /dev/shm in the daemon and the workloads
//   <root>/.ready               exists while every daemon runs (NVIDIA's name)
// <resource> is the full resource name, so "nvidia.com/gpu" is two directory levels, as in NVIDIA's.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace kgpu::mps {

inline constexpr std::string_view kDefaultRoot = "/run/nvidia/mps";
// Where a workload container finds the root (NVIDIA's mps.ContainerRoot).
inline constexpr std::string_view kContainerRoot = "/mps";
inline constexpr std::string_view kControlBinary = "nvidia-cuda-mps-control";
// The query NVIDIA's plugin uses to see that a daemon answers.
inline constexpr std::string_view kProbeCommand = "get_default_active_thread_percentage";

struct Root {
    std::filesystem::path dir{std::string(kDefaultRoot)};

    std::filesystem::path resource_dir(std::string_view resource) const { return dir / resource; }
    std::filesystem::path pipe_dir(std::string_view resource) const { return resource_dir(resource) / "pipe"; }
    std::filesystem::path log_dir(std::string_view resource) const { return resource_dir(resource) / "log"; }
    std::filesystem::path started_file(std::string_view resource) const { return resource_dir(resource) / ".started"; }
    std::filesystem::path status_file(std::string_view resource) const { return resource_dir(resource) / "status.json"; }
    std::filesystem::path shm_dir() const { return dir / "shm"; }
    std::filesystem::path ready_file() const { return dir / ".ready"; }
};

// The pipe directory as a workload container sees it: /mps/<resource>/pipe.
std::string container_pipe_dir(std::string_view resource);

// One GPU of an MPS-shared resource.
struct SharedGpu {
    unsigned index = 0;            // NVML index: the <device> of set_default_device_pinned_mem_limit
    std::string uuid;
    std::uint64_t memory_mib = 0;  // total framebuffer memory
    unsigned replicas = 2;         // how many of the resource's devices are this GPU
    int cc_major = 0, cc_minor = 0;
    bool mig = false;              // a MIG device: refused
};

// One control daemon: the GPUs of one resource.
struct DaemonSpec {
    std::string resource;  // "nvidia.com/gpu"
    std::vector<SharedGpu> gpus;
};

// The most clients one MPS server takes: 48 from Volta (compute capability 7.0) on, 16 before
// (NVIDIA's MPS guide; NVIDIA's plugin draws the line at 7.5, see docs/migration.md).
unsigned max_clients(const SharedGpu& gpu);

// Errors: invalid_argument for a spec without GPUs, replicas < 2, or more replicas than an MPS
// server takes ("... maximum allowed replicas exceeded: 64 > 48"); not_supported for a MIG device
// ("MPS sharing is not supported for MIG devices").
Status validate(const DaemonSpec& spec);

// set_default_active_thread_percentage: 100 / replicas per GPU (integer division, as NVIDIA's:
// replicas 3 -> 33). 100 for a spec without GPUs.
unsigned active_thread_percentage(const DaemonSpec& spec);

struct PinnedLimit {
    unsigned index = 0;
    std::uint64_t mib = 0;  // memory_mib / replicas
    std::string uuid;       // of the GPU
    std::string value() const { return std::to_string(mib) + "M"; }
};
// set_default_device_pinned_mem_limit per GPU, by index (GPUs without known memory get none).
std::vector<PinnedLimit> pinned_memory_limits(const DaemonSpec& spec);

// The commands a freshly started daemon gets, in order: one pinned-memory limit per GPU (by
// index), then the active thread percentage.
std::vector<std::string> setup_commands(const DaemonSpec& spec);

// The control binary: `explicit_path` when set (it must be an executable file), else
// nvidia-cuda-mps-control in usr/bin, usr/sbin, bin, sbin under the driver root (src/cdi's
// search, where the NVIDIA container runtime puts it too). Errors: not_found naming every path
// tried and the flag that overrides it.
Result<std::string> find_control_binary(const std::string& explicit_path, const std::filesystem::path& driver_root);

// The client side of one daemon: runs the control binary with the daemon's directories in its
// environment (CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY), as `echo CMD | nvidia-cuda-mps-control`.
class Control {
public:
    Control(std::string binary, std::filesystem::path pipe_dir, std::filesystem::path log_dir,
            std::chrono::milliseconds timeout = std::chrono::seconds(2));

    // Sends one command; returns what the daemon answered (trimmed). Errors: unavailable when the
    // client exits non-zero (no daemon, or the command was refused; the message carries its
    // output), timeout when it does not finish in time (a daemon that stopped answering), io when
    // the binary cannot be run.
    Result<std::string> send(std::string_view command) const;
    // `nvidia-cuda-mps-control -d`. Errors as send's.
    Status start_daemon() const;

    const std::string& binary() const { return binary_; }
    const std::filesystem::path& pipe_dir() const { return pipe_dir_; }
    std::map<std::string, std::string> env() const;

private:
    std::string binary_;
    std::filesystem::path pipe_dir_, log_dir_;
    std::chrono::milliseconds timeout_;
};

}  // namespace kgpu::mps
