// NVML as value types. Raw handles stay inside src/nvml (STYLE.md #3): callers hold a Session
// (one nvmlInit, one nvmlShutdown when the last Session or Device copy goes away) and Devices,
// and get strings and numbers back, or an Error naming the NVML call and its return code.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

struct nvmlDevice_st;
struct nvmlGpuInstance_st;

namespace kgpu::nvml {

class Library;
class GpmSample;
struct Context;  // library + the init it holds; shuts NVML down when the last owner goes
struct GpuEpoch;  // a GPU's handle generations (context.h)

struct PciInfo {
    std::string bus_id;          // NVML form, "00000000:3B:00.0"
    unsigned domain = 0, bus = 0, device = 0, function = 0;
    std::uint32_t device_id = 0;  // (device << 16) | vendor, e.g. 0x233010DE
    std::uint32_t subsystem_id = 0;
    // sysfs form: lower case, 4-digit domain, "0000:3b:00.0".
    std::string sysfs_bus_id() const;
};

struct MemoryInfo {
    std::uint64_t total = 0, reserved = 0, free = 0, used = 0;  // bytes
};

struct MigMode {
    bool current = false;
    bool pending = false;
};

// MIG management (mig.cpp): a GPU instance profile as this GPU reports it.
struct GpuInstanceProfile {
    unsigned index = 0;           // NVML_GPU_INSTANCE_PROFILE_* (1g 0, 1g+me 7, 1g double memory 9, ...)
    unsigned id = 0;              // the GPU's id for it (19 for 1g on A100): what create and list take
    unsigned slices = 0;          // compute slices
    unsigned instance_count = 0;  // at most this many instances
    std::uint64_t memory_mb = 0;
    std::vector<std::pair<unsigned, unsigned>> placements;  // start, size (memory slices)
};

// One GPU instance as it is now.
struct GpuInstanceInfo {
    nvmlGpuInstance_st* handle = nullptr;
    unsigned id = 0, profile_id = 0, start = 0, size = 0;
    unsigned compute_instances = 0;
};

// What nvmlDeviceSetMigMode's activation status said.
enum class MigActivation {
    now,           // the mode changed (an idle GPU is reset by the driver)
    needs_reset,   // IN_USE: the GPU was busy; the new mode is pending until a GPU reset
    needs_reboot,  // RESET_REQUIRED: no GPU reset here (a passed-through GPU): a reboot applies it
};

// nvmlDeviceGetAttributes on a MIG device handle. The engine counts are those of the MIG
// device's compute instance (shared with other compute instances of its GPU instance).
struct DeviceAttributes {
    unsigned multiprocessor_count = 0;
    unsigned gpu_instance_slice_count = 0;
    unsigned compute_instance_slice_count = 0;
    std::uint64_t memory_size_mb = 0;
    unsigned copy_engines = 0, decoders = 0, encoders = 0, jpeg_decoders = 0, optical_flow_accelerators = 0;
};

enum class NvLinkPeerType { gpu, switch_, other };

// nvmlComputeMode_t: who may create CUDA contexts on the GPU. MPS needs exclusive_process (only
// the MPS server then holds a context; its clients share it).
enum class ComputeMode { default_ = 0, prohibited = 2, exclusive_process = 3 };
// "Default", "Prohibited", "Exclusive_Process" (nvidia-smi -q's spelling).
std::string_view to_string(ComputeMode mode);

// nvmlDeviceGetRemappedRows (Ampere and newer).
struct RemappedRows {
    unsigned correctable = 0, uncorrectable = 0;
    bool pending = false;   // a remap waits for a GPU reset
    bool failure = false;   // a remap failed: the GPU needs service
};

// nvmlDeviceGetUtilizationRates: percent of the last sample period.
struct Utilization {
    unsigned gpu = 0, memory = 0;
};

// NVLink data moved over all links since the driver loaded (field values
// NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX with the all-links scope), and when NVML read them.
struct NvLinkThroughput {
    std::uint64_t tx_kib = 0, rx_kib = 0;
    std::int64_t timestamp_us = 0;  // NVML's timestamp of the values; 0 when it gave none
};

// One process's share of a GPU in one driver sample period (nvmlDeviceGetProcessUtilization).
struct ProcessUtilization {
    unsigned pid = 0;
    std::uint64_t timestamp_us = 0;  // CPU time of the sample, microseconds since 1970
    unsigned sm = 0, memory = 0, encoder = 0, decoder = 0;  // percent
};

// One compute process on a GPU (nvmlDeviceGetComputeRunningProcesses).
struct ProcessMemory {
    unsigned pid = 0;
    std::uint64_t used_bytes = 0;  // 0 when the driver does not say
};

class Device {
public:
    Result<std::string> uuid() const;
    Result<std::string> name() const;
    Result<std::string> serial() const;
    Result<std::string> vbios_version() const;
    // The version of one infoROM object ("G520.0200.00.05" for the image), or not_supported.
    enum class Inforom { oem = 0, ecc = 1, power = 2 };
    Result<std::string> inforom_version(Inforom object) const;
    Result<std::string> inforom_image_version() const;
    Result<unsigned> minor_number() const;
    Result<unsigned> index() const;
    Result<PciInfo> pci_info() const;
    Result<int> numa_node() const;
    Result<MemoryInfo> memory() const;
    Result<std::pair<int, int>> compute_capability() const;
    Result<unsigned> architecture() const;  // NVML_DEVICE_ARCH_* value
    Result<unsigned> power_limit_mw() const;  // enforced limit
    Result<bool> persistence_mode() const;
    Result<bool> display_active() const;  // a display is initialised on the GPU (nvidia-smi's Disp.A)
    Result<std::pair<bool, bool>> ecc_mode() const;  // current, pending
    Result<ComputeMode> compute_mode() const;  // Code::parse for a value NVML does not define
    // nvmlDeviceSetComputeMode (root only on a real driver: Code::no_permission otherwise).
    Status set_compute_mode(ComputeMode mode) const;
    Result<RemappedRows> remapped_rows() const;
    Result<bool> retired_pages_pending() const;
    // Field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: NVML_GPU_RECOVERY_ACTION_* (0 none, 1 GPU reset,
    // 2 node reboot, 3 drain P2P, 4 drain and reset).
    Result<unsigned> recovery_action() const;
    Result<std::vector<ProcessMemory>> compute_processes() const;
    Result<MigMode> mig_mode() const;
    Result<unsigned> max_mig_devices() const;
    // The MIG device in slot `i`, or nullopt for an empty slot (NVML's NOT_FOUND).
    Result<std::optional<Device>> mig_device(unsigned i) const;
    Result<unsigned> gpu_instance_id() const;
    Result<unsigned> compute_instance_id() const;
    Result<DeviceAttributes> attributes() const;
    // MIG management (mig.cpp; the GPU, not a MIG device). Every profile the GPU has, with its placements.
    Result<MigActivation> set_mig_mode(bool enabled) const;
    Result<std::vector<GpuInstanceProfile>> gpu_instance_profiles() const;
    Result<std::vector<GpuInstanceInfo>> gpu_instances(const GpuInstanceProfile& profile) const;
    // A GPU instance at `start` with one compute instance of its full size (a MIG device).
    Result<GpuInstanceInfo> create_gpu_instance(const GpuInstanceProfile& profile, unsigned start) const;
    // Its compute instances, then the GPU instance.
    Status destroy_gpu_instance(const GpuInstanceInfo& instance) const;
    // nvmlGpuTopologyLevel_t value (0 internal ... 50 system).
    Result<int> common_ancestor(const Device& other) const;
    // Whether NVLink `link` is active; not_supported when the GPU has no such link.
    Result<bool> nvlink_active(unsigned link) const;
    Result<std::string> nvlink_remote_bus_id(unsigned link) const;
    Result<NvLinkPeerType> nvlink_remote_type(unsigned link) const;

