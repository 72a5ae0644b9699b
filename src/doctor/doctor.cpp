#include "doctor/doctor.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cdi/cache.h"
#include "cdi/driver_files.h"
#include "cdi/spec.h"
#include "common/elf.h"
#include "common/files.h"
#include "common/strings.h"
#include "deviceplugin/config.h"
#include "doctor/grpc_probe.h"
#include "doctor/host.h"
#include "doctor/kube_api.h"
#include "kube/client.h"
#include "nvml/xid.h"
#include "inventory/cuda_compat.h"
#include "inventory/discovery.h"
#include "inventory/pci.h"
#include "nvml/error.h"
#include "nvml/library.h"
#include "toolkit/devchar.h"

namespace kgpu::doctor {

namespace fs = std::filesystem;

namespace {

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
    std::optional<ContainerdConfig> containerd;
    std::vector<std::string> pci_gpus;  // sysfs bus ids of NVIDIA display/3D functions

    fs::path host(const fs::path& p) const { return files::under_root(root, p); }
    bool module_loaded(std::string_view m) const {
        return std::find(modules.begin(), modules.end(), m) != modules.end();
    }
};

void set(CheckResult& r, Status s, std::string fix = {}) {
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

// ---- hardware -------------------------------------------------------------------------------

void check_pci(State& s, CheckResult& r) {
    const fs::path sysfs = s.host("/sys");
    const fs::path dir = sysfs / "bus/pci/devices";
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
        note(r, "{}: not readable (no sysfs under --root?)", dir.string());
        set(r, Status::warn, "Run kgpu doctor on the node itself, or mount the host's /sys and pass --root.");
        return;
    }
    auto functions = inventory::nvidia_pci_functions(sysfs);
    if (!functions) {
        note(r, "{}", functions.error().message);
        set(r, Status::warn, "Run kgpu doctor on the node itself, or mount the host's /sys and pass --root.");
        return;
    }
    for (const auto& f : *functions)
        if (inventory::is_display_class(f.class_code)) s.pci_gpus.push_back(f.address);
    if (s.pci_gpus.empty()) {
        note(r, "{}: no function with vendor 0x10de and class 0x03xxxx", dir.string());
        set(r, Status::fail,
            "No NVIDIA GPU on the PCI bus (`lspci | grep -i nvidia` shows none): check the instance type, reseat the "
            "card and its power, or enable the slot / above-4G decoding in the BIOS.");
        return;
    }
    for (const auto& f : *functions)
        if (inventory::is_display_class(f.class_code))
            note(r, "{}/{}: vendor 0x10de class 0x{:06x}", dir.string(), f.address, f.class_code);
}

void check_xid(State& s, CheckResult& r) {
    std::vector<std::string> candidates;
    if (!s.opt.kernel_log.empty()) candidates = {s.opt.kernel_log};
    else candidates = {"/dev/kmsg", "/var/log/kern.log", "/var/log/messages"};
    std::optional<std::string> text;
    std::string used;
    for (const auto& c : candidates) {
        auto t = read_kernel_log(s.host(c));
        if (t) {
            text = std::move(*t);
            used = s.host(c).string();
            break;
        }
        note(r, "{}", t.error().message);
    }
    if (!text) {
        set(r, Status::warn, "Run as root (reading /dev/kmsg needs CAP_SYSLOG when kernel.dmesg_restrict=1) or pass "
                             "--kernel-log with a saved `dmesg` output.");
        return;
    }
    r.evidence.clear();
    auto xids = parse_xids(*text);
    note(r, "{}: {} NVRM Xid line(s)", used, xids.size());
    std::map<int, std::vector<std::string>> by_xid;
    for (const auto& x : xids) {
        auto& v = by_xid[x.xid];
        if (std::find(v.begin(), v.end(), x.pci) == v.end()) v.push_back(x.pci);
    }
    bool reset = false, recoverable = false, app = false, unknown = false;
    for (const auto& [xid, pcis] : by_xid) {
        auto cls = classify_xid(xid);
        std::string meaning(nvml::xid_meaning(static_cast<unsigned>(xid)));
        std::string where;
        for (const auto& p : pcis) where += (where.empty() ? "" : ", ") + p;
        const char* klass = cls == XidClass::application   ? "application-caused"
                            : cls == XidClass::recoverable ? "recoverable once the faulting work is gone"
                            : cls == XidClass::reset_required ? "GPU reset or reboot required"
                                                              : "not in kgpu's table";
        note(r, "XID {} ({}) on PCI {}: {}", xid, meaning.empty() ? "see NVIDIA's XID catalogue" : meaning, where, klass);
        reset |= cls == XidClass::reset_required;
        recoverable |= cls == XidClass::recoverable;
        app |= cls == XidClass::application;
        unknown |= cls == XidClass::unknown;
    }
    if (reset) {
        std::string fix =
            "Drain the node (kubectl drain <node> --ignore-daemonsets), then reset the GPU (nvidia-smi -r -i <index>) "
            "or reboot; the device plugin keeps it unhealthy until then.";
        if (by_xid.count(79)) fix += " XID 79: check the GPU's power, cooling and PCIe seating.";
        if (by_xid.count(48) || by_xid.count(63) || by_xid.count(64) || by_xid.count(95) || by_xid.count(140))
            fix += " ECC XIDs: see nvml.remapped_rows; a failed remap (XID 64) means the GPU needs service.";
        set(r, Status::fail, fix);
    } else if (recoverable || unknown) {
        set(r, Status::warn, "Watch the GPU: if the XID repeats, drain the node and reset the GPU; look the XID up in "
                             "NVIDIA's XID catalogue.");
    } else if (app) {
        set(r, Status::warn, "Application-caused XIDs: check the logs of the workload that ran then (bad kernel, "
                             "out-of-bounds access); the GPU itself is fine.");
    }
}

// ---- driver ---------------------------------------------------------------------------------

void read_modules(State& s) {
    if (s.modules_read) return;
    s.modules_read = true;
    if (auto t = files::read(s.host("/proc/modules"))) s.modules = parse_modules(*t);
    if (auto rel = files::read_line(s.host("/proc/sys/kernel/osrelease"))) s.kernel_release = *rel;
}

void check_modules(State& s, CheckResult& r) {
    read_modules(s);
    auto path = s.host("/proc/modules");
    if (!files::read(path)) {
        note(r, "{}: not readable", path.string());
        set(r, Status::fail, "Mount the host's /proc (or run on the node) so the loaded kernel modules can be read.");
        return;
    }
    for (const char* m : {"nvidia", "nvidia_uvm", "nvidia_modeset"})
        note(r, "{}: {} {}", path.string(), m, s.module_loaded(m) ? "loaded" : "not loaded");
    if (!s.module_loaded("nvidia")) {
        set(r, Status::fail,
            "Load the driver: `modprobe nvidia`. If that fails, the module was not built for the running kernel "
            "(a kernel update without a driver rebuild): reinstall the driver (see driver.kernel_module).");
        return;
    }
    if (!s.module_loaded("nvidia_uvm"))
        set(r, Status::warn, "CUDA needs nvidia_uvm: `modprobe nvidia-uvm` (or `nvidia-modprobe -u -c=0`).");
    if (!s.module_loaded("nvidia_modeset"))
        set(r, Status::warn, "`modprobe nvidia-modeset` (needed for /dev/nvidia-modeset; harmless on compute nodes "
                             "if nothing asks for it).");
}

void check_nouveau(State& s, CheckResult& r) {
    read_modules(s);
    if (!s.modules_read || s.modules.empty()) {
        note(r, "{}: not readable", s.host("/proc/modules").string());
        set(r, Status::skipped);
        return;
    }
    bool loaded = s.module_loaded("nouveau");
    note(r, "{}: nouveau {}", s.host("/proc/modules").string(), loaded ? "loaded" : "not loaded");
    if (loaded)
        set(r, Status::fail,
            "Blacklist nouveau: echo -e 'blacklist nouveau\\noptions nouveau modeset=0' > "
            "/etc/modprobe.d/blacklist-nouveau.conf; update-initramfs -u; reboot; then install or load the NVIDIA driver.");
}

void check_version(State& s, CheckResult& r) {
    auto path = s.host("/proc/driver/nvidia/version");
    auto t = files::read(path);
    if (!t) {
        note(r, "{}: {}", path.string(), t.error().message);
        set(r, Status::fail, "The nvidia module is listed but its /proc entry is missing: reload it "
                             "(`rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia; modprobe nvidia`) or reboot.");
        return;
    }
    std::string v = parse_driver_version(*t);
    note(r, "{}: kernel module version {}", path.string(), v.empty() ? "unparsed" : v);
    if (!s.kernel_release.empty()) note(r, "running kernel {}", s.kernel_release);
    if (v.empty()) set(r, Status::warn, "Check `cat /proc/driver/nvidia/version` by hand: kgpu could not parse it.");
}

void check_kernel_module(State& s, CheckResult& r) {
    read_modules(s);
    if (s.module_loaded("nvidia")) {
        note(r, "nvidia is loaded{}", s.kernel_release.empty() ? "" : fmt::format(" into kernel {}", s.kernel_release));
        return;
    }
    if (s.kernel_release.empty()) {
        note(r, "{}: not readable", s.host("/proc/sys/kernel/osrelease").string());
        set(r, Status::skipped);
        return;
    }
    fs::path dir = s.host("/lib/modules") / s.kernel_release;
    note(r, "running kernel {} (/proc/sys/kernel/osrelease)", s.kernel_release);
    std::error_code ec;
    std::optional<fs::path> found;
    if (fs::is_directory(dir, ec)) {
        for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
             it != fs::recursive_directory_iterator(); it.increment(ec)) {
            if (ec) break;
            std::string n = it->path().filename().string();
            if (n == "nvidia.ko" || n.starts_with("nvidia.ko.")) {
                found = it->path();
                break;
            }
        }
    }
    if (found) {
        note(r, "{}: present", found->string());
        set(r, Status::fail, "The module exists for this kernel but is not loaded: `modprobe nvidia` and read `dmesg | "
                             "grep -i nvrm` if it refuses.");
        return;
    }
    std::vector<std::string> others;
    for (const auto& e : fs::directory_iterator(s.host("/lib/modules"), ec)) {
        std::error_code ec2;
        for (auto it = fs::recursive_directory_iterator(e.path(), fs::directory_options::skip_permission_denied, ec2);
             it != fs::recursive_directory_iterator(); it.increment(ec2)) {
            if (ec2) break;
            std::string n = it->path().filename().string();
            if (n == "nvidia.ko" || n.starts_with("nvidia.ko.")) {
                others.push_back(e.path().filename().string());
                break;
            }
        }
    }
    note(r, "{}: no nvidia.ko", dir.string());
    if (!others.empty()) {
        std::string list;
        for (const auto& o : others) list += (list.empty() ? "" : ", ") + o;
        note(r, "nvidia.ko exists for kernel(s) {}", list);
        set(r, Status::fail, fmt::format("The kernel was updated after the driver was installed (module built for {}, "
                                         "running {}): reinstall the driver (or `dkms autoinstall`) for the running "
                                         "kernel, or boot the old kernel.",
                                         list, s.kernel_release));
    } else {
        set(r, Status::fail, "No NVIDIA driver is installed for this kernel: install it (runfile: ./NVIDIA-Linux-x86_64-"
                             "<version>.run --silent, or the distribution's driver package).");
    }
}

