// Workload compatibility questions answered from the tables of facts/diagnostics.md, kept here as
// data in one place: the minimum driver per CUDA release, minor-version compatibility, compute
// capabilities by architecture and GPU, and what CUDA 12 and 13 dropped. Facts about drivers and
// GPUs, so they live with the node model: `kgpu doctor compat`, the doctor's checks and the
// container runtime's NVIDIA_REQUIRE_CUDA refusal read the same table.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kgpu::inventory::compat {

struct Cuda {
    int major = 0, minor = 0;
    std::string str() const;
    auto operator<=>(const Cuda&) const = default;
};
struct Cc {
    int major = 0, minor = 0;
    std::string str() const;
    auto operator<=>(const Cc&) const = default;
};

std::optional<Cuda> parse_cuda(std::string_view text);      // "12.4", "12.4.1" -> 12.4
std::optional<Cc> parse_cc(std::string_view text);          // "7.0", "sm_70", "70"
bool valid_driver(std::string_view text);                   // "550.54.15", "570.26"
// <0, 0, >0 comparing dotted driver versions numerically ("550.54.14" < "550.54.15" < "555").
int compare_driver(std::string_view a, std::string_view b);

// The minimum Linux driver for a CUDA release (GA, x86_64), or nullopt for a release that does not
// exist (12.7, 14.0).
std::optional<std::string> min_driver(Cuda cuda);
// The first driver of a CUDA major, on which its newer minors run through minor-version
// compatibility; nullopt for an unknown major.
std::optional<std::string> minor_compat_driver(int cuda_major);
// The newest CUDA release a driver fully supports, or nullopt when older than every release known.
std::optional<Cuda> newest_cuda(std::string_view driver);

// "Volta" for 7.0; "" when unknown.
std::string architecture(Cc cc);
// The compute capability of a GPU by (a part of) its marketing name: "Tesla V100-SXM2-16GB" -> 7.0.
struct GpuModel {
    std::string name;  // the table's spelling, "V100"
    Cc cc;
};
std::optional<GpuModel> gpu_model(std::string_view name);
// The oldest compute capability a CUDA major builds for (12: 5.0, 13: 7.5).
Cc min_cc(int cuda_major);
// The first CUDA release that knows a compute capability (9.0 -> 11.8).
Cuda first_cuda_for(Cc cc);

// `kgpu doctor compat`.
struct Query {
    std::string cuda;                // required
    std::string driver;              // optional
    std::string compute_capability;  // optional (or gpu)
    std::string gpu;                 // optional
};
struct Answer {
    int exit_code = 0;               // 0 runs, 1 does not, 2 the question is malformed
    bool minor_compat_only = false;  // runs only through minor-version compatibility
    std::vector<std::string> lines;  // the explanation, one sentence each
};
Answer answer(const Query& q);

}  // namespace kgpu::inventory::compat
