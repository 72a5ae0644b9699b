// The node's GPUs as MIG layouts see them, read through NVML, and the changes that make them
// match a mig-parted config: what `kgpu mig apply|assert` and `kgpu mig-manager` share.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "mig/config.h"
#include "mig/plan.h"
#include "nvml/device.h"

namespace kgpu::mig {

inline constexpr unsigned kNoGi = ~0u;  // Gpu::pids key of processes on the GPU itself (MIG off)

struct Gpu {
    Gpu(unsigned i, nvml::Device d) : index(i), dev(std::move(d)) {}
    unsigned index = 0;
    nvml::Device dev;
    std::string name, uuid;
    unsigned device_id = 0, subsystem_id = 0;
    bool capable = false;
    nvml::MigMode mode;
    std::vector<nvml::GpuInstanceProfile> nvml_profiles;
    std::vector<Profile> profiles;
    std::vector<Placed> instances;
    std::map<unsigned, nvml::GpuInstanceInfo> by_gi;  // present GPU instances by id
    std::vector<unsigned> partial;  // GPU instances without their one compute instance: no MIG device
    std::map<unsigned, std::vector<unsigned>> pids;    // GPU instance id (or kNoGi for the GPU) -> pids
    std::string pids_unknown;  // why the processes could not be read ("" when they were)
};

// "GPU 2 (NVIDIA A100-SXM4-80GB)", for messages.
std::string label(const Gpu& g);

// Every GPU of the session. Errors name the GPU and the NVML call.
Result<std::vector<Gpu>> read_node(const nvml::Session& s);

// What one GPU should become: the last entry of the config that matches it.
struct Want {
    bool enabled = false;
    std::map<std::string, unsigned> devices;
    bool all = false;  // selected by `devices: all` (a GPU without MIG is then skipped, as mig-parted does)
};
std::optional<Want> wanted(const std::vector<Entry>& entries, const Gpu& g);

// Why GPU `g` does not match `w` ("" when it does); mode_only compares the mode alone.
std::string mismatch(const Gpu& g, const Want& w, bool mode_only);

// `file`'s config `selected` (mig-parted's messages: "error parsing config file: ...").
Result<std::vector<Entry>> load_entries(const std::string& file, const std::string& selected);

// What must change on one GPU.
struct Step {
    std::size_t gpu = 0;            // index into the read_node vector
    Want want;
    std::optional<Plan> plan;       // when the instances change (MIG stays on)
    bool mode_change = false;
    bool cancel_pending = false;    // the mode is right but another one is pending: set it again
    std::vector<unsigned> busy;     // pids on what would change (destroyed instances, or the whole GPU)
};

struct Assessment {
    std::vector<Step> steps;
    // Why the config cannot be applied at all, one line per GPU (does not fit, not MIG capable).
    std::vector<std::string> problems;
};
// The steps that take `gpus` to `entries` (GPUs the config does not select, and GPUs already
// right, have none). Reads nothing: processes are those read_node saw.
Assessment assess(const std::vector<Gpu>& gpus, const std::vector<Entry>& entries, bool mode_only);

enum class Applied { done, needs_reset, needs_reboot };
// Carries out `step` on its GPU (destroys, mode, creates, in an order the placements allow).
// Errors name the GPU and the NVML call that failed.
Result<Applied> apply_step(Gpu& g, Step& step, bool mode_only);

}  // namespace kgpu::mig