void check_build_tools(State& s, CheckResult& r) {
    read_modules(s);
    if (s.module_loaded("nvidia")) {
        note(r, "the driver is loaded; build tools matter only for installing it");
        set(r, Status::skipped);
        return;
    }
    const std::vector<std::string> bins = {"/usr/bin", "/bin", "/usr/local/bin"};
    bool ok = true;
    for (const char* tool : {"gcc", "make"}) {
        auto p = find_binary(s.root, tool, bins);
        note(r, "{}: {}", tool, p ? p->string() : "not found in /usr/bin, /bin, /usr/local/bin");
        ok &= p.has_value();
    }
    if (!s.kernel_release.empty()) {
        fs::path build = fs::path("/lib/modules") / s.kernel_release / "build";
        fs::path hdr = fs::path("/usr/src") / ("linux-headers-" + s.kernel_release);
        std::error_code ec;
        bool have = fs::exists(s.host(build), ec) || fs::exists(s.host(hdr), ec);
        note(r, "kernel headers for {}: {}", s.kernel_release, have ? "present" : fmt::format("missing ({} and {})", build.string(), hdr.string()));
        ok &= have;
    }
    if (!ok) set(r, Status::fail, "apt-get install -y build-essential gcc make linux-headers-$(uname -r)");
}

