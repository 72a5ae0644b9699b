// Where a GPU's MIG instances go: the placement search behind `kgpu mig apply` (pure; no NVML).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kgpu::mig {

// A GPU instance profile of one GPU (what NVML reports for it).
struct Profile {
    std::string name;               // "1g.10gb", "1g.10gb+me"
    unsigned id = 0;                // the GPU's profile id
    unsigned size = 0;              // memory slices an instance takes
    unsigned max = 0;               // instances at most
    std::vector<unsigned> starts;   // where an instance may start
};

// A GPU instance: present (gi_id set) or to be made.
struct Placed {
    std::string profile;
    unsigned start = 0;
    std::optional<unsigned> gi_id;
    bool operator==(const Placed&) const = default;
};

struct Plan {
    std::vector<Placed> keep, destroy, create;
    bool changes() const { return !destroy.empty() || !create.empty(); }
};

// The instances `current` must lose and gain to become `wanted` (profile -> count): instances
// already there are kept where the rest still fits around them; otherwise the GPU is laid out
// afresh. Every placement is one of the profile's starts and none overlap. nullopt with `why`
// when `wanted` cannot be placed on this GPU at all (a profile it does not have, more than its
// count, or no arrangement fits).
std::optional<Plan> plan(const std::vector<Profile>& profiles, const std::vector<Placed>& current,
                         const std::map<std::string, unsigned>& wanted, std::string* why);

// The instance counts of `instances` (for assert and export).
std::map<std::string, unsigned> counts(const std::vector<Placed>& instances);

}  // namespace kgpu::mig
