#include "cdi/spec.h"

#include <algorithm>
#include <cctype>
#include <set>

#include <yaml-cpp/yaml.h>

#include "cdi/driver_files.h"
#include "common/files.h"
#include "common/log.h"
#include "common/strings.h"

namespace kgpu::cdi {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// Control nodes every CUDA container needs, when present on the host.
const char* const kControlNodes[] = {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"};

ojson node_json(const DeviceNode& n) {
    ojson j;
    j["path"] = n.path;
    if (n.host_path != n.path) j["hostPath"] = n.host_path;
    if (n.major && n.minor) {
        j["type"] = "c";
        j["major"] = *n.major;
        j["minor"] = *n.minor;
    }
    return j;
}

// A node the device needs; when it is missing on the host it is still listed (the runtime then
// fails the container with the path) and a warning says so.
DeviceNode required_node(const fs::path& dev_root, const std::string& path, std::set<std::string>& warned) {
    if (auto n = find_device_node(dev_root, path)) return *n;
    if (warned.insert(path).second) log::warn("cdi: device node {} not found under {}", path, dev_root.string());
    return DeviceNode{path, files::under_root(dev_root, path).string(), std::nullopt, std::nullopt};
}

ojson mount_json(const HostFile& f, bool noexec) {
    ojson j;
    j["hostPath"] = f.host_path;
    j["containerPath"] = f.path;
    ojson options = ojson::array({"ro", "nosuid", "nodev", "rbind", "rprivate"});
    if (noexec) options.push_back("noexec");
    j["options"] = std::move(options);
    return j;
}

ojson hook_json(const SpecOptions& o, std::vector<std::string> args) {
    const std::string argv0 = fs::path(o.hook_path).filename().string();
    std::vector<std::string> argv = {argv0};
    if (argv0 == "nvidia-ctk") argv.push_back("hook");  // nvidia-ctk carries the hooks as a subcommand
    argv.insert(argv.end(), args.begin(), args.end());
    ojson j;
    j["hookName"] = "createContainer";
    j["path"] = o.hook_path;
    j["args"] = argv;
    return j;
}

void add_device(ojson& devices, const std::string& name, const std::vector<DeviceNode>& nodes) {
    ojson nodes_json = ojson::array();
    for (const auto& n : nodes) nodes_json.push_back(node_json(n));
    ojson d;
    d["name"] = name;
    d["containerEdits"]["deviceNodes"] = std::move(nodes_json);
    devices.push_back(std::move(d));
}

}  // namespace

Result<ojson> generate(const inventory::Node& node, const SpecOptions& o) {
    auto kind = make_kind(o.vendor, o.device_class);
    if (!kind) return std::unexpected(kind.error());
    if (o.hooks && (o.hook_path.empty() || o.hook_path.front() != '/'))
        return fail(Code::invalid_argument, "--hook-path '{}': expected an absolute path", o.hook_path);
    const fs::path dev_root = o.dev_root.empty() ? o.driver_root : o.dev_root;

    bool any_mig = false;
    for (const auto& g : node.gpus) any_mig = any_mig || !g.mig_devices.empty();
    std::map<std::string, unsigned> caps;
    if (any_mig) {
        auto minors = read_mig_minors(o.proc_root);
        if (!minors) return std::unexpected(minors.error());
        caps = std::move(*minors);
    }

    ojson devices = ojson::array();
    std::set<std::string> warned;
    std::vector<DeviceNode> all_nodes;
    std::set<std::string> all_paths;
    auto remember = [&](const std::vector<DeviceNode>& nodes) {
        for (const auto& n : nodes)
            if (all_paths.insert(n.path).second) all_nodes.push_back(n);
    };
    // GPUs first, then their MIG devices, each under every requested name.
    std::vector<std::pair<std::vector<std::string>, std::vector<DeviceNode>>> entries;
    for (const auto& g : node.gpus) {
        if (g.lost || g.uuid.empty()) {
            log::warn("cdi: GPU {} left out of the spec: {}", g.index, g.error.empty() ? "unreadable" : g.error);
            continue;
        }
        std::vector<DeviceNode> nodes = {required_node(dev_root, fmt::format("/dev/nvidia{}", g.minor), warned)};
        std::vector<std::string> names;
        for (auto s : o.strategies) names.push_back(device_name(s, g));
        entries.emplace_back(std::move(names), nodes);
        remember(nodes);
    }
    for (const auto& g : node.gpus) {
        if (g.lost || g.uuid.empty()) continue;
        for (const auto& m : g.mig_devices) {
            const std::string gi = fmt::format("gpu{}/gi{}/access", g.minor, m.gpu_instance_id);
            const std::string ci = fmt::format("gpu{}/gi{}/ci{}/access", g.minor, m.gpu_instance_id, m.compute_instance_id);
            auto gi_it = caps.find(gi);
            auto ci_it = caps.find(ci);
            if (gi_it == caps.end() || ci_it == caps.end())
                return fail(Code::not_found, "{}: no minor for {} (MIG device {}:{} {})",
                            (o.proc_root / "driver/nvidia-caps/mig-minors").string(),
                            gi_it == caps.end() ? gi : ci, g.index, m.index, m.uuid);
            std::vector<DeviceNode> nodes = {
                required_node(dev_root, fmt::format("/dev/nvidia{}", g.minor), warned),
                required_node(dev_root, fmt::format("/dev/nvidia-caps/nvidia-cap{}", gi_it->second), warned),
                required_node(dev_root, fmt::format("/dev/nvidia-caps/nvidia-cap{}", ci_it->second), warned),
            };
            std::vector<std::string> names;
            for (auto s : o.strategies) names.push_back(device_name(s, g, m));
            entries.emplace_back(std::move(names), nodes);
            remember(nodes);
        }
    }
    for (const auto& [names, nodes] : entries)
        for (const auto& name : names) add_device(devices, name, nodes);
    if (!all_nodes.empty()) add_device(devices, "all", all_nodes);
    if (devices.empty())
        return fail(Code::not_found, "no GPUs to describe: the node reports {} GPU(s) and none is readable (a CDI spec needs at least one device)",
                    node.gpus.size());

    ojson edits;
    edits["env"] = ojson::array({"NVIDIA_VISIBLE_DEVICES=void"});
    ojson control = ojson::array();
    for (const char* path : kControlNodes)
        if (auto n = find_device_node(dev_root, path)) control.push_back(node_json(*n));
    if (!control.empty()) edits["deviceNodes"] = std::move(control);

    const auto libs = find_libraries(o.driver_root, node.driver_version);
    if (libs.empty())
        log::warn("cdi: no driver libraries *.so.{} found under {} (looked in /usr/lib64, /usr/lib/<arch>-linux-gnu, "
                  "/lib64, /lib/<arch>-linux-gnu)",
                  node.driver_version, o.driver_root.string());
    ojson mounts = ojson::array();
    for (const auto& f : libs) mounts.push_back(mount_json(f, false));
    for (const auto& f : find_binaries(o.driver_root)) mounts.push_back(mount_json(f, false));
    if (auto sock = find_persistenced_socket(o.driver_root)) mounts.push_back(mount_json(*sock, true));
    for (const auto& f : find_firmware(o.driver_root, node.driver_version)) mounts.push_back(mount_json(f, false));
    if (!mounts.empty()) edits["mounts"] = std::move(mounts);

    if (o.hooks && !libs.empty()) {
        ojson hooks = ojson::array();
        const std::string libcuda_prefix = "libcuda.so.";
        for (const auto& f : libs) {
            const fs::path p(f.path);
            if (p.filename().string().starts_with(libcuda_prefix)) {
                hooks.push_back(hook_json(o, {"create-symlinks", "--link",
                                              fmt::format("libcuda.so.1::{}/libcuda.so", p.parent_path().string())}));
                break;
            }
        }
        std::vector<std::string> args = {"update-ldcache"};
        std::set<std::string> folders;
        for (const auto& f : libs) {
            const std::string dir = fs::path(f.path).parent_path().string();
            if (folders.insert(dir).second) {
                args.push_back("--folder");
                args.push_back(dir);
            }
        }
        hooks.push_back(hook_json(o, args));
        edits["hooks"] = std::move(hooks);
    }

    ojson spec;
    spec["cdiVersion"] = "0.3.0";
    spec["kind"] = *kind;
    spec["devices"] = std::move(devices);
    spec["containerEdits"] = std::move(edits);
    spec["cdiVersion"] = minimum_version(spec);
    return spec;
}

std::string minimum_version(const ojson& spec) {
    int minor = 3;
    auto need = [&](int m) { minor = std::max(minor, m); };
    std::vector<const ojson*> edits;
    if (spec.contains("containerEdits")) edits.push_back(&spec["containerEdits"]);
    if (spec.contains("annotations") && !spec["annotations"].empty()) need(6);
    const std::string kind = spec.value("kind", "");
    if (auto slash = kind.find('/'); slash != std::string::npos && kind.find('.', slash) != std::string::npos) need(6);
    if (spec.contains("devices")) {
        for (const auto& d : spec["devices"]) {
            const std::string name = d.value("name", "");
            if (!name.empty() && !std::isalpha(static_cast<unsigned char>(name[0]))) need(5);
            if (d.contains("annotations") && !d["annotations"].empty()) need(6);
            if (d.contains("containerEdits")) edits.push_back(&d["containerEdits"]);
        }
    }
    for (const ojson* e : edits) {
        if (e->contains("mounts"))
            for (const auto& m : (*e)["mounts"])
                if (m.contains("type")) need(4);
        if (e->contains("deviceNodes"))
            for (const auto& n : (*e)["deviceNodes"])
                if (n.contains("hostPath") && !n["hostPath"].get<std::string>().empty()) need(5);
        if (e->contains("additionalGids") && !(*e)["additionalGids"].empty()) need(7);
        if (e->contains("intelRdt")) need(7);
    }
    return fmt::format("0.{}.0", minor);
}

namespace {

// Whether YAML would read `s` as a plain string; otherwise it is written double-quoted.
bool plain_safe(const std::string& s) {
    if (s.empty()) return false;
    static const std::set<std::string> reserved = {"true", "false", "yes", "no", "on", "off", "null", "~", "y", "n"};
    if (reserved.contains(strings::lower(s))) return false;
    if (!std::isalpha(static_cast<unsigned char>(s[0])) && s[0] != '/') return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '/' || c == '-' || c == '=' || c == ',';
    });
}

