// kgpu doctor: NVML: the library, its devices and their state (checks.h).
#include "doctor/checks.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "inventory/cuda_compat.h"
#include "inventory/discovery.h"
#include "nvml/error.h"

namespace kgpu::doctor::checks {

// ---- NVML -----------------------------------------------------------------------------------

void check_nvml_load(State& s, CheckResult& r) {
    nvml::LoadOptions lo;
    lo.library_path = s.opt.nvml_library;
    lo.driver_root = s.opt.driver_root.empty() ? s.root : fs::path(s.opt.driver_root);
    auto lib = nvml::Library::load(lo);
    if (!lib) {
        note(r, "{}", lib.error().message);
        set(r, Status::fail,
            "Install the NVIDIA driver's user-space libraries (they provide libnvidia-ml.so.1); in a container, mount "
            "the driver root (GPU Operator: /run/nvidia/driver) and pass --nvidia-driver-root, or pass --nvml-library.");
        return;
    }
    const auto& loaded = s.lib.set() = *lib;
    note(r, "loaded {}", loaded->origin());
    if (!loaded->missing_optional().empty())
        note(r, "{} optional entry point(s) missing (an older driver): {}", loaded->missing_optional().size(),
             loaded->missing_optional().front());
}

void check_nvml_init(State& s, CheckResult& r) {
    auto session = nvml::Session::open(s.lib.get());
    if (!session) {
        const Error& e = session.error();
        note(r, "{}", e.message);
        std::string_view hint = nvml::init_failure_hint(e.nvml_return);
        if (!hint.empty()) note(r, "cause: {}", hint);
        std::string fix;
        std::string_view rc = nvml::return_name(e.nvml_return);
        if (rc == "DRIVER_NOT_LOADED") {
                fix = "`modprobe nvidia`; if the module is missing for the running kernel, reinstall the driver "
                      "(a kernel update without a rebuild is the usual cause).";
        } else if (rc == "LIB_RM_VERSION_MISMATCH") {
                fix = "The user-space library and the kernel module are different driver versions (upgraded without a "
                      "reboot): reboot, or reload the module (`rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia; modprobe nvidia`).";
        } else if (rc == "NO_PERMISSION") {
                fix = "Run as root, or give the container /dev/nvidiactl and /dev/nvidia<N> (device plugin Allocate / "
                      "NVIDIA_VISIBLE_DEVICES), and check their modes (driver.device_nodes).";
        } else if (rc == "LIBRARY_NOT_FOUND") {
                fix = "A library NVML depends on is missing: reinstall the driver's user-space part.";
        } else {
                fix = "Read `dmesg | grep -i nvrm` for the driver's own error; reinstall the driver if it persists.";
        }
        set(r, Status::fail, fix);
        return;
    }
    s.session.set() = std::move(*session);
    note(r, "{} returned SUCCESS", s.lib.get()->symbol_name("Init"));
}

void check_nvml_version_match(State& s, CheckResult& r) {
    auto v = s.session.get()->driver_version();
    if (!v) {
        note(r, "{}", v.error().message);
        set(r, Status::warn, "Check `nvidia-smi` by hand.");
        return;
    }
    note(r, "{}: {}", s.lib.get()->symbol_name("SystemGetDriverVersion"), *v);
    auto text = files::read(s.host("/proc/driver/nvidia/version"));
    if (!text) {
        note(r, "{}: not readable; nothing to compare", s.host("/proc/driver/nvidia/version").string());
        return;
    }
    std::string mod = parse_driver_version(*text);
    note(r, "{}: {}", s.host("/proc/driver/nvidia/version").string(), mod.empty() ? "unparsed" : mod);
    if (!mod.empty() && mod != *v)
        set(r, Status::fail, fmt::format("libnvidia-ml is {} but the loaded kernel module is {} (driver/library "
                                         "mismatch): reboot, or reload the module after the upgrade.",
                                         *v, mod));
}

void check_nvml_devices(State& s, CheckResult& r) {
    inventory::DiscoveryOptions d;
    d.sysfs_root = s.host("/sys");
    d.topology = false;
    auto node = inventory::discover(*s.session.get(), d);
    if (!node) {
        note(r, "{}", node.error().message);
        set(r, Status::fail, "Read `dmesg | grep -i nvrm`; reset the GPUs or reboot.");
        return;
    }
    const auto& found = s.node.set() = std::move(*node);
    note(r, "driver {}, CUDA {}, {} GPU(s)", found->driver_version, found->cuda_version_string(), found->gpus.size());
    auto& devices = s.devices.set();
    for (const auto& g : found->gpus) {
        auto dev = s.session.get()->device_by_index(g.index);
        if (devices.size() <= g.index) devices.resize(g.index + 1);
        if (dev && !g.lost) devices[g.index] = *dev;
        if (!g.lost && !g.uuid.empty())
            note(r, "GPU {}: {} {} bus {} /dev/nvidia{}", g.index, g.name, g.uuid, g.pci_bus_id, g.minor);
    }
    if (found->gpus.empty()) {
        if (!s.pci_gpus.get().empty())
            note(r, "sysfs lists {} NVIDIA PCI function(s) the driver does not report", s.pci_gpus.get().size());
        set(r, Status::fail,
            "The driver is loaded but reports no GPU (\"No devices found\"): check `lspci | grep -i nvidia`, that the "
            "GPUs are not bound to vfio-pci or another driver, and `dmesg | grep -i nvrm` for init failures.");
    }
}

void check_gpu_reachable(State& s, CheckResult& r) {
    bool any = false;
    for (const auto& g : s.node.get()->gpus) {
        if (!g.lost && !g.uuid.empty()) continue;
        any = true;
        note(r, "GPU {}{}: {} ({})", g.index, g.pci_bus_id.empty() ? "" : " bus " + g.pci_bus_id,
             g.lost ? "lost" : "unreadable", g.error);
    }
    if (!any) {
        note(r, "all {} GPU(s) answer", s.node.get()->gpus.size());
        return;
    }
    set(r, Status::fail,
        "A GPU fell off the bus (XID 79 / GPU_IS_LOST): drain the node, reset it (`nvidia-smi -r -i <index>`) or "
        "reboot; if it recurs, check the GPU's power, cooling and PCIe seating.");
}

namespace {
// Calls fn for every reachable GPU.
void for_gpus(State& s, CheckResult& r, const std::function<void(const inventory::Gpu&, const nvml::Device&)>& fn) {
    const auto& devices = s.devices.get();
    for (const auto& g : s.node.get()->gpus) {
        if (g.index >= devices.size() || !devices[g.index]) {
            note(r, "GPU {}: not reachable (see nvml.gpu_reachable)", g.index);
            continue;
        }
        fn(g, *devices[g.index]);
    }
}
}  // namespace

void check_persistence(State& s, CheckResult& r) {
    std::vector<unsigned> off;
    for_gpus(s, r, [&](const inventory::Gpu& g, const nvml::Device& d) {
        auto pm = d.persistence_mode();
        if (!pm) {
            note(r, "GPU {}: {}", g.index, pm.error().message);
            return;
        }
        note(r, "GPU {}: persistence mode {}", g.index, *pm ? "on" : "off");
        if (!*pm) off.push_back(g.index);
    });
    if (!off.empty())
        set(r, Status::warn, "Turn persistence mode on (slow pod starts and flapping state otherwise): `nvidia-smi -pm 1`, "
                             "or better run nvidia-persistenced as a service.");
}

void check_ecc(State& s, CheckResult& r) {
    for_gpus(s, r, [&](const inventory::Gpu& g, const nvml::Device& d) {
        auto e = d.ecc_mode();
        if (!e) {
            note(r, "GPU {}: ECC {}", g.index, e.error().code == Code::not_supported ? "not supported" : e.error().message);
            return;
        }
        note(r, "GPU {}: ECC current {}, pending {}", g.index, e->first ? "on" : "off", e->second ? "on" : "off");
        if (e->first != e->second)
            set(r, Status::warn, "An ECC mode change is pending: it takes effect after a GPU reset or reboot "
                                 "(`nvidia-smi -r -i <index>` with no processes on it).");
    });
}

void check_remapped_rows(State& s, CheckResult& r) {
    for_gpus(s, r, [&](const inventory::Gpu& g, const nvml::Device& d) {
        auto rr = d.remapped_rows();
        if (!rr) {
            note(r, "GPU {}: remapped rows {}", g.index,
                 rr.error().code != Code::not_supported ? rr.error().message
                 : g.mig_mode == inventory::MigMode::enabled
                     ? "not readable while MIG instances exist (NVML answers NOT_SUPPORTED on a MIG-enabled GPU; "
                       "see nvml.retired_pages and kernel.xid)"
                     : "not supported (pre-Ampere: see nvml.retired_pages)");
            return;
        }
        note(r, "GPU {}: remapped rows correctable {}, uncorrectable {}, pending {}, failure {}", g.index,
             rr->correctable, rr->uncorrectable, rr->pending ? "yes" : "no", rr->failure ? "yes" : "no");
        if (rr->failure)
            set(r, Status::fail, fmt::format("GPU {}: a row remap failed: the GPU needs service (RMA); drain it.", g.index));
        if (rr->pending)
            set(r, Status::fail, fmt::format("GPU {}: a row remap waits for a GPU reset: drain the node and reset the GPU "
                                             "(`nvidia-smi -r -i {}`) or reboot.",
                                             g.index, g.index));
    });
}

void check_retired_pages(State& s, CheckResult& r) {
    for_gpus(s, r, [&](const inventory::Gpu& g, const nvml::Device& d) {
        auto p = d.retired_pages_pending();
        if (!p) {
            note(r, "GPU {}: retired pages {}", g.index,
                 p.error().code == Code::not_supported ? "not supported" : p.error().message);
            return;
        }
        note(r, "GPU {}: page retirement pending {}", g.index, *p ? "yes" : "no");
        if (*p)
            set(r, Status::fail, fmt::format("GPU {}: a page retirement waits for a GPU reset: drain the node and reset "
                                             "the GPU (`nvidia-smi -r -i {}`) or reboot.",
                                             g.index, g.index));
    });
}

void check_recovery_action(State& s, CheckResult& r) {
    // NVML_GPU_RECOVERY_ACTION_* values, field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (230).
    static const char* names[] = {"NONE", "GPU_RESET", "NODE_REBOOT", "DRAIN_P2P", "DRAIN_AND_RESET"};
    constexpr unsigned kNone = 0, kNodeReboot = 2, kField = 230;
    for_gpus(s, r, [&](const inventory::Gpu& g, const nvml::Device& d) {
        auto a = d.recovery_action();
        if (!a) {
            note(r, "GPU {}: recovery action {}", g.index,
                 a.error().code == Code::not_supported ? "not supported (driver older than R550)" : a.error().message);
            return;
        }
        const char* name = *a < 5 ? names[*a] : "UNKNOWN";
        note(r, "GPU {}: recovery action {} (field {})", g.index, name, kField);
        if (*a == kNodeReboot)
            set(r, Status::fail, fmt::format("GPU {}: the driver asks for a node reboot: drain the node and reboot.", g.index));
        else if (*a != kNone)
            set(r, Status::fail, fmt::format("GPU {}: the driver asks for {}: drain the node, then reset the GPU "
                                             "(`nvidia-smi -r -i {}`).",
                                             g.index, name, g.index));
    });
}

void check_mig_pending(State& s, CheckResult& r) {
    for (const auto& g : s.node.get()->gpus) {
        if (g.lost) continue;
        if (g.mig_mode == inventory::MigMode::unsupported) {
            note(r, "GPU {}: MIG not supported", g.index);
            continue;
        }
        note(r, "GPU {}: MIG current {}, pending {}, {} MIG device(s)", g.index, to_string(g.mig_mode),
             to_string(g.mig_pending), g.mig_devices.size());
        if (g.mig_pending != g.mig_mode)
            set(r, Status::warn, fmt::format("GPU {}: a MIG mode change is pending: stop the device plugin and every GPU "
                                             "process, then reset the GPU (`nvidia-smi -r -i {}`) or reboot.",
                                             g.index, g.index));
        else if (g.mig_mode == inventory::MigMode::enabled && g.mig_devices.empty())
            set(r, Status::warn, fmt::format("GPU {}: MIG is enabled but no MIG device exists, so it offers nothing: "
                                             "create instances (`nvidia-smi mig -cgi <profiles> -C -i {}`).",
                                             g.index, g.index));
    }
}

void check_cuda_compat(State& s, CheckResult& r) {
    const auto& n = *s.node.get();
    note(r, "driver {} reports CUDA {} (nvmlSystemGetCudaDriverVersion): images built for CUDA {} or older run", n.driver_version,
         n.cuda_version_string(), n.cuda_version_string());
    for (const auto& g : n.gpus) {
        if (g.lost || g.uuid.empty()) continue;
        inventory::compat::Cc cc{g.cc_major, g.cc_minor};
        std::string arch = inventory::compat::architecture(cc);
        if (cc < inventory::compat::min_cc(12)) {
            note(r, "GPU {}: {} compute capability {} ({}): CUDA 12 and 13 images have no kernel for it", g.index, g.name, cc.str(), arch);
            set(r, Status::warn, "Use CUDA 11.x images on this GPU (`kgpu doctor compat --cuda <v> --compute-capability "
                                 "<cc>` answers per image).");
        } else if (cc < inventory::compat::min_cc(13)) {
            note(r, "GPU {}: {} compute capability {} ({}): CUDA 13 images have no kernel for it (\"no kernel image is "
                 "available\")", g.index, g.name, cc.str(), arch);
            set(r, Status::warn, "Use CUDA 12.x (or older) images on this GPU.");
        } else {
            note(r, "GPU {}: {} compute capability {}{}", g.index, g.name, cc.str(), arch.empty() ? "" : " (" + arch + ")");
        }
    }
}

void check_gpu_memory(State& s, CheckResult& r) {
    for_gpus(s, r, [&](const inventory::Gpu& g, const nvml::Device& d) {
        auto procs = d.compute_processes();
        if (!procs) {
            note(r, "GPU {}: {}", g.index, procs.error().message);
            return;
        }
        std::uint64_t total = g.memory_total_mib * 1024ull * 1024ull;
        if (auto m = d.memory()) total = m->total;
        note(r, "GPU {}: {} compute process(es)", g.index, procs->size());
        for (const auto& p : *procs) {
            double share = total ? static_cast<double>(p.used_bytes) / static_cast<double>(total) : 0.0;
            std::string name = s.session.get()->process_name(p.pid).value_or("?");
            note(r, "GPU {}: PID {} ({}) uses {} MiB of {} MiB ({:.0f} %)", g.index, p.pid, name, p.used_bytes >> 20,
                 total >> 20, share * 100);
            if (share > s.opt.memory_threshold)
                set(r, Status::warn, fmt::format("GPU {}: PID {} ({}) holds over {:.0f} % of the GPU's memory: OOM risk. "
                                                 "Lower the batch size, use gradient accumulation or mixed precision (AMP).",
                                                 g.index, p.pid, name, s.opt.memory_threshold * 100));
        }
    });
}

}  // namespace kgpu::doctor::checks
