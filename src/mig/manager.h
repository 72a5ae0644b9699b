// `kgpu mig-manager`'s reconfiguration (issue #28 part 3), one run per value of the node label
// nvidia.com/mig.config, as the GPU Operator's mig-manager does it but without stopping the
// device plugin, GFD or the exporter (they follow MIG changes live):
//  1. the config is read; one that cannot apply (unknown name, a layout that does not fit) fails;
//  2. already applied: state success, nothing else;
//  3. state pending; the GPUs that change are paused (paused.h: the device plugin stops offering
//     them, so no new pod gets them) and, once the pause has had `pause_settle` to reach the
//     kubelet, the node is read again;
//  4. each GPU is changed once nothing uses what changes: no process on it and no pod holding one
//     of its devices there (the kubelet's PodResources: a pod whose container has not started its
//     CUDA process yet counts too); idle GPUs first, each offered again as soon as it is done.
//     Still in use after `process_timeout`: failed, with an Event naming the pods and processes;
//  5. a mode change pending a GPU reset the driver could not do: once no GPU is still waited
//     for, with `with_reboot` state rebooting and the node rebooted; else failed, with the reason
//     in an Event;
//  6. the GPUs resume and the state is success.
// The state never stays pending: every way out sets success, failed or rebooting, and unpauses
// (a reboot clears the file, which lives under /run).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "nvml/device.h"

namespace kgpu::mig {

inline constexpr const char* kConfigLabel = "nvidia.com/mig.config";
inline constexpr const char* kStateLabel = "nvidia.com/mig.config.state";

// Event reasons (on the Node).
inline constexpr const char* kReasonApplied = "MigConfigApplied";   // Normal
inline constexpr const char* kReasonWaiting = "MigConfigWaiting";   // Normal: GPUs busy, waiting
inline constexpr const char* kReasonFailed = "MigConfigFailed";     // Warning
inline constexpr const char* kReasonRebooting = "MigConfigRebooting";  // Warning

struct ManagerOptions {
    std::string config_file;
    std::string paused_gpus_file;  // "" : nothing is paused
    std::chrono::milliseconds process_timeout{std::chrono::minutes(5)};
    std::chrono::milliseconds poll{1000};
    // How long a new pause gets to reach the kubelet (the plugin's inotify and ListAndWatch)
    // before the GPUs' users are read again and the first change is made.
    std::chrono::milliseconds pause_settle{1000};
    bool with_reboot = false;
};

// A pod's container that holds a device of a GPU (the kubelet's PodResources).
struct PodUse {
    unsigned gpu = 0;                         // the GPU's index
    std::optional<unsigned> gpu_instance;     // the MIG device's GPU instance, if it is one
    std::string pod;                          // "namespace/name"
};

// What the run does outside NVML (the API server, the kubelet, the host): seams for tests.
struct ManagerHooks {
    std::function<void(const std::string& state)> set_state;
    std::function<void(const std::string& type, const std::string& reason, const std::string& message)> event;
    // The pods that hold GPU devices now; nullopt when the kubelet cannot say (then processes
    // alone tell what is in use).
    std::function<std::optional<std::vector<PodUse>>()> pod_uses;
    // True when the run must stop waiting: a newer label value, or the process is stopping.
    std::function<bool()> interrupted;
    // Reboots the node: returns only when that did not happen (why), or with "" when this process
    // is being stopped by the shutdown.
    std::function<std::string()> reboot;
};

enum class Outcome { success, failed, rebooting, interrupted };

// One reconfiguration to `selected` (the label's value). `previous_state`: the state label as
// the run found it (rebooting: this run follows the reboot a mode change asked for).
Outcome reconfigure(const nvml::Session& session, const std::string& selected, const std::string& previous_state,
                    const ManagerOptions& options, const ManagerHooks& hooks);

}  // namespace kgpu::mig
