// The doctor's checks, one file per layer (checks_node, checks_nvml, checks_runtime,
// checks_kubelet); doctor.cpp holds their registry (ids, layers, titles, what each needs) and
// runs them in order. Internal to src/doctor.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "doctor/doctor.h"
#include "doctor/host.h"
#include "common/files.h"
#include "inventory/node.h"
#include "nvml/device.h"
#include "nvml/library.h"
#include "runtime/containerd_settings.h"

namespace kgpu::doctor::checks {

namespace fs = std::filesystem;

// What the checks found so far; later checks read what earlier ones stored.
struct State {
    const Options& opt;
    fs::path root;
    std::shared_ptr<const nvml::Library> lib;
    std::optional<nvml::Session> session;
    std::optional<inventory::Node> node;
    std::vector<std::optional<nvml::Device>> devices;  // by GPU index; empty for unreachable ones
    std::vector<std::string> modules;
    bool modules_read = false;
    std::string kernel_release;
    std::optional<runtime::ContainerdSettings> containerd;
    std::vector<std::string> pci_gpus;  // sysfs bus ids of NVIDIA display/3D functions

    fs::path host(const fs::path& p) const { return files::under_root(root, p); }
    bool module_loaded(std::string_view m) const {
        return std::find(modules.begin(), modules.end(), m) != modules.end();
    }
};

inline void set(CheckResult& r, Status s, std::string fix = {}) {
    if (s == Status::skipped) {
        r.status = Status::skipped;
        return;
    }
    // Never downgrade: fail > warn > ok.
    auto rank = [](Status x) { return x == Status::fail ? 3 : x == Status::warn ? 2 : x == Status::skipped ? 0 : 1; };
    if (rank(s) >= rank(r.status)) r.status = s;
    if (!fix.empty()) r.fix += (r.fix.empty() ? "" : "\n") + fix;
}

struct Check {
    std::string id;
    Layer layer;
    std::string title;
    std::vector<std::string> needs;
    std::function<void(State&, CheckResult&)> run;
};

// checks_node.cpp: the node: PCI functions, the kernel log, the driver's modules, version and device nodes.
void check_pci(State& s, CheckResult& r);
void check_xid(State& s, CheckResult& r);
void check_modules(State& s, CheckResult& r);
void check_nouveau(State& s, CheckResult& r);
void check_version(State& s, CheckResult& r);
void check_kernel_module(State& s, CheckResult& r);
void check_build_tools(State& s, CheckResult& r);
void check_device_nodes(State& s, CheckResult& r);
void check_dev_char(State& s, CheckResult& r);

// checks_nvml.cpp: NVML: the library, its devices and their state.
void check_nvml_load(State& s, CheckResult& r);
void check_nvml_init(State& s, CheckResult& r);
void check_nvml_version_match(State& s, CheckResult& r);
void check_nvml_devices(State& s, CheckResult& r);
void check_gpu_reachable(State& s, CheckResult& r);
void check_persistence(State& s, CheckResult& r);
void check_ecc(State& s, CheckResult& r);
void check_remapped_rows(State& s, CheckResult& r);
void check_retired_pages(State& s, CheckResult& r);
void check_recovery_action(State& s, CheckResult& r);
void check_mig_pending(State& s, CheckResult& r);
void check_cuda_compat(State& s, CheckResult& r);
void check_gpu_memory(State& s, CheckResult& r);

// checks_runtime.cpp: the container runtime: containerd, CDI specs, the container toolkit.
void check_containerd(State& s, CheckResult& r);
void check_cdi_spec(State& s, CheckResult& r);
void check_cdi_names(State& s, CheckResult& r);
void check_toolkit(State& s, CheckResult& r);

// checks_kubelet.cpp: the device plugin, the kubelet and the API server.
void check_dp_config(State& s, CheckResult& r);
void check_dp_dir(State& s, CheckResult& r);
void check_kubelet_socket(State& s, CheckResult& r);
void check_plugin_socket(State& s, CheckResult& r);
void check_one_plugin_per_resource(State& s, CheckResult& r);
void check_allocatable(State& s, CheckResult& r);
void check_pod_resources(State& s, CheckResult& r);
void check_api(State& s, CheckResult& r);

}  // namespace kgpu::doctor::checks