void check_device_nodes(State& s, CheckResult& r) {
    std::vector<std::string> required = {"/dev/nvidiactl"};
    std::vector<std::string> wanted = {"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"};
    std::error_code ec;
    std::set<std::string> gpu_nodes;
    if (s.node) {
        for (const auto& g : s.node->gpus)
            if (!g.lost && !g.uuid.empty()) gpu_nodes.insert(fmt::format("/dev/nvidia{}", g.minor));
    }
    if (gpu_nodes.empty()) {
        for (const auto& e : fs::directory_iterator(s.host("/dev"), ec)) {
            std::string n = e.path().filename().string();
            if (n.size() > 6 && n.starts_with("nvidia") && std::all_of(n.begin() + 6, n.end(), ::isdigit))
                gpu_nodes.insert("/dev/" + n);
        }
    }
    for (const auto& g : gpu_nodes) required.push_back(g);
    bool missing_required = false, missing_uvm = false, bad_mode = false;
    auto inspect = [&](const std::string& p, bool req) {
        struct stat st {};
        auto hp = s.host(p);
        if (::stat(hp.c_str(), &st) != 0) {
            note(r, "{}: missing", hp.string());
            (req ? missing_required : missing_uvm) = true;
            return;
        }
        unsigned mode = st.st_mode & 0777;
        note(r, "{}: {} mode {:04o}", hp.string(), S_ISCHR(st.st_mode) ? "character device" : "file", mode);
        if ((mode & 0666) != 0666) bad_mode = true;
    };
    for (const auto& p : required) inspect(p, true);
    for (const auto& p : wanted) inspect(p, false);
    if (gpu_nodes.empty()) {
        note(r, "no /dev/nvidia<N> node");
        missing_required = true;
    }
    if (missing_required)
        set(r, Status::fail, "Create the device nodes: `nvidia-modprobe -c=0` per GPU minor (or run `nvidia-smi` once as "
                             "root); in a container, mount /dev/nvidia* from the host.");
    if (missing_uvm)
        set(r, Status::warn, "Create /dev/nvidia-uvm: `nvidia-modprobe -u -c=0` (CUDA programs need it).");
    if (bad_mode)
        set(r, Status::warn, "The NVIDIA device nodes should be crw-rw-rw- (0666): `chmod 0666 /dev/nvidia*`, or set "
                             "NVreg_DeviceFileMode=0666 in /etc/modprobe.d/nvidia.conf; non-root containers cannot open them otherwise.");
}

void check_dev_char(State& s, CheckResult& r) {
    const fs::path dev_root = s.opt.driver_root.empty() ? fs::path("/") : fs::path(s.opt.driver_root);
    auto links = toolkit::nvidia_dev_char_links(s.root, dev_root);
    if (links.empty() && dev_root != "/") links = toolkit::nvidia_dev_char_links(s.root, "/");
    if (links.empty()) {
        note(r, "no NVIDIA character device under {}", s.host("/dev").string());
        set(r, Status::skipped);
        return;
    }
    std::vector<std::string> missing, wrong;
    for (const auto& l : links) {
        if (l.state == toolkit::DevCharLink::State::missing) missing.push_back(fmt::format("{} ({})", l.link, l.node));
        if (l.state == toolkit::DevCharLink::State::wrong) wrong.push_back(fmt::format("{} (not {})", l.link, l.node));
    }
    note(r, "{} NVIDIA device node(s), {} with a /dev/char link", links.size(), links.size() - missing.size() - wrong.size());
    for (const auto& m : missing) note(r, "missing: {}", m);
    for (const auto& w : wrong) note(r, "points elsewhere: {}", w);
    if (!missing.empty() || !wrong.empty())
        set(r, Status::warn, "Without /dev/char/<major>:<minor> links a `systemctl daemon-reload` drops the GPUs from running "
                             "containers' device rules (\"Failed to initialize NVML: Unknown Error\"): `kgpu runtime install` "
                             "creates them (or `nvidia-ctk system create-dev-char-symlinks --create-all`).");
}

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
    s.lib = *lib;
    note(r, "loaded {}", s.lib->origin());
    if (!s.lib->missing_optional().empty())
        note(r, "{} optional entry point(s) missing (an older driver): {}", s.lib->missing_optional().size(),
             s.lib->missing_optional().front());
}

void check_nvml_init(State& s, CheckResult& r) {
    auto session = nvml::Session::open(s.lib);
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
    s.session = std::move(*session);
    note(r, "{} returned SUCCESS", s.lib->symbol_name("Init"));
}

