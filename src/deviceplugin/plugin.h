// `kgpu device-plugin`: startup as ordered steps, then one control loop (STYLE.md #6).
//
// The control thread owns the servers; it waits on a signalfd (SIGTERM, SIGINT, SIGHUP) and an
// inotify watch of the device-plugin directory (kubelet.sock re-created after a kubelet restart;
// our own socket deleted; other plugins' sockets) with a timeout for retries. Registration runs on
// the registrar's thread (registrar.h), so a kubelet that never answers blocks nothing here. The
// health thread only publishes device lists; gRPC handlers only read.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "deviceplugin/config.h"
#include "deviceplugin/config_source.h"

namespace kgpu::deviceplugin {

struct PluginOptions {
    Config config;           // resolved: file < env < flags
    Overrides env, flags;    // kept to re-resolve on SIGHUP
    std::string config_file; // re-read on SIGHUP (empty: none)
    // How often to retry NVML when fail_on_init_error is false, and kubelet registration.
    std::chrono::milliseconds init_retry{std::chrono::seconds(5)};
    // GPU probes while a device is Unhealthy / while every device is Healthy (health.h).
    std::chrono::milliseconds probe_interval{std::chrono::seconds(1)};
    std::chrono::milliseconds idle_probe_interval{std::chrono::seconds(10)};
    // How long after start or a change the plugin gives its start-up pages back (memory::Settler).
    std::chrono::milliseconds settle{std::chrono::seconds(10)};
    // How often another plugin's socket for one of ours is looked at, and how long one that refused
    // connections at its event is given to listen (Registrar::Options).
    std::chrono::milliseconds foreign_probe{std::chrono::seconds(1)};
    std::chrono::milliseconds foreign_grace{std::chrono::seconds(1)};
    // Tests only (KGPU_RECOVERY_PERIOD_MS): replaces the config's health.recoveryPeriod, which
    // cannot go below 1s, so a recovery takes milliseconds. 0: the config's.
    std::chrono::milliseconds recovery_period{0};
    // The nvidia-cuda-mps-control the MPS watcher asks the daemons with (--mps-control-binary,
    // KGPU_MPS_CONTROL); empty: searched under the driver root (mps::find_control_binary).
    std::string mps_control_binary;
    // GPU health on the Node (issue #27 part 2): with `node_name` (--node-name, NODE_NAME) and an
    // API server configuration (`kubeconfig`, else $KUBECONFIG, else in-cluster), each health
    // change is posted as an Event on the Node (`node_events`), and with `node_annotation` the
    // per-GPU health is kept in the node annotation kgpu/gpu-health. Without them, or when the
    // configuration does not resolve, nothing is posted (said once at start).
    std::string node_name;
    std::optional<std::string> kubeconfig;
    bool node_events = true;
    bool node_annotation = false;
    // Per-node configs by node label (config_source.h; issue #27 part 1): with a source directory,
    // the config file is the one the node label names, chosen at start and again whenever the
    // label changes (a watch of the Node; needs node_name and an API server, else the default
    // and fallbacks apply), and the applied name is set as the node label
    // nvidia.com/device-plugin.config.state. `config_file` is then ignored.
    ConfigSource config_source;
    // GPUs paused for a MIG change (paused.h): the file `kgpu mig-manager` writes; every device
    // of a GPU it names is Unhealthy until it no longer does. Empty: none.
    std::string paused_gpus_file;
};

// Runs until SIGTERM or SIGINT. Returns the exit code: 0 after a clean stop, 1 when NVML cannot be
// loaded or initialised and fail_on_init_error is true, or the node does not fit the MIG strategy
// (single on a mixed node) and fail_on_init_error is true (or the directory cannot be watched),
// 2 when the configuration does not fit the node (sharing names an unknown device, a device twice,
// ...). After the start, SIGHUP re-reads the configuration (a bad one is logged and the running
// one stays) and a MIG configuration change (NVML event 0x100) rediscovers the node; a resource
// whose devices changed publishes its new list over its stream (no new registration), a new one
// registers, and one that disappears sends an empty device list before its server stops.
// SIGTERM: registration cancelled, streams ended, sockets removed, exit 0.
int run_device_plugin(PluginOptions options);

}  // namespace kgpu::deviceplugin
