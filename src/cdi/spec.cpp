#include "cdi/spec.h"

#include <sys/utsname.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "cdi/driver_files.h"
#include "cdi/graphics.h"
#include "common/files.h"
#include "common/json.h"
#include "common/log.h"
#include "common/pci.h"
#include "common/strings.h"

namespace kgpu::cdi {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// Control nodes every CUDA container needs, when present on the host (nvidia-ctk's order).
const char* const kControlNodes[] = {"/dev/nvidia-modeset", "/dev/nvidia-uvm-tools", "/dev/nvidia-uvm", "/dev/nvidiactl"};

// Mount options of files, and of IPC sockets (written to, so not read-only; never executed).
const std::vector<std::string> kFileOptions = {"ro", "nosuid", "nodev", "rbind", "rprivate"};
const std::vector<std::string> kIpcOptions = {"nosuid", "nodev", "rbind", "rprivate", "noexec"};

ojson node_json(const DeviceNode& n) {
    ojson j;
    j["path"] = n.path;
    if (n.host_path != n.path) j["hostPath"] = n.host_path;
    if (n.major && n.minor) {
        j["type"] = "c";  // kgpu's addition; nvidia-ctk leaves the type to the runtime
        j["major"] = *n.major;
        j["minor"] = *n.minor;
        if (n.file_mode && *n.file_mode != 0) j["fileMode"] = *n.file_mode;
        j["permissions"] = "rwm";
        if (n.gid) j["gid"] = *n.gid;
    }
    return j;
}

ojson mount_json(const HostFile& f, const std::vector<std::string>& options) {
    ojson j;
    j["hostPath"] = f.host_path;
    j["containerPath"] = f.path;
    j["options"] = options;
    return j;
}

// One set of container edits, in CDI's field order.
struct Edits {
    std::vector<std::string> env;
    std::vector<ojson> nodes;
    std::vector<ojson> hooks;
    std::vector<ojson> mounts;
    std::vector<unsigned> gids;

    void add_node(const DeviceNode& n) {
        nodes.push_back(node_json(n));
        // The group of a node the container's user could not open otherwise.
        if (n.gid && n.file_mode && !((*n.file_mode & 04) && (*n.file_mode & 02))) gids.push_back(*n.gid);
    }
    void add_hook(const std::optional<ojson>& h) {
        if (h) hooks.push_back(*h);
    }
    void append(const Edits& o) {
        env.insert(env.end(), o.env.begin(), o.env.end());
        nodes.insert(nodes.end(), o.nodes.begin(), o.nodes.end());
        hooks.insert(hooks.end(), o.hooks.begin(), o.hooks.end());
        mounts.insert(mounts.end(), o.mounts.begin(), o.mounts.end());
        gids.insert(gids.end(), o.gids.begin(), o.gids.end());
    }
    bool empty() const { return env.empty() && nodes.empty() && hooks.empty() && mounts.empty(); }

