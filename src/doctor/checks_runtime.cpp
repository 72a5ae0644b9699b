// kgpu doctor: the container runtime: containerd, CDI specs, the container toolkit (checks.h).
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

#include "cdi/cache.h"
#include "cdi/driver_files.h"
#include "cdi/spec.h"
#include "common/files.h"
#include "toolkit/install.h"

namespace kgpu::doctor::checks {

// ---- runtime --------------------------------------------------------------------------------

void check_containerd(State& s, CheckResult& r) {
    fs::path cfg = s.opt.containerd_config;
    auto c = runtime::read_containerd_settings(s.root, cfg);
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
    s.containerd.set() = *c;
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

namespace {
// A spec generated before a driver upgrade names the old driver's libraries, and every
// container that uses it fails to start: compare its versioned libraries with the loaded driver.
void check_spec_driver(State& s, CheckResult& r, const std::string& path) {
    const auto& node = s.node.get();
    std::string loaded = node ? node->driver_version : std::string();
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
}  // namespace

void check_cdi_spec(State& s, CheckResult& r) {
    if (!s.containerd.get()->cdi_enabled) {
        note(r, "CDI is not enabled in containerd; the nvidia runtime injects the GPUs");
        set(r, Status::skipped);
        return;
    }
    std::vector<std::string> specs;
    for (const char* d : {"/etc/cdi", "/var/run/cdi"}) {
        auto listed = files::entries(s.host(d));
        if (!listed) {
            // A node has one of the two folders, or neither: an absent one is no finding.
            if (listed.error().code == Code::not_found) note(r, "{}: absent", s.host(d).string());
            else note(r, "{}", listed.error().message);
            continue;
        }
        for (const auto& e : *listed) {
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
    const auto& containerd = s.containerd.get();
    if (containerd && containerd->nvidia_runtime && containerd->nvidia_binary.ends_with("kgpu-container-runtime")) {
        std::error_code ec;
        const bool present = fs::exists(s.host(containerd->nvidia_binary), ec);
        note(r, "containerd's {} runtime is kgpu's: {} ({})", containerd->nvidia_runtime_name, containerd->nvidia_binary,
             present ? "present" : "missing");
        if (!present) {
            set(r, Status::fail, "Install kgpu's runtime on the host: `kgpu runtime install`.");
            return;
        }
        // The copy runs on the loader and glibc it carries (install.h): without them every
        // container of the nvidia runtime fails to start, so say so here.
        auto installed = toolkit::inspect_installed(s.root, containerd->nvidia_binary);
        if (!installed) {
            note(r, "{}", installed.error().message);
            return;
        }
        note(r, "its program interpreter: {}{}", installed->interpreter,
             installed->missing.empty() ? " (present, with the glibc it carries)" : "");
        if (!installed->missing.empty()) {
            note(r, "missing: {}", fmt::join(installed->missing, ", "));
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
    if (containerd && containerd->cdi_enabled && !containerd->nvidia_runtime) {
        note(r, "containerd injects GPUs through CDI; the toolkit's runtime is not needed");
        return;
    }
    set(r, Status::fail, "Install the NVIDIA container toolkit (apt-get install -y nvidia-container-toolkit), then "
                         "`nvidia-ctk runtime configure --runtime=containerd` and `systemctl restart containerd`.");
}

}  // namespace kgpu::doctor::checks