void emit(YAML::Emitter& out, const ojson& j) {
    if (j.is_object()) {
        out << YAML::BeginMap;
        for (const auto& [k, v] : j.items()) {
            out << YAML::Key << k << YAML::Value;
            emit(out, v);
        }
        out << YAML::EndMap;
    } else if (j.is_array()) {
        out << YAML::BeginSeq;
        for (const auto& v : j) emit(out, v);
        out << YAML::EndSeq;
    } else if (j.is_string()) {
        const auto& s = j.get_ref<const std::string&>();
        if (plain_safe(s)) out << s;
        else out << YAML::DoubleQuoted << s;
    } else if (j.is_number_unsigned()) {
        out << j.get<std::uint64_t>();
    } else if (j.is_number_integer()) {
        out << j.get<std::int64_t>();
    } else if (j.is_boolean()) {
        out << j.get<bool>();
    } else {
        out << YAML::Null;
    }
}

}  // namespace

std::string to_yaml(const ojson& spec) {
    YAML::Emitter out;
    out.SetIndent(2);
    out << YAML::BeginDoc;
    emit(out, spec);
    std::string s = out.c_str();
    if (s.empty() || s.back() != '\n') s += '\n';
    return s;
}

std::string to_json_text(const ojson& spec) { return spec.dump(2) + "\n"; }

}  // namespace kgpu::cdi
