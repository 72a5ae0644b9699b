#include "doctor/doctor.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "doctor/checks.h"

namespace kgpu::doctor {

namespace checks {
namespace {

// Every check in the order they run; a check runs only when what it needs passed.
std::vector<Check> registry() {
    const std::vector<std::string> nvml_dev = {"nvml.devices"};
    return {
        {"hardware.pci", Layer::hardware, "NVIDIA PCI functions present (sysfs)", {}, check_pci},
        {"driver.modules", Layer::driver, "nvidia, nvidia_uvm, nvidia_modeset loaded", {}, check_modules},
        {"driver.nouveau", Layer::driver, "nouveau not loaded", {}, check_nouveau},
        {"driver.version", Layer::driver, "/proc/driver/nvidia/version readable", {"driver.modules"}, check_version},
        {"driver.kernel_module", Layer::driver, "nvidia.ko built for the running kernel", {}, check_kernel_module},
        {"driver.build_tools", Layer::driver, "gcc, make and kernel headers for a driver build", {}, check_build_tools},
        {"nvml.load", Layer::driver, "libnvidia-ml.so.1 loads", {}, check_nvml_load},
        {"nvml.init", Layer::driver, "NVML initialises", {"nvml.load"}, check_nvml_init},
        {"nvml.version_match", Layer::driver, "library and kernel module are the same driver", {"nvml.init"},
         check_nvml_version_match},
        {"nvml.devices", Layer::hardware, "the driver reports GPUs", {"nvml.init"}, check_nvml_devices, {"hardware.pci"}},
        {"nvml.gpu_reachable", Layer::hardware, "every GPU answers (not lost)", nvml_dev, check_gpu_reachable},
        {"driver.device_nodes", Layer::driver, "/dev/nvidia* present with sane modes", {"driver.modules"},
         check_device_nodes, {"nvml.devices"}},
        {"driver.dev_char", Layer::driver, "/dev/char links for the NVIDIA device nodes", {"driver.device_nodes"},
         check_dev_char},
        {"nvml.persistence_mode", Layer::driver, "persistence mode on", nvml_dev, check_persistence},
        {"nvml.ecc", Layer::hardware, "ECC mode (no change pending)", nvml_dev, check_ecc},
        {"nvml.remapped_rows", Layer::hardware, "no remapped rows pending or failed", nvml_dev, check_remapped_rows},
        {"nvml.retired_pages", Layer::hardware, "no page retirement pending", nvml_dev, check_retired_pages},
        {"nvml.recovery_action", Layer::hardware, "driver asks for no recovery action", nvml_dev, check_recovery_action},
        {"nvml.mig_pending", Layer::hardware, "no MIG mode change pending", nvml_dev, check_mig_pending},
        {"kernel.xid", Layer::hardware, "XID errors in the kernel log", {}, check_xid},
        {"runtime.containerd", Layer::runtime, "containerd has an nvidia runtime or CDI", {}, check_containerd},
        {"runtime.cdi_spec", Layer::runtime, "a CDI spec for nvidia.com/gpu (when CDI is on)", {"runtime.containerd"},
         check_cdi_spec, {"nvml.devices"}},
        {"runtime.cdi_names", Layer::runtime, "no CDI device name defined twice in /etc/cdi, /var/run/cdi", {},
         check_cdi_names},
        {"runtime.toolkit", Layer::runtime, "NVIDIA container toolkit binaries", {}, check_toolkit, {"runtime.containerd"}},
        {"deviceplugin.config", Layer::device_plugin, "the device plugin's config file is valid, no unknown keys", {},
         check_dp_config},
        {"deviceplugin.dir", Layer::device_plugin, "device-plugin directory present", {}, check_dp_dir},
        {"deviceplugin.kubelet_socket", Layer::device_plugin, "kubelet.sock accepts connections", {"deviceplugin.dir"},
         check_kubelet_socket},
        {"deviceplugin.plugin_socket", Layer::device_plugin, "a plugin socket next to kubelet.sock answers GetDevicePluginOptions",
         {"deviceplugin.dir"}, check_plugin_socket},
        {"deviceplugin.one_plugin_per_resource", Layer::device_plugin, "one device plugin socket per resource",
         {"deviceplugin.dir"}, check_one_plugin_per_resource},
        {"kubelet.pod_resources", Layer::kubelet, "PodResources socket answers List", {}, check_pod_resources},
        {"kubelet.allocatable", Layer::kubelet, "the kubelet's allocatable devices are the ones kgpu serves",
         {"deviceplugin.dir"}, check_allocatable},
        {"kube.api", Layer::kubelet, "the API server answers kgpu, its Node exists, RBAC allows what kgpu needs", {},
         check_api},
        {"nvml.cuda_compat", Layer::workload, "CUDA images the driver and GPUs can run", nvml_dev, check_cuda_compat},
        {"nvml.gpu_memory", Layer::workload, "no process near a GPU's memory limit (OOM risk)", nvml_dev,
         check_gpu_memory},
    };
}

// What `c` declares, with what those declare in turn (a check that passed had what it needed).
std::vector<std::string> declared_closure(const std::vector<Check>& all, const Check& c) {
    std::vector<std::string> out, todo = c.needs;
    todo.insert(todo.end(), c.reads.begin(), c.reads.end());
    while (!todo.empty()) {
        std::string id = std::move(todo.back());
        todo.pop_back();
        if (std::find(out.begin(), out.end(), id) != out.end()) continue;
        out.push_back(id);
        for (const auto& d : all)
            if (d.id == id) todo.insert(todo.end(), d.needs.begin(), d.needs.end());
    }
    return out;
}

}  // namespace
}  // namespace checks

std::vector<std::string> check_ids() {
    std::vector<std::string> out;
    for (const auto& c : checks::registry()) out.push_back(c.id);
    return out;
}

std::vector<CheckDependency> check_dependencies() {
    std::vector<CheckDependency> out;
    for (const auto& c : checks::registry()) {
        for (const auto& n : c.needs) out.push_back({c.id, n, true});
        for (const auto& n : c.reads) out.push_back({c.id, n, false});
    }
    return out;
}

Report run(const Options& options) {
    checks::State s(options, options.root.empty() ? std::filesystem::path("/") : options.root);
    const auto all = checks::registry();
    Report report;
    for (const auto& c : all) {
        CheckResult r;
        r.id = c.id;
        r.layer = c.layer;
        r.title = c.title;
        r.needs = c.needs;
        std::string blocked;
        for (const auto& n : c.needs) {
            const CheckResult* dep = report.find(n);
            if (dep && (dep->status == Status::fail || dep->status == Status::skipped)) {
                blocked = fmt::format("skipped: needs {}, which {}", n, dep->status == Status::fail ? "failed" : "was skipped");
                break;
            }
        }
        if (!blocked.empty()) {
            r.status = Status::skipped;
            r.evidence = blocked;
        } else {
            s.tracker.current = c.id;
            s.tracker.declared = checks::declared_closure(all, c);
            c.run(s, r);
        }
        report.checks.push_back(std::move(r));
    }
    report.undeclared_uses = std::move(s.tracker.undeclared);
    return report;
}

}  // namespace kgpu::doctor
