// `kgpu doctor` (checks), `kgpu doctor compat` (CUDA/driver/GPU questions) and `kgpu doctor
// pending` (why a GPU pod is Pending). Docs: docs/doctor.md.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "cli/nvml_options.h"
#include "inventory/cuda_compat.h"
#include "doctor/doctor.h"
#include "doctor/pending.h"

namespace kgpu::cli {

struct DoctorCliOptions {
    NvmlOptions nvml;
    doctor::Options checks;
    bool json = false;
    inventory::compat::Query compat;
    doctor::pending::Inputs pending;
    bool pending_json = false;
    std::string pending_node_name;  // --node-name: the node this host is ("" = $NODE_NAME, else the host name)
    CLI::App* cmd = nullptr;          // set by add_doctor_command
    CLI::App* driver_root_cmd = nullptr;
};

// Adds `doctor` with its `compat` and `pending` subcommands; returns the `doctor` command.
CLI::App* add_doctor_command(CLI::App& app, DoctorCliOptions& opts);

// Exit codes: doctor 0 nothing failed / 1 a check failed; compat 0 runs / 1 does not / 2 malformed
// question; pending 0 fits somewhere / 1 does not fit / 2 unreadable input.
int run_doctor(DoctorCliOptions& opts);

}  // namespace kgpu::cli