void check_nvml_version_match(State& s, CheckResult& r) {
    auto v = s.session->driver_version();
    if (!v) {
        note(r, "{}", v.error().message);
        set(r, Status::warn, "Check `nvidia-smi` by hand.");
        return;
    }
    note(r, "{}: {}", s.lib->symbol_name("SystemGetDriverVersion"), *v);
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
    auto node = inventory::discover(*s.session, d);
    if (!node) {
        note(r, "{}", node.error().message);
        set(r, Status::fail, "Read `dmesg | grep -i nvrm`; reset the GPUs or reboot.");
        return;
    }
    s.node = std::move(*node);
    note(r, "driver {}, CUDA {}, {} GPU(s)", s.node->driver_version, s.node->cuda_version_string(), s.node->gpus.size());
    for (const auto& g : s.node->gpus) {
        auto dev = s.session->device_by_index(g.index);
        if (s.devices.size() <= g.index) s.devices.resize(g.index + 1);
        if (dev && !g.lost) s.devices[g.index] = *dev;
        if (!g.lost && !g.uuid.empty())
            note(r, "GPU {}: {} {} bus {} /dev/nvidia{}", g.index, g.name, g.uuid, g.pci_bus_id, g.minor);
    }
    if (s.node->gpus.empty()) {
        if (!s.pci_gpus.empty())
            note(r, "sysfs lists {} NVIDIA PCI function(s) the driver does not report", s.pci_gpus.size());
        set(r, Status::fail,
            "The driver is loaded but reports no GPU (\"No devices found\"): check `lspci | grep -i nvidia`, that the "
            "GPUs are not bound to vfio-pci or another driver, and `dmesg | grep -i nvrm` for init failures.");
    }
}

void check_gpu_reachable(State& s, CheckResult& r) {
    bool any = false;
    for (const auto& g : s.node->gpus) {
        if (!g.lost && !g.uuid.empty()) continue;
        any = true;
        note(r, "GPU {}{}: {} ({})", g.index, g.pci_bus_id.empty() ? "" : " bus " + g.pci_bus_id,
             g.lost ? "lost" : "unreadable", g.error);
    }
    if (!any) {
        note(r, "all {} GPU(s) answer", s.node->gpus.size());
        return;
    }
    set(r, Status::fail,
        "A GPU fell off the bus (XID 79 / GPU_IS_LOST): drain the node, reset it (`nvidia-smi -r -i <index>`) or "
        "reboot; if it recurs, check the GPU's power, cooling and PCIe seating.");
}

// Calls fn for every reachable GPU.
void for_gpus(State& s, CheckResult& r, const std::function<void(const inventory::Gpu&, const nvml::Device&)>& fn) {
    for (const auto& g : s.node->gpus) {
        if (g.index >= s.devices.size() || !s.devices[g.index]) {
            note(r, "GPU {}: not reachable (see nvml.gpu_reachable)", g.index);
            continue;
        }
        fn(g, *s.devices[g.index]);
    }
}

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
    for (const auto& g : s.node->gpus) {
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
    const auto& n = *s.node;
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
            std::string name = s.session->process_name(p.pid).value_or("?");
            note(r, "GPU {}: PID {} ({}) uses {} MiB of {} MiB ({:.0f} %)", g.index, p.pid, name, p.used_bytes >> 20,
                 total >> 20, share * 100);
            if (share > s.opt.memory_threshold)
                set(r, Status::warn, fmt::format("GPU {}: PID {} ({}) holds over {:.0f} % of the GPU's memory: OOM risk. "
                                                 "Lower the batch size, use gradient accumulation or mixed precision (AMP).",
                                                 g.index, p.pid, name, s.opt.memory_threshold * 100));
        }
    });
}

// ---- runtime --------------------------------------------------------------------------------

void check_containerd(State& s, CheckResult& r) {
    fs::path cfg = s.opt.containerd_config;
    auto c = read_containerd_config(s.root, cfg);
    if (!c) {
        note(r, "{}", c.error().message);
        if (c.error().code == Code::not_found)
            set(r, Status::fail, "No containerd config: `containerd config default > /etc/containerd/config.toml`, then "
                                 "`kgpu runtime configure` (or `nvidia-ctk runtime configure --runtime=containerd`) and "
                                 "`systemctl restart containerd`. (If the node runs CRI-O, configure it instead.)");
        else
            set(r, Status::fail, "Fix the TOML syntax at the position named, then `systemctl restart containerd`.");
        return;
    }
    s.containerd = *c;
    for (const auto& f : c->files) note(r, "read {}", s.host(f).string());
    note(r, "config version {}, CRI plugin \"{}\"", c->version, c->plugin);
    if (c->nvidia_runtime) {
        note(r, "runtime \"{}\" with BinaryName \"{}\"", c->nvidia_runtime_name, c->nvidia_binary);
        std::error_code ec;
        if (!c->nvidia_binary.empty() && !fs::exists(s.host(c->nvidia_binary), ec)) {
            note(r, "{}: missing", s.host(c->nvidia_binary).string());
            if (c->nvidia_binary.ends_with("kgpu-container-runtime"))
                set(r, Status::fail, "The nvidia runtime points at kgpu's runtime, which is not installed: `kgpu runtime "
                                     "install` (the DaemonSet's init container does it).");
            else
                set(r, Status::fail, "The nvidia runtime points at a binary that does not exist: install "
                                     "nvidia-container-toolkit (apt-get install -y nvidia-container-toolkit), or kgpu's "
                                     "runtime (`kgpu runtime install`).");
        } else if (c->nvidia_binary.ends_with("kgpu-container-runtime")) {
            note(r, "{} is kgpu's container runtime (no NVIDIA container toolkit needed)", c->nvidia_binary);
        }
    } else {
        note(r, "no nvidia runtime");
    }
    note(r, "default runtime \"{}\"", c->default_runtime.empty() ? "runc" : c->default_runtime);
    note(r, "CDI {}{}", c->cdi_enabled ? "enabled" : "disabled", c->cdi_explicit ? " (enable_cdi)" : " (containerd's default)");
    if (!c->nvidia_runtime && !c->cdi_enabled) {
        set(r, Status::fail, "containerd cannot inject GPUs: `kgpu runtime configure` (or `nvidia-ctk runtime configure "
                             "--runtime=containerd`), then `systemctl restart containerd`.");
    } else if (c->nvidia_runtime && c->default_runtime != c->nvidia_runtime_name && !c->cdi_enabled) {
        set(r, Status::warn, fmt::format("The nvidia runtime is not the default: GPU pods need `runtimeClassName: {}` (with "
                                         "a RuntimeClass whose handler is {}), or set default_runtime_name = \"{}\".",
                                         c->nvidia_runtime_name, c->nvidia_runtime_name, c->nvidia_runtime_name));
    }
}