    template <class T, class Key>
    static void dedupe_by(std::vector<T>& v, Key key) {
        std::set<std::string> seen;
        std::vector<T> out;
        for (auto& e : v)
            if (seen.insert(key(e)).second) out.push_back(std::move(e));
        v = std::move(out);
    }
    void dedupe() {
        dedupe_by(env, [](const std::string& s) { return s; });
        auto dump = [](const ojson& j) { return kgpu::json::dump_text(j); };  // a key only: never throws
        dedupe_by(nodes, dump);
        dedupe_by(hooks, dump);
        dedupe_by(mounts, dump);
        std::sort(gids.begin(), gids.end());
        gids.erase(std::unique(gids.begin(), gids.end()), gids.end());
    }
    // Drops what `common` already has; kept as it is when nothing would be left (a device
    // needs edits).
    void remove(const Edits& common) {
        Edits out = *this;
        auto drop = [](auto& v, const auto& c, auto key) {
            std::set<std::string> ids;
            for (const auto& e : c) ids.insert(key(e));
            std::erase_if(v, [&](const auto& e) { return ids.contains(key(e)); });
        };
        auto dump = [](const ojson& j) { return kgpu::json::dump_text(j); };
        drop(out.env, common.env, [](const std::string& s) { return s; });
        drop(out.nodes, common.nodes, dump);
        drop(out.hooks, common.hooks, dump);
        drop(out.mounts, common.mounts, dump);
        if (!out.empty()) *this = std::move(out);
    }
    // Device nodes and mounts by depth, then path (nvidia-ctk's sorter).
    void sort() {
        auto depth = [](const std::string& p) { return std::count(p.begin(), p.end(), '/'); };
        auto by = [&](const char* field) {
            return [field, &depth](const ojson& a, const ojson& b) {
                const std::string pa = fs::path(a[field].get<std::string>()).lexically_normal().string();
                const std::string pb = fs::path(b[field].get<std::string>()).lexically_normal().string();
                if (depth(pa) != depth(pb)) return depth(pa) < depth(pb);
                return pa < pb;
            };
        };
        std::stable_sort(nodes.begin(), nodes.end(), by("path"));
        std::stable_sort(mounts.begin(), mounts.end(), by("containerPath"));
    }
    ojson to_json() const {
        ojson j = ojson::object();
        if (!env.empty()) j["env"] = env;
        if (!nodes.empty()) j["deviceNodes"] = nodes;
        if (!hooks.empty()) j["hooks"] = hooks;
        if (!mounts.empty()) j["mounts"] = mounts;
        if (!gids.empty()) j["additionalGids"] = gids;
        return j;
    }
};

struct Device {
    std::string name;
    Edits edits;
};

// A node the device needs; when it is missing on the host it is still listed (the runtime then
// fails the container with the path) and a warning says so.
DeviceNode required_node(const fs::path& dev_root, const std::string& path, std::set<std::string>& warned) {
    if (auto n = find_device_node(dev_root, path)) return *n;
    if (warned.insert(path).second) log::warn("cdi: device node {} not found under {}", path, dev_root.string());
    return DeviceNode{path, files::under_root(dev_root, path).string(), std::nullopt, std::nullopt, std::nullopt, std::nullopt};
}

// /dev/dri/by-path links of a GPU whose targets are among `nodes` (nvidia-ctk's byPathHookDiscoverer).
std::vector<std::string> by_path_links(const fs::path& dev_root, const std::string& bus_id, const Edits& e) {
    std::set<std::string> selected;
    for (const auto& n : e.nodes) selected.insert(n.value("hostPath", n["path"].get<std::string>()));
    std::vector<std::string> links;
    for (const char* kind : {"card", "render"}) {
        const std::string in_container = "/dev/dri/by-path/pci-" + bus_id + "-" + kind;
        const fs::path link = files::under_root(dev_root, in_container);
        std::error_code ec;
        const fs::path target = fs::read_symlink(link, ec);
        if (ec) continue;
        const fs::path node = target.is_absolute() ? target : (link.parent_path() / target).lexically_normal();
        if (!selected.contains(node.string())) continue;
        // The link is made in the container, at its path there (nvidia-ctk v1.20 writes the host
        // path, dev root included, which only agrees with this when the dev root is /).
        links.push_back(target.string() + "::" + in_container);
    }
    return links;
}

// chmod 755 of the device folders a rootless crun needs (off unless the chmod hook is enabled).
void add_folder_permission_hook(const HookCreator& hooks, Edits& e) {
    std::vector<std::string> folders;
    for (const auto& n : e.nodes) {
        const std::string dir = fs::path(n["path"].get<std::string>()).parent_path().string();
        if ((dir == "/dev/dri" || dir == "/dev/nvidia-caps") &&
            std::find(folders.begin(), folders.end(), dir) == folders.end())
            folders.push_back(dir);
    }
    e.add_hook(hooks.create(kChmod, folders));
}

Edits gpu_edits(const inventory::Gpu& g, const fs::path& dev_root, const fs::path& sysfs_root, const HookCreator& hooks,
                std::set<std::string>& warned) {
    Edits e;
    e.add_node(required_node(dev_root, fmt::format("/dev/nvidia{}", g.minor), warned));
    // sysfs's name of the GPU ("0000:3b:00.0"; NVML gives "00000000:3B:00.0"); none: no DRM nodes.
    const std::string bus = pci::sysfs_address(g.pci_bus_id);
    if (!bus.empty())
        for (const auto& drm : drm_nodes(sysfs_root, bus))
            if (auto n = find_device_node(dev_root, drm)) e.add_node(*n);
    e.add_hook(hooks.create(kCreateSymlinks, bus.empty() ? std::vector<std::string>{} : by_path_links(dev_root, bus, e)));
    add_folder_permission_hook(hooks, e);
    return e;
}

// Whether a mount is of a library ("lib?*.so" or "lib?*.so.<more>"; nvidia-ctk's isLibName).
bool is_library(const std::string& path) {
    const std::string base = fs::path(path).filename().string();
    if (!base.starts_with("lib") || base.size() < 7) return false;
    const auto so = base.find(".so", 4);
    if (so == std::string::npos) return false;
    const std::string rest = base.substr(base.rfind(".so") + 3);
    return rest.empty() || rest.front() == '.';
}

std::string kernel_release(const SpecOptions& o) {
    if (!o.kernel_release.empty()) return o.kernel_release;
    struct utsname u {};
    return ::uname(&u) == 0 ? std::string(u.release) : std::string();
}

// The spec-wide edits: control nodes, driver libraries with their hooks and env, IPC sockets,
// firmware, binaries, the application-profile hook (nvidia-ctk's common NVML discoverer).
Result<Edits> common_edits(const inventory::Node& node, const SpecOptions& o, const fs::path& dev_root,
                           const HookCreator& hooks) {
    Edits e;
    for (const char* path : kControlNodes)
        if (auto n = find_device_node(dev_root, path)) e.add_node(*n);

    LibraryLocator locator(o.driver_root, o.library_search_paths);
    const auto libs = find_driver_libraries(locator, node.driver_version);
    if (libs.libraries.empty()) {
        std::string searched;
        for (const auto& d : libs.searched) searched += (searched.empty() ? "" : ", ") + d;
        if (!o.allow_missing_libraries)
            return fail(Code::not_found,
                        "no driver libraries lib*.so.{} found under driver root {} (searched {}); a spec without them "
                        "gives containers GPUs but no CUDA. Point --driver-root at the driver's files, or pass "
                        "--allow-missing-libraries to write it anyway",
                        node.driver_version, o.driver_root.string(), searched);
        log::warn("cdi: no driver libraries lib*.so.{} found under {} (searched {}): the spec has no driver mounts or hooks",
                  node.driver_version, o.driver_root.string(), searched);
    } else {
        // Graphics files first (nvidia-ctk merges them before the driver's): their links get a
        // create-symlinks hook of their own, ahead of the driver libraries' one.
        const auto graphics = find_graphics_files(locator, node.driver_version, libs.dirs, o.config_search_paths);
        e.add_hook(hooks.create(kCreateSymlinks, graphics.links));
        for (const auto& f : graphics.mounts) e.mounts.push_back(mount_json(f, kFileOptions));
        std::vector<std::string> links;
        for (const auto& lib : libs.libraries)
            for (auto& l : library_links(lib))
                if (std::find(links.begin(), links.end(), l) == links.end()) links.push_back(std::move(l));
        e.add_hook(hooks.create(kCreateSymlinks, links));
        if (node.driver_version.find('*') == std::string::npos)
            e.add_hook(hooks.create(kEnableCudaCompat, {"--host-driver-version=" + node.driver_version}));
        std::vector<std::string> folders;
        for (const auto& lib : libs.libraries) {
            if (!is_library(lib.path)) continue;
            const std::string dir = fs::path(lib.path).parent_path().string();
            if (std::find(folders.begin(), folders.end(), dir) == folders.end()) folders.push_back(dir);
        }
        if (!folders.empty()) e.add_hook(hooks.create(kUpdateLdcache, folders));
        e.add_hook(hooks.create(kDisableDeviceNodeModification));
        std::string dirs;
        for (const auto& d : libs.dirs) dirs += (dirs.empty() ? "" : ":") + d;
        e.env.push_back("NVIDIA_CTK_LIBCUDA_DIR=" + dirs);
        for (const auto& lib : libs.libraries) e.mounts.push_back(mount_json(lib, kFileOptions));
    }
    for (const auto& s : find_ipc_sockets(o.driver_root)) e.mounts.push_back(mount_json(s, kIpcOptions));
    std::string custom_firmware;
    if (auto p = files::read_line(o.sysfs_root / "module/firmware_class/parameters/path")) custom_firmware = *p;
    for (const auto& f : find_firmware(o.driver_root, node.driver_version, kernel_release(o), custom_firmware))
        e.mounts.push_back(mount_json(f, kFileOptions));
    for (const auto& b : find_binaries(o.driver_root)) e.mounts.push_back(mount_json(b, kFileOptions));
    e.add_hook(hooks.create(kUpdateApplicationProfile));
    e.env.push_back("NVIDIA_VISIBLE_DEVICES=void");
    return e;
}

bool is_index(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// The devices of the nvml mode, in the order nvidia-ctk visits them.
Result<std::vector<Device>> gpu_devices(const inventory::Node& node, const SpecOptions& o, const fs::path& dev_root,
                                        const HookCreator& hooks) {
    struct Pick {
        const inventory::Gpu* gpu;
        const inventory::MigDevice* mig;
    };
    std::vector<Pick> picks;
    const bool all = std::find(o.device_ids.begin(), o.device_ids.end(), "all") != o.device_ids.end();
    if (all) {
        for (const auto& g : node.gpus) {
            if (g.lost || g.uuid.empty()) {
                log::warn("cdi: GPU {} left out of the spec: {}", g.index, g.error.empty() ? "unreadable" : g.error);
                continue;
            }
            if (g.mig_mode != inventory::MigMode::enabled) picks.push_back({&g, nullptr});
        }
        for (const auto& g : node.gpus) {
            if (g.lost || g.uuid.empty()) continue;
            for (const auto& m : g.mig_devices) picks.push_back({&g, &m});
        }
    } else {
        for (const auto& id : o.device_ids) {
            std::optional<Pick> found;
            for (const auto& g : node.gpus) {
                if ((is_index(id) && id == std::to_string(g.index)) || id == g.uuid) found = Pick{&g, nullptr};
                for (const auto& m : g.mig_devices)
                    if (id == m.uuid || id == fmt::format("{}:{}", g.index, m.index)) found = Pick{&g, &m};
            }
            if (!found) return fail(Code::not_found, "--device-id '{}' names no GPU or MIG device on this node", id);
            if (found->gpu->lost) return fail(Code::not_found, "--device-id '{}': GPU {} is lost", id, found->gpu->index);
            picks.push_back(*found);
        }
    }
    std::map<std::string, unsigned> caps;
    bool any_mig = false;
    for (const auto& p : picks) any_mig = any_mig || p.mig;
    if (any_mig) {
        auto minors = read_mig_minors(o.proc_root);
        if (!minors) return std::unexpected(minors.error());
        caps = std::move(*minors);
    }
    std::set<std::string> warned;
    std::vector<Device> out;
    for (const auto& p : picks) {
        const auto& g = *p.gpu;
        Edits e;
        std::vector<std::string> names;
        if (!p.mig) {
            e = gpu_edits(g, dev_root, o.sysfs_root, hooks, warned);
            for (auto s : o.strategies) names.push_back(device_name(s, g));
        } else {
            const auto& m = *p.mig;
            const std::string gi = fmt::format("gpu{}/gi{}/access", g.minor, m.gpu_instance_id);
            const std::string ci = fmt::format("gpu{}/gi{}/ci{}/access", g.minor, m.gpu_instance_id, m.compute_instance_id);
            auto gi_it = caps.find(gi);
            auto ci_it = caps.find(ci);
            if (gi_it == caps.end() || ci_it == caps.end())
                return fail(Code::not_found, "{}: no minor for {} (MIG device {}:{} {})",
                            (o.proc_root / "driver/nvidia-caps/mig-minors").string(), gi_it == caps.end() ? gi : ci,
                            g.index, m.index, m.uuid);
            e.add_node(required_node(dev_root, fmt::format("/dev/nvidia{}", g.minor), warned));
            e.add_node(required_node(dev_root, fmt::format("/dev/nvidia-caps/nvidia-cap{}", gi_it->second), warned));
            e.add_node(required_node(dev_root, fmt::format("/dev/nvidia-caps/nvidia-cap{}", ci_it->second), warned));
            for (auto s : o.strategies) names.push_back(device_name(s, g, m));
        }
        for (const auto& n : names) out.push_back({n, e});
    }
    return out;
}

// IMEX mode: a device per channel node that o.device_ids selects ("all", "<n>" or "channel<n>").
Result<std::vector<Device>> imex_devices(const SpecOptions& o, const fs::path& dev_root) {
    const auto channels = find_imex_channels(dev_root);
    if (channels.empty())
        return fail(Code::not_found, "no IMEX channels under {}",
                    files::under_root(dev_root, "/dev/nvidia-caps-imex-channels").string());
    auto given = [&](const std::string& id) { return std::find(o.device_ids.begin(), o.device_ids.end(), id) != o.device_ids.end(); };
    std::vector<Device> devices;
    for (const auto& c : channels) {
        const std::string id = fs::path(c.path).filename().string().substr(7);
        if (!given("all") && !given(id) && !given("channel" + id)) continue;
        Edits e;
        e.add_node(c);
        devices.push_back({id, e});
    }
    return devices;
}

// nvidia-ctk's simplifier: deduplicate, drop from devices what the spec-wide edits have, sort.
void simplify(Edits& common, std::vector<Device>& devices) {
    common.dedupe();
    common.sort();
    for (auto& d : devices) {
        d.edits.dedupe();
        d.edits.remove(common);
        d.edits.sort();
    }
    std::stable_sort(devices.begin(), devices.end(), [](const Device& a, const Device& b) { return a.name < b.name; });
}

ojson spec_json(const std::string& kind, const std::vector<Device>& devices, const Edits& common) {
    ojson devices_json = ojson::array();
    for (const auto& d : devices) {
        ojson j;
        j["name"] = d.name;
        j["containerEdits"] = d.edits.to_json();
        devices_json.push_back(std::move(j));
    }
    ojson spec;
    spec["cdiVersion"] = "0.3.0";
    spec["kind"] = kind;
    spec["devices"] = std::move(devices_json);
    spec["containerEdits"] = common.to_json();
    spec["cdiVersion"] = minimum_version(spec);
    return spec;
}

}  // namespace

Result<ojson> generate(const inventory::Node& node, const SpecOptions& o) {
    auto kind = make_kind(o.vendor, o.device_class);
    if (!kind) return std::unexpected(kind.error());
    if (o.hooks.path.empty() || o.hooks.path.front() != '/')
        return fail(Code::invalid_argument, "--nvidia-cdi-hook-path '{}': expected an absolute path", o.hooks.path);
    const fs::path dev_root = o.dev_root.empty() ? o.driver_root : o.dev_root;
    const HookCreator hooks(o.hooks);
    const bool none = std::find(o.device_ids.begin(), o.device_ids.end(), "none") != o.device_ids.end();

    std::vector<Device> devices;
    Edits common;
    if (none) {
        // A placeholder device: CDI allows no device without edits.
        Edits e;
        e.env.push_back("NVCT_EMPTY_DEVICE=");
        devices.push_back({"none", e});
    }
    if (o.mode == Mode::imex) {
        if (!none) {
            auto channels = imex_devices(o, dev_root);
            if (!channels) return std::unexpected(channels.error());
            devices = std::move(*channels);
        }
        common.env.push_back("NVIDIA_VISIBLE_DEVICES=void");
    } else {
        if (!none) {
            auto gpus = gpu_devices(node, o, dev_root, hooks);
            if (!gpus) return std::unexpected(gpus.error());
            devices = std::move(*gpus);
        }
        if (devices.empty())
            return fail(Code::not_found,
                        "no devices to describe: the node reports {} GPU(s) and none is readable (a CDI spec needs at "
                        "least one device)",
                        node.gpus.size());
        auto c = common_edits(node, o, dev_root, hooks);
        if (!c) return std::unexpected(c.error());
        common = std::move(*c);
    }
    if (devices.empty())
        return fail(Code::not_found,
                    "no devices to describe: the node reports {} GPU(s) and none is readable (a CDI spec needs at least "
                    "one device)",
                    node.gpus.size());

    // nvidia-ctk's simplifier; then the merged `all` device and the same again.
    simplify(common, devices);
    const bool has_all = std::any_of(devices.begin(), devices.end(), [](const Device& d) { return d.name == "all"; });
    if (o.all_device && !none && !has_all) {
        Device all{"all", {}};
        for (const auto& d : devices) all.edits.append(d.edits);
        devices.push_back(std::move(all));
        simplify(common, devices);
    }

    return spec_json(*kind, devices, common);
}

}  // namespace kgpu::cdi
