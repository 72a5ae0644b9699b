// The device plugin's CDI spec, which the cdi-annotations and cdi-cri strategies name devices
// in: written at every (re)initialisation for the node just discovered, and again when the
// loaded driver changes under a running plugin (/proc/driver/nvidia/version), because a spec
// that still names the old driver's libraries stops every GPU container that uses it.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

#include "deviceplugin/config.h"
#include "inventory/node.h"

namespace kgpu::deviceplugin {

// The version of the loaded kernel module from <proc_root>/driver/nvidia/version; "" when the
// file is missing or unparsable.
std::string loaded_driver_version(const std::filesystem::path& proc_root);

// Writes <cfg.cdi_spec_dir>/k8s.device-plugin.nvidia.com-gpu.json for `node` (JSON, NVIDIA's
// plugin's file name and kind, so neither collides with a node-wide nvidia.com/gpu spec and either
// plugin replaces the other's file), naming the libraries of `driver_version` when given (the
// loaded driver's), else of node.driver_version. Devices are named by index and UUID ("0", "0:1",
// "GPU-…", "MIG-…", the names Allocate hands out) plus "all". The spec an earlier kgpu wrote,
// kgpu-nvidia-gpu.yaml with nvidia.com/gpu names, is removed: its names collide with the node-wide
// spec. Failures are logged (the plugin keeps serving; CDI device names then do not resolve).
void write_cdi_spec(const inventory::Node& node, const Config& cfg, const std::string& driver_version = {});

// Polls the loaded driver's version (procfs has no inotify).
class DriverVersionWatch {
public:
    static constexpr std::chrono::seconds kInterval{2};

    explicit DriverVersionWatch(std::filesystem::path proc_root) : proc_root_(std::move(proc_root)) {}

    // The version now loaded, when it differs from the one seen before (the first call, and a
    // call before kInterval has passed, only record); nullopt otherwise.
    std::optional<std::string> changed();

private:
    std::filesystem::path proc_root_;
    std::optional<std::string> seen_;
    std::chrono::steady_clock::time_point next_{};
};

// What the plugin's control loop calls on every wake-up while it serves: when the config uses
// a CDI strategy and the loaded driver's version changed, the spec is written again for it.
class CdiSpecRefresher {
public:
    // Whether `cfg` needs a spec at all (a CDI device-list strategy).
    static bool wanted(const Config& cfg);
    void poll(const inventory::Node& node, const Config& cfg);

private:
    std::optional<DriverVersionWatch> watch_;
    std::filesystem::path proc_root_;
};

}  // namespace kgpu::deviceplugin