// A spec generated before a driver upgrade names the old driver's libraries, and every
// container that uses it fails to start: compare its versioned libraries with the loaded driver.
void check_spec_driver(State& s, CheckResult& r, const std::string& path) {
    std::string loaded = s.node ? s.node->driver_version : std::string();
    if (loaded.empty())
        if (auto t = files::read(s.host("/proc/driver/nvidia/version"))) loaded = cdi::parse_proc_driver_version(*t);
    auto text = files::read(path);
    if (loaded.empty() || !text) return;
    auto spec = cdi::parse_spec(*text, path);
    if (!spec) {
        note(r, "{}", spec.error().message);
        set(r, Status::fail, "The CDI spec does not parse, so the runtime rejects it: regenerate it with `kgpu cdi generate`.");
        return;
    }
    auto m = cdi::check_libraries(*spec, loaded, s.root);
    if (m.other_version.empty() && m.missing.empty()) {
        if (!m.versions.empty()) note(r, "{}: its libraries are the loaded driver's ({})", path, loaded);
        return;
    }
    std::string versions;
    for (const auto& v : m.versions) versions += (versions.empty() ? "" : ", ") + v;
    note(r, "{}: names libraries of driver {} but driver {} is loaded ({} of another version, {} missing, e.g. {})", path,
         versions, loaded, m.other_version.size(), m.missing.size(),
         !m.other_version.empty() ? m.other_version.front() : m.missing.front());
    set(r, Status::fail, fmt::format("The CDI spec is stale (written before a driver upgrade): every container using it "
                                     "fails. Regenerate it: `kgpu cdi generate --output {}` (kgpu's device plugin rewrites "
                                     "its own spec when the driver changes).", path));
}

void check_cdi_spec(State& s, CheckResult& r) {
    if (!s.containerd->cdi_enabled) {
        note(r, "CDI is not enabled in containerd; the nvidia runtime injects the GPUs");
        set(r, Status::skipped);
        return;
    }
    std::vector<std::string> specs;
    std::error_code ec;
    for (const char* d : {"/etc/cdi", "/var/run/cdi"}) {
        for (const auto& e : fs::directory_iterator(s.host(d), ec)) {
            auto ext = e.path().extension().string();
            if (ext != ".json" && ext != ".yaml" && ext != ".yml") continue;
            auto text = files::read(e.path());
            if (text && text->find("nvidia.com/gpu") != std::string::npos) specs.push_back(e.path().string());
        }
        note(r, "{}: searched", s.host(d).string());
    }
    for (const auto& sp : specs) {
        note(r, "{}: kind nvidia.com/gpu", sp);
        check_spec_driver(s, r, sp);
    }
    if (specs.empty())
        set(r, Status::fail, "CDI is enabled but no spec names nvidia.com/gpu: `kgpu cdi generate` (or `nvidia-ctk cdi "
                             "generate --output=/var/run/cdi/nvidia.yaml`); regenerate after every driver upgrade.");
}

// Every CDI runtime (containerd 1.7+, CRI-O, nvidia-container-runtime's CDI mode) resolves names
// through a CDI cache over /etc/cdi and /var/run/cdi, which drops a name two specs of one
// directory define (cdi/cache.h): every container asking for it then fails to start. Typical
// cause: a node-wide spec (kgpu / nvidia-ctk cdi generate, nvidia-cdi-refresh) next to another
// one of the same kind, or next to what an older kgpu device plugin wrote (kgpu-nvidia-gpu.yaml).
void check_cdi_names(State& s, CheckResult& r) {
    std::vector<fs::path> dirs;
    std::vector<std::string> shown_dirs;
    for (const auto& d : cdi::kDefaultSpecDirs) {
        dirs.push_back(s.host(d));
        shown_dirs.push_back(dirs.back().string());
    }
    const cdi::CacheView view = cdi::scan_spec_dirs(dirs);
    note(r, "{}: {} spec(s) loaded, {} device name(s) resolve", fmt::join(shown_dirs, ", "), view.specs.size(),
         view.devices.size());
    // Grouped by the files involved: one line per set of files, with the names they share.
    auto grouped = [](const std::vector<cdi::NameDefinitions>& defs) {
        std::map<std::vector<std::string>, std::vector<std::string>> by_files;
        for (const auto& d : defs) by_files[d.paths].push_back(d.name);
        return by_files;
    };
    auto names = [](const std::vector<std::string>& list) {
        constexpr size_t kShown = 4;
        std::vector<std::string> shown(list.begin(), list.begin() + static_cast<long>(std::min(list.size(), kShown)));
        return fmt::format("{}{}", fmt::join(shown, ", "),
                           list.size() > kShown ? fmt::format(" … ({} names)", list.size()) : std::string());
    };
    bool legacy = false;
    for (const auto& [files, list] : grouped(view.conflicts)) {
        note(r, "defined in {}: {}; the CDI cache drops them (\"conflicting device\"), so a container asking for "
                "one fails to start",
             fmt::join(files, " and "), names(list));
        for (const auto& f : files) legacy |= fs::path(f).filename() == "kgpu-nvidia-gpu.yaml";
    }
    for (const auto& [files, list] : grouped(view.overridden))
        note(r, "defined in {}: {}; the last one is used (a higher-priority directory), the other is dead weight",
             fmt::join(files, " and "), names(list));
    for (const auto& [path, why] : view.errors) note(r, "not loaded by the CDI cache: {}", why);
    if (!view.conflicts.empty()) {
        set(r, Status::fail,
            std::string("Keep each CDI device name in one spec per directory: delete or regenerate the stale spec "
                        "(`nvidia-ctk cdi list` shows what resolves).") +
                (legacy ? " kgpu-nvidia-gpu.yaml was written by an older kgpu device plugin: delete it (the plugin "
                          "now writes k8s.device-plugin.nvidia.com-gpu.json, whose names cannot collide)."
                        : ""));
        return;
    }
    if (!view.overridden.empty() || !view.errors.empty())
        set(r, Status::warn,
            !view.errors.empty() ? "A spec the CDI cache cannot load gives no device: fix or delete it (the reason is "
                                   "above)."
                                 : "Delete the spec that is overridden (the /etc/cdi one, usually), so that what "
                                   "containers get is what the files seem to say.");
}