    // Telemetry for the exporter (defined in telemetry.cpp), in NVML's units. A value the GPU does
    // not report is Code::not_supported.
    Result<Utilization> utilization() const;
    Result<unsigned> encoder_utilization() const;  // percent
    Result<unsigned> decoder_utilization() const;  // percent
    Result<unsigned> temperature_c() const;         // the GPU die
    Result<unsigned> memory_temperature_c() const;  // HBM (field NVML_FI_DEV_MEMORY_TEMP)
    Result<unsigned> power_usage_mw() const;
    Result<std::uint64_t> total_energy_mj() const;  // since the driver loaded
    Result<unsigned> sm_clock_mhz() const;
    Result<unsigned> memory_clock_mhz() const;
    Result<unsigned> pcie_replay_counter() const;
    // nvmlDeviceGetTotalEccErrors(VOLATILE): corrected (single-bit) or uncorrected (double-bit).
    Result<std::uint64_t> ecc_volatile_total(bool corrected) const;
    // not_supported on a GPU without NVLink.
    Result<NvLinkThroughput> nvlink_throughput() const;
    // Samples newer than `since_us` (0: everything the driver keeps); empty when no process had
    // one (NVML's NOT_FOUND). not_supported on MIG-enabled GPUs.
    Result<std::vector<ProcessUtilization>> process_utilization(std::uint64_t since_us) const;

