// What a container asks for, read from its OCI spec with NVIDIA's rules (internal/config/image of
// nvidia-container-toolkit v1.20; facts/container-runtime-and-cdi.md): which devices
// (NVIDIA_VISIBLE_DEVICES, the device plugin's volume mounts, CDI annotations), which driver
// capabilities, and which NVIDIA_REQUIRE_* constraints. Pure functions over values, no I/O.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "toolkit/config.h"

namespace kgpu::toolkit {

// The parts of an OCI runtime spec (config.json) the decision needs.
struct ContainerView {
    std::map<std::string, std::string> env;  // process.env; a later duplicate wins, as for execve
    struct Mount {
        std::string source, destination;
    };
    std::vector<Mount> mounts;
    std::map<std::string, std::string> annotations;
    bool privileged = false;  // CAP_SYS_ADMIN in process.capabilities.bounding (NVIDIA's test)
};

// Errors (invalid_argument, naming the field): a field of the wrong JSON type, an env entry
// without '='.
Result<ContainerView> read_container(const nlohmann::ordered_json& spec);

// The volume-mounts marker: NVIDIA_VISIBLE_DEVICES's value, and the directory whose /dev/null
// mounts name the devices.
inline constexpr std::string_view kVolumeMountsRoot = "/var/run/nvidia-container-devices";

enum class RequestSource { none, envvar, volume_mounts, annotations };
std::string_view to_string(RequestSource s);

struct Request {
    RequestSource source = RequestSource::none;
    // Device names as requested: "all", "none", indices, UUIDs, "i:j", PCI bus ids, or fully
    // qualified CDI names ("nvidia.com/gpu=0"). Empty: the container asks for no GPU and its spec
    // is left untouched. ["none"]: the driver's files and control nodes, no GPU.
    std::vector<std::string> devices;
    // NVIDIA_DRIVER_CAPABILITIES ("utility,compute" when unset or empty; "all" = every one).
    std::set<std::string> capabilities;
    // One line per thing the decision ignored on purpose (logged at warn).
    std::vector<std::string> notes;
};

// NVIDIA's rules, in order: CDI annotations with one of the configured prefixes; then (when
// accepted) /dev/null mounts under kVolumeMountsRoot; then NVIDIA_VISIBLE_DEVICES, honoured in an
// unprivileged container only when accept_envvar_when_unprivileged. A legacy CUDA image
// (CUDA_VERSION set, NVIDIA_REQUIRE_CUDA not) without the variable asks for "all". "void", an empty
// value or no variable ask for nothing. Errors: NVIDIA_VISIBLE_DEVICES is the volume-mounts marker
// but volume mounts are not accepted (the pod would otherwise silently start without its GPUs).
Result<Request> requested_devices(const ContainerView& c, const RuntimeConfig& config);

// The capability names NVIDIA defines.
const std::set<std::string>& known_capabilities();

// The requirement expressions of NVIDIA_REQUIRE_* (NVIDIA_REQUIRE_JETPACK excepted) in name order,
// as (variable, value); plus "cuda>=<major.minor>" for a legacy image (variable CUDA_VERSION).
// Empty when NVIDIA_DISABLE_REQUIRE is a true boolean. Errors: a legacy CUDA_VERSION that is
// not a version.
Result<std::vector<std::pair<std::string, std::string>>> requirements(const ContainerView& c);

}  // namespace kgpu::toolkit