void check_toolkit(State& s, CheckResult& r) {
    if (s.containerd && s.containerd->nvidia_runtime && s.containerd->nvidia_binary.ends_with("kgpu-container-runtime")) {
        std::error_code ec;
        const bool present = fs::exists(s.host(s.containerd->nvidia_binary), ec);
        note(r, "containerd's {} runtime is kgpu's: {} ({})", s.containerd->nvidia_runtime_name, s.containerd->nvidia_binary,
             present ? "present" : "missing");
        if (!present) {
            set(r, Status::fail, "Install kgpu's runtime on the host: `kgpu runtime install`.");
            return;
        }
        // The copy runs on the loader and glibc it carries (<install-dir>/lib/<hash>, or
        // <install-dir>/lib from before versioned directories): without them every container of
        // the nvidia runtime fails to start, so say so here. The directory is the one its
        // interpreter names, whichever the last install chose.
        auto image = files::read(s.host(s.containerd->nvidia_binary));
        auto interp = image ? elf::read_interpreter(*image, s.containerd->nvidia_binary) : Result<elf::Slot>();
        if (!image || !interp) {
            note(r, "{}", !image ? image.error().message : interp.error().message);
            return;
        }
        const fs::path lib_dir = fs::path(interp->value).lexically_normal().parent_path();
        const fs::path install_lib = fs::path(s.containerd->nvidia_binary).lexically_normal().parent_path() / "lib";
        std::vector<std::string> missing;
        if (!fs::exists(s.host(interp->value), ec)) missing.push_back(interp->value);
        if (lib_dir == install_lib || lib_dir.parent_path() == install_lib)
            for (std::string_view name : elf::kCarriedLibraries)
                if (!fs::exists(s.host((lib_dir / name).string()), ec)) missing.push_back((lib_dir / name).string());
        note(r, "its program interpreter: {}{}", interp->value, missing.empty() ? " (present, with the glibc it carries)" : "");
        if (!missing.empty()) {
            note(r, "missing: {}", fmt::join(missing, ", "));
            set(r, Status::fail, "kgpu's runtime cannot start (every container of the nvidia runtime fails): the loader or "
                                 "glibc it carries is missing. Run `kgpu runtime install` again.");
        }
        return;
    }
    const std::vector<std::string> dirs = {"/usr/bin", "/usr/local/bin", "/usr/local/nvidia/toolkit", "/bin"};
    bool any = false;
    for (const char* b : {"nvidia-container-runtime", "nvidia-container-runtime-hook", "nvidia-ctk", "nvidia-container-cli"}) {
        auto p = find_binary(s.root, b, dirs);
        note(r, "{}: {}", b, p ? p->string() : "not found");
        any |= p.has_value() && std::string_view(b) != "nvidia-ctk";
    }
    if (any) return;
    if (s.containerd && s.containerd->cdi_enabled && !s.containerd->nvidia_runtime) {
        note(r, "containerd injects GPUs through CDI; the toolkit's runtime is not needed");
        return;
    }
    set(r, Status::fail, "Install the NVIDIA container toolkit (apt-get install -y nvidia-container-toolkit), then "
                         "`nvidia-ctk runtime configure --runtime=containerd` and `systemctl restart containerd`.");
}

// ---- device plugin, kubelet ----------------------------------------------------------------

// The device plugin's config file, as strictly as `kgpu device-plugin --check-config`: the plugin
// itself serves with unknown keys (warning once each, as NVIDIA's parser ignores them), so a
// misspelt key whose setting silently does not apply is found here. Flags are not known here;
// the environment is this process's (run in the plugin's container, the plugin's own).
void check_dp_config(State& s, CheckResult& r) {
    if (s.opt.config_file.empty()) {
        note(r, "no --config-file (or CONFIG_FILE) given");
        set(r, Status::skipped);
        return;
    }
    auto file = deviceplugin::load_config_file(s.opt.config_file);
    if (!file) {
        note(r, "{}", file.error().message);
        set(r, Status::fail, "The device plugin refuses this file (exit 2, or it keeps the running config on "
                             "SIGHUP): fix the line named above; `kgpu device-plugin --check-config --config-file "
                             "<file>` checks it.");
        return;
    }
    for (const auto& k : file->unknown_keys) note(r, "{}", deviceplugin::unknown_key_error(k));
    auto env = deviceplugin::from_env([](const char* n) { return std::getenv(n); });
    auto resolved =
        env ? deviceplugin::resolve(*file, *env, {}) : Result<deviceplugin::Config>(std::unexpected(env.error()));
    if (!resolved) {
        note(r, "{}", resolved.error().message);
        set(r, Status::fail, "The device plugin refuses this configuration at start: fix what is named above.");
        return;
    }
    for (const auto& w : resolved->warnings) note(r, "note: {}", w);
    if (!file->unknown_keys.empty()) {
        set(r, Status::fail,
            fmt::format("{} unknown key(s): the device plugin ignores them (as NVIDIA's does), so their settings do "
                        "not apply. Fix the spelling (the keys allowed there are listed above).",
                        file->unknown_keys.size()));
        return;
    }
    note(r, "{}: valid", s.opt.config_file);
}

void check_dp_dir(State& s, CheckResult& r) {
    auto dir = s.host(s.opt.device_plugin_dir);
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
        note(r, "{}: missing", dir.string());
        set(r, Status::fail, "Is the kubelet running on this node (`systemctl status kubelet`)? In a pod, mount the "
                             "hostPath /var/lib/kubelet/device-plugins.");
        return;
    }
    note(r, "{}: present", dir.string());
}

void check_kubelet_socket(State& s, CheckResult& r) {
    auto p = s.host(fs::path(s.opt.device_plugin_dir) / "kubelet.sock");
    auto st = probe_unix_socket(p);
    if (st) {
        note(r, "{}: accepts connections", p.string());
        return;
    }
    note(r, "{}", st.error().message);
    set(r, Status::fail, "Plugins register on kubelet.sock (\"Unable to connect to kubelet\"): start or restart the "
                         "kubelet (`systemctl restart kubelet`) and check the device plugin mounts this directory.");
}

