// `kgpu doctor`: the seeds' troubleshooting manual (000_5ed9091008160fa5.txt §1, §5;
// facts/diagnostics.md) as an ordered list of checks. Every check reads the host through
// `root` and NVML through the library options, so a laid-out fake host can be examined.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "doctor/report.h"

namespace kgpu::doctor {

struct Options {
    std::filesystem::path root = "/";   // --root: where the host's / is
    std::string nvml_library;           // --nvml-library (explicit path)
    std::string driver_root;            // --nvidia-driver-root; "" = root
    std::string kernel_log;             // --kernel-log (a host path); "" = /dev/kmsg, then /var/log/kern.log, /var/log/messages
    std::string containerd_config = "/etc/containerd/config.toml";
    std::string device_plugin_dir = "/var/lib/kubelet/device-plugins";
    std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
    // --config-file (env CONFIG_FILE, as the device plugin): the device plugin's config file, a
    // path as the doctor process sees it (not under root: run in the plugin's container, it is the
    // mounted ConfigMap). Empty: its check is skipped.
    std::string config_file;
    double memory_threshold = 0.95;     // a process above this share of a GPU's memory: OOM risk
    // kube.api: the API server kgpu's node features use (--kubeconfig, else $KUBECONFIG, else
    // in-cluster) and this node's name (--node-name, NODE_NAME). None configured: skipped.
    std::optional<std::string> kubeconfig;
    std::string node_name;
};

// Every check id in run order (docs/doctor.md lists them all).
std::vector<std::string> check_ids();

// Each check's declared dependencies: `needs` (must have passed, else the check is skipped) and
// `reads` (its result is read, passed or not), for the test that every one names a check that
// runs earlier.
struct CheckDependency {
    std::string check, on;
    bool needs = true;
};
std::vector<CheckDependency> check_dependencies();

// Runs every check in order. A check whose `needs` failed or were skipped is skipped with the
// reason; checks whose id starts with "nvml." need only the library (and init), whatever sysfs or
// /proc/modules say. Never throws; never fails as a whole.
Report run(const Options& options);

}  // namespace kgpu::doctor
