// `kgpu smi` (also run as `nvidia-smi`): what a pod sees, as nvidia-smi shows it — the default
// table (driver and CUDA versions; per GPU name, bus id, persistence mode, temperature, power,
// memory, utilisation, compute and MIG mode; MIG devices; processes) and `-L`. Collection reads
// NVML into plain values; rendering is a pure function of them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "nvml/device.h"

namespace kgpu::toolkit {

struct SmiMig {
    unsigned index = 0;  // MIG device slot on its GPU
    std::string uuid, profile;
    unsigned gi = 0, ci = 0;
    std::uint64_t memory_used_mib = 0, memory_total_mib = 0;
    unsigned sm = 0, ce = 0, enc = 0, dec = 0, ofa = 0, jpg = 0;
};

struct SmiGpu {
    unsigned index = 0;
    std::string name, uuid, bus_id;
    bool lost = false;
    std::optional<bool> persistence;
    std::optional<bool> display_active;
    std::optional<unsigned> temperature_c, power_w, power_cap_w, pstate, utilization, compute_mode;
    std::optional<std::uint64_t> memory_used_mib, memory_total_mib, ecc_uncorrected;
    std::string mig_mode = "N/A";  // Enabled, Disabled, N/A
    std::vector<SmiMig> migs;
};

struct SmiProcess {
    unsigned gpu = 0;
    std::optional<unsigned> gi, ci;
    unsigned pid = 0;
    std::string name;
    std::uint64_t used_mib = 0;
};

struct SmiSnapshot {
    std::string timestamp;  // ctime form, "Mon Dec  1 16:07:00 2025"
    std::string driver_version, cuda_version;
    std::vector<SmiGpu> gpus;
    std::vector<SmiProcess> processes;
};

// Reads every GPU the driver shows (or those `ids` names: indices or UUIDs). Per-GPU read errors
// become "ERR!"/N/A fields, as nvidia-smi shows them. Errors: node-wide NVML calls failing; an
// id that names no GPU (not_found).
Result<SmiSnapshot> collect_smi(const nvml::Session& session, const std::vector<std::string>& ids);

std::string render_smi_table(const SmiSnapshot& s);
std::string render_smi_list(const SmiSnapshot& s);

}  // namespace kgpu::toolkit