void check_plugin_socket(State& s, CheckResult& r) {
    auto dir = s.host(s.opt.device_plugin_dir);
    std::error_code ec;
    std::vector<fs::path> socks;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        std::string n = e.path().filename().string();
        if (n == "kubelet.sock" || !n.ends_with(".sock")) continue;
        socks.push_back(e.path());
    }
    std::sort(socks.begin(), socks.end());
    bool answered = false, connected = false;
    for (const auto& p : socks) {
        auto st = probe_unix_socket(p);
        if (!st) {
            note(r, "{}", st.error().message);
            continue;
        }
        connected = true;
        auto grpc = probe_device_plugin(p);
        note(r, "{}", grpc ? *grpc : grpc.error().message);
        answered |= grpc.has_value();
    }
    if (socks.empty())
        set(r, Status::fail, "No device plugin socket next to kubelet.sock, so the node shows no nvidia.com/gpu: deploy "
                             "the device plugin DaemonSet and read its log (`kubectl -n kube-system logs <pod>`: \"Failed "
                             "to initialize NVML\", \"No devices found\"); consider --fail-on-init-error=false.");
    else if (!answered && !connected)
        set(r, Status::fail, "The plugin socket is stale (nobody listens): restart the device plugin pod; if the kubelet "
                             "restarted, the plugin must re-register.");
    else if (!answered)
        set(r, Status::fail, "Something listens on the plugin socket but does not answer the device-plugin API: "
                             "restart the device plugin pod and read its log.");
}

// Plugin sockets next to kubelet.sock, with the resource each one serves where its name says it:
// kgpu's `kgpu-<resource with / and . as ->.sock`, NVIDIA's `nvidia-<name>.sock` for
// `nvidia.com/<name>`. Sockets named otherwise have no key.
struct PluginSocket {
    fs::path path;
    std::string key;       // the resource name with / and . replaced by - ("" when unknown)
    std::string resource;  // the resource name as far as the file name tells it
    bool kgpu = false;
    bool live = false;     // accepts connections
};

std::string resource_key(std::string_view resource) {
    std::string k(resource);
    for (char& c : k)
        if (c == '/' || c == '.') c = '-';
    return k;
}

std::vector<PluginSocket> plugin_sockets(const State& s) {
    std::vector<PluginSocket> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(s.host(s.opt.device_plugin_dir), ec)) {
        const std::string n = e.path().filename().string();
        if (n == "kubelet.sock" || !n.ends_with(".sock")) continue;
        PluginSocket p;
        p.path = e.path();
        const std::string stem = n.substr(0, n.size() - 5);
        if (stem.starts_with("kgpu-")) {
            p.kgpu = true;
            p.key = stem.substr(5);
            p.resource = p.key.starts_with("nvidia-com-") ? "nvidia.com/" + p.key.substr(11) : p.key;
        } else if (stem.starts_with("nvidia-")) {
            p.resource = "nvidia.com/" + stem.substr(7);
            p.key = resource_key(p.resource);
        }
        p.live = probe_unix_socket(p.path).has_value();
        out.push_back(std::move(p));
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
    return out;
}

// Two plugins for one resource: the kubelet (v1.26) keeps one client per resource name, the one
// registered last, and drops it when either plugin's stream ends (issue #12).
void check_one_plugin_per_resource(State& s, CheckResult& r) {
    std::map<std::string, std::vector<const PluginSocket*>> by_key;
    const auto socks = plugin_sockets(s);
    for (const auto& p : socks)
        if (p.live && !p.key.empty()) by_key[p.key].push_back(&p);
    bool twice = false;
    for (const auto& [key, ps] : by_key) {
        std::string name = ps.front()->resource, paths;
        for (const auto* p : ps) {
            if (!p->kgpu) name = p->resource;  // NVIDIA's file name spells the resource exactly
            paths += (paths.empty() ? "" : ", ") + p->path.string();
        }
        if (ps.size() > 1) {
            twice = true;
            note(r, "{} is served by {} plugin sockets: {}", name, ps.size(), paths);
        } else {
            note(r, "{}: {}", name, paths);
        }
    }
    for (const auto& p : socks)
        if (p.live && p.key.empty()) note(r, "{}: resource not known from the file name", p.path.string());
    if (by_key.empty()) note(r, "no live plugin socket named after a resource (kgpu-*.sock, nvidia-*.sock)");
    if (twice)
        set(r, Status::warn, "Run one device plugin per resource: the kubelet keeps only the registration made last "
                             "and drops the resource (allocatable 0) when either plugin's stream ends. Delete the other "
                             "plugin's DaemonSet (e.g. `kubectl -n kube-system delete daemonset "
                             "nvidia-device-plugin-daemonset`); see docs/migration.md.");
}