    // Profiling metrics (GPM, Hopper and newer; gpm.h). Whether NVML can sample this GPU:
    // false on older GPUs (and not_supported where the driver has no GPM).
    Result<bool> gpm_supported() const;
    // Reads this device's counters into `into` (nvmlGpmSampleGet), or those of GPU instance
    // `gpu_instance_id` of this MIG-enabled GPU (nvmlGpmMigSampleGet).
    Status gpm_sample(GpmSample& into) const;
    Status gpm_mig_sample(unsigned gpu_instance_id, GpmSample& into) const;

    // For `kgpu smi` and the container runtime's brand requirement (defined in smi.cpp).
    Result<unsigned> brand() const;             // nvmlBrandType_t (2 Tesla, 14 NVIDIA, ...)
    Result<unsigned> performance_state() const; // P-state number, 0..15 (32 unknown)

    // Whether this handle may still be used (context.h, "Handle generations"): refused,
    // Code::stale naming both generations, when it was taken before its GPU came back from
    // GPU_IS_LOST, or (a MIG device) before a MIG configuration change of its GPU that an EventSet
    // of this process saw; look the device up again. Every call on the device checks it.
    Status live() const;

private:
    friend class Session;
    friend class EventSet;
    // A GPU (or a device NVML gave by index or UUID), in its GPU's epoch as it is now.
    Device(std::shared_ptr<const Context> ctx, nvmlDevice_st* handle);
    // A MIG device of `gpu`, in the MIG generation `mig_generation` of it.
    Device(std::shared_ptr<const Context> ctx, nvmlDevice_st* handle, const Device& gpu, std::uint64_t mig_generation);
    // Calls entry point `fn` with this device's handle first (defined in context.h): every call
    // on a device goes through it, so none skips live().
    template <class Fn, class... Args>
    Result<int> call(Fn fn, Args... args) const;

    std::shared_ptr<const Context> ctx_;
    nvmlDevice_st* handle_ = nullptr;  // passed to NVML by call() only
    bool mig_ = false;                 // a MIG device of the GPU that epoch_ belongs to
    GpuEpoch* epoch_ = nullptr;
    std::uint64_t mig_generation_ = 0, reset_generation_ = 0;  // taken in these
};

class Session {
public:
    // nvmlInit (the versioned name when present). Errors carry the NVML return code, so callers
    // can tell DRIVER_NOT_LOADED from NO_PERMISSION.
    static Result<Session> open(std::shared_ptr<const Library> library);

    const Library& library() const;
    Result<std::string> driver_version() const;
    Result<std::string> nvml_version() const;
    // e.g. 12040 for CUDA 12.4.
    Result<int> cuda_driver_version() const;
    Result<unsigned> device_count() const;
    // The name of a process (nvmlSystemGetProcessName).
    Result<std::string> process_name(unsigned pid) const;
    Result<Device> device_by_index(unsigned index) const;
    Result<Device> device_by_uuid(const std::string& uuid) const;

private:
    friend class EventSet;
    friend class GpmSample;
    explicit Session(std::shared_ptr<const Context> ctx) : ctx_(std::move(ctx)) {}
    std::shared_ptr<const Context> ctx_;
};

}  // namespace kgpu::nvml
