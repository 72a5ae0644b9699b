// kgpu doctor: the node: PCI functions, the kernel log, the driver's modules, version and device nodes (checks.h).
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

#include "common/files.h"
#include "nvml/xid.h"
#include "inventory/pci.h"
#include "toolkit/devchar.h"

namespace kgpu::doctor::checks {

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
        if (inventory::is_display_class(f.class_code)) s.pci_gpus.set().push_back(f.address);
    if (s.pci_gpus.get().empty()) {
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

namespace {
// ---- driver ---------------------------------------------------------------------------------

void read_modules(State& s) {
    if (s.modules_read) return;
    s.modules_read = true;
    if (auto t = files::read(s.host("/proc/modules"))) s.modules = parse_modules(*t);
    if (auto rel = files::read_line(s.host("/proc/sys/kernel/osrelease"))) s.kernel_release = *rel;
}
}  // namespace

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
    for (const auto& e : entries_noted(s.host("/lib/modules"), r)) {
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
    std::set<std::string> gpu_nodes;
    if (const auto& node = s.node.get()) {
        for (const auto& g : node->gpus)
            if (!g.lost && !g.uuid.empty()) gpu_nodes.insert(fmt::format("/dev/nvidia{}", g.minor));
    }
    if (gpu_nodes.empty()) {
        for (const auto& e : entries_noted(s.host("/dev"), r)) {
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

}  // namespace kgpu::doctor::checks