// What the kubelet counts as allocatable (PodResources GetAllocatableResources) against the
// healthy devices kgpu's own sockets list: allocatable 0 while kgpu serves healthy devices means
// the kubelet dropped kgpu's registration.
void check_allocatable(State& s, CheckResult& r) {
    std::vector<PluginSocket> ours;
    for (auto& p : plugin_sockets(s))
        if (p.kgpu && p.live) ours.push_back(std::move(p));
    if (ours.empty()) {
        note(r, "no live kgpu plugin socket (kgpu-*.sock): nothing to compare");
        return;
    }
    const auto pr = s.host(s.opt.pod_resources_socket);
    auto alloc = probe_allocatable(pr);
    if (!alloc) {
        note(r, "{}", alloc.error().message);
        if (alloc.error().code == Code::not_supported)
            note(r, "this kubelet does not offer GetAllocatableResources (v1.23+ with the "
                    "KubeletPodResourcesGetAllocatable gate, on by default): not compared");
        else
            note(r, "not compared (see kubelet.pod_resources)");
        return;
    }
    for (const auto& p : ours) {
        auto list = probe_device_list(p.path);
        if (!list) {
            note(r, "{}", list.error().message);
            set(r, Status::warn, fmt::format("{} sends no device list: restart the kgpu pod and read its log.",
                                             p.path.string()));
            continue;
        }
        std::set<std::string> healthy, allocatable;
        for (const auto& [id, health] : *list)
            if (health == "Healthy") healthy.insert(id);
        std::string name = p.resource;
        for (const auto& [rn, ids] : *alloc) {
            if (resource_key(rn) != p.key) continue;
            name = rn;
            allocatable.insert(ids.begin(), ids.end());
        }
        if (allocatable == healthy) {
            note(r, "{}: the kubelet's {} allocatable = the {} healthy device(s) kgpu serves on {}", name,
                 allocatable.size(), healthy.size(), p.path.string());
            continue;
        }
        if (allocatable.empty()) {
            note(r, "{}: kgpu serves {} healthy device(s) on {}, the kubelet has 0 allocatable", name, healthy.size(),
                 p.path.string());
            set(r, Status::fail,
                fmt::format("The kubelet dropped kgpu's registration of {} (another plugin for it stopped, or kgpu "
                            "did not register again after a kubelet restart): every new pod asking for it fails. "
                            "Restart the kgpu pod (`kubectl -n <namespace> delete pod <kgpu pod on this node>`), "
                            "remove any other plugin for {} (deviceplugin.one_plugin_per_resource), and read kgpu's "
                            "log for \"registered\".",
                            name, name));
            continue;
        }
        std::vector<std::string> foreign;
        for (const auto& id : allocatable)
            if (!healthy.contains(id)) foreign.push_back(id);
        note(r, "{}: the kubelet has {} allocatable, kgpu serves {} healthy on {}{}", name, allocatable.size(),
             healthy.size(), p.path.string(),
             foreign.empty() ? std::string() : fmt::format("; not kgpu's: {}", fmt::join(foreign, ", ")));
        set(r, Status::warn,
            fmt::format("The kubelet's allocatable {} differs from what kgpu serves: another plugin registered it "
                        "after kgpu (deviceplugin.one_plugin_per_resource), or a health change is on its way (run "
                        "kgpu doctor again).",
                        name));
    }
}

void check_pod_resources(State& s, CheckResult& r) {
    auto p = s.host(s.opt.pod_resources_socket);
    auto st = probe_unix_socket(p);
    if (st) {
        auto list = probe_pod_resources(p);
        if (list) {
            note(r, "{}: List answered: {} pod(s), {} container(s) holding nvidia.com devices", p.string(), list->pods,
                 list->gpu_containers);
            return;
        }
        note(r, "{}", list.error().message);
        set(r, Status::warn, "The PodResources socket does not answer List, so GPU metrics cannot name pods: check the "
                             "kubelet version (>= 1.15) and that the socket mounted into the exporter is the kubelet's.");
        return;
    }
    note(r, "{}", st.error().message);
    set(r, Status::warn, "Without the PodResources socket GPU metrics cannot name pods: run a kubelet >= 1.15 and "
                         "mount /var/lib/kubelet/pod-resources into the exporter.");
}


void check_api(State& s, CheckResult& r) {
    auto getenv = [](const char* n) { return std::getenv(n); };
    const char* env = std::getenv("KUBECONFIG");
    const bool configured = s.opt.kubeconfig || (env && *env) || std::getenv("KUBERNETES_SERVICE_HOST");
    if (!configured) {
        set(r, Status::skipped);
        note(r, "no API server configured (--kubeconfig, $KUBECONFIG, or a pod's KUBERNETES_SERVICE_HOST): kgpu's node "
                "Events, per-node configs and --write-node-labels are off; nothing else needs the API server");
        return;
    }
    auto config = kube::resolve_config(s.opt.kubeconfig, getenv);
    if (!config) {
        note(r, "{}", config.error().message);
        // In a pod without a token (automountServiceAccountToken: false, the chart's
        // rbac.create=false) kgpu runs without API access on purpose: said, not failed.
        const bool in_pod_without_token = !s.opt.kubeconfig && !(env && *env) && config.error().code == Code::not_found;
        if (in_pod_without_token) {
            set(r, Status::skipped);
            note(r, "this pod has no service-account token: kgpu's node Events, per-node configs and "
                    "--write-node-labels are off");
        } else {
            set(r, Status::fail, "fix the kubeconfig, or the pod's service-account mount (automountServiceAccountToken)");
        }
        return;
    }
    note(r, "API server {} ({})", config->server, config->source);
    auto client = std::make_shared<kube::Client>(std::move(*config), std::chrono::seconds(5));
    const std::string server = client->config().server;
    check_kube_api(
        [client](std::string_view m, std::string_view p, std::string_view b, std::string_view t) {
            return client->request(m, p, b, t.empty() ? std::string_view("application/json") : t);
        },
        server, s.opt.node_name, r);
}

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
        {"nvml.devices", Layer::hardware, "the driver reports GPUs", {"nvml.init"}, check_nvml_devices},
        {"nvml.gpu_reachable", Layer::hardware, "every GPU answers (not lost)", nvml_dev, check_gpu_reachable},
        {"driver.device_nodes", Layer::driver, "/dev/nvidia* present with sane modes", {"driver.modules"},
         check_device_nodes},
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
         check_cdi_spec},
        {"runtime.cdi_names", Layer::runtime, "no CDI device name defined twice in /etc/cdi, /var/run/cdi", {},
         check_cdi_names},
        {"runtime.toolkit", Layer::runtime, "NVIDIA container toolkit binaries", {}, check_toolkit},
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

}  // namespace

std::vector<std::string> check_ids() {
    std::vector<std::string> out;
    for (const auto& c : registry()) out.push_back(c.id);
    return out;
}

Report run(const Options& options) {
    State s{options, options.root.empty() ? fs::path("/") : options.root, {}, {}, {}, {}, {}, false, {}, {}, {}};
    Report report;
    for (const auto& c : registry()) {
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
            c.run(s, r);
        }
        report.checks.push_back(std::move(r));
    }
    return report;
}

}  // namespace kgpu::doctor
