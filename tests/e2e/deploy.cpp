#include "deploy.h"

#include <filesystem>
#include <regex>
#include <sstream>

#include <fmt/format.h>

namespace kgpu::e2e {

namespace fs = std::filesystem;

namespace {

// YAML -> JSON with YAML 1.2's core schema for plain scalars and strings for quoted ones (yaml-cpp
// tags those "!"), so `values: ["true"]` stays a string and `port: 9400` a number.
json to_json(const YAML::Node& n) {
    switch (n.Type()) {
        case YAML::NodeType::Map: {
            json o = json::object();
            for (const auto& kv : n) o[kv.first.as<std::string>()] = to_json(kv.second);
            return o;
        }
        case YAML::NodeType::Sequence: {
            json a = json::array();
            for (const auto& e : n) a.push_back(to_json(e));
            return a;
        }
        case YAML::NodeType::Scalar: {
            const std::string s = n.Scalar();
            if (n.Tag() == "!") return s;
            static const std::regex integer(R"([-+]?[0-9]+)"), real(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
            if (s == "true" || s == "True" || s == "TRUE") return true;
            if (s == "false" || s == "False" || s == "FALSE") return false;
            if (s == "null" || s == "Null" || s == "NULL" || s == "~") return nullptr;
            if (std::regex_match(s, integer)) return std::stoll(s);
            if (std::regex_match(s, real)) return std::stod(s);
            return s;
        }
        default:
            return nullptr;
    }
}

// The simulator's own shared libraries (C++ runtime, yaml-cpp) that the real libnvidia-ml.so.1,
// which needs only glibc, does not have and kgpu's image (glibc only) therefore lacks: host path
// list from ldd, glibc's loader, libc and libm left out (the image has them).
std::vector<std::string> simulator_libraries() {
    std::vector<std::string> out;
    std::istringstream ldd(run({"/usr/bin/ldd", KGPU_SIM_LIBRARY}).out);
    for (std::string line; std::getline(ldd, line);) {
        auto arrow = line.find("=> /");
        if (arrow == std::string::npos) continue;
        const std::string path = line.substr(arrow + 3, line.find(' ', arrow + 3) - arrow - 3);
        const std::string name = fs::path(path).filename().string();
        if (name.starts_with("libc.so") || name.starts_with("libm.so") || name.starts_with("ld-linux")) continue;
        out.push_back(path);
    }
    return out;
}

// --flag=value arguments of a container, edited in place (CLI11 refuses an option given twice).
struct Args {
    std::vector<std::string> items;
    std::string get(const std::string& flag) const {
        for (size_t i = 0; i < items.size(); ++i) {
            if (items[i].starts_with(flag + "=")) return items[i].substr(flag.size() + 1);
            if (items[i] == flag && i + 1 < items.size() && !items[i + 1].starts_with("--")) return items[i + 1];
        }
        return {};
    }
    void set(const std::string& flag, const std::string& value) {
        for (size_t i = 0; i < items.size(); ++i) {
            if (items[i].starts_with(flag + "=")) {
                items[i] = flag + "=" + value;
                return;
            }
            if (items[i] == flag && i + 1 < items.size() && !items[i + 1].starts_with("--")) {
                items[i + 1] = value;
                return;
            }
        }
        items.push_back(flag + "=" + value);
    }
    void flag(const std::string& f) {
        for (const auto& a : items)
            if (a == f) return;
        items.push_back(f);
    }
};

// The propagation of the mount a host path is on ("shared", "private", "private,slave"…), from
// its nearest existing ancestor.
std::string propagation(std::string path) {
    std::error_code ec;
    while (!fs::exists(path, ec) && path != "/") path = fs::path(path).parent_path().string();
    return run({"/usr/bin/findmnt", "-n", "-o", "PROPAGATION", "-T", path}).out;
}

// HostToContainer needs the host path on a shared or slave mount (containerd: "path / is mounted
// on / but it is not a shared or slave mount"), which systemd makes every mount of a node; this
// machine's / is private, so such a mount of a host path on it is made without propagation.
void drop_unsupported_propagation(json& pod) {
    std::map<std::string, std::string> host;  // volume name -> host path
    for (const auto& v : pod.value("volumes", json::array()))
        if (v.contains("hostPath")) host[v["name"]] = v["hostPath"]["path"];
    for (const char* kind : {"containers", "initContainers"}) {
        if (!pod.contains(kind)) continue;
        for (json& c : pod[kind]) {
            for (json& m : c["volumeMounts"]) {
                if (m.value("mountPropagation", "") != "HostToContainer" || !host.contains(m.value("name", ""))) continue;
                const std::string p = propagation(host[m["name"]]);
                if (p.find("shared") == std::string::npos && p.find("slave") == std::string::npos) m.erase("mountPropagation");
            }
        }
    }
}

bool is_runtime_install(const json& container) {
    const json args = container.value("args", json::array());
    return args.size() >= 2 && args[0] == "runtime" && args[1] == "install";
}

// The simulated driver for every container of a pod on the `nvidia` runtime: kgpu's runtime
// injects the driver root's libnvidia-ml (the simulator) and device nodes, as on a GPU node; the
// simulator also needs its node fixture and events file (env KGPU_SIM_NODE, KGPU_SIM_EVENTS, as
// the real driver needs the kernel module) and its C++ libraries.
void add_simulated_driver(json& pod, const std::string& base) {
    json& volumes = pod["volumes"];
    if (!volumes.is_array()) volumes = json::array();
    volumes.push_back({{"name", "kgpu-e2e-sim"}, {"hostPath", {{"path", base + "/sim"}, {"type", "Directory"}}}});
    const auto libs = simulator_libraries();
    for (size_t i = 0; i < libs.size(); ++i)
        volumes.push_back({{"name", fmt::format("kgpu-e2e-sim-lib{}", i)}, {"hostPath", {{"path", libs[i]}, {"type", "File"}}}});
    for (const char* kind : {"containers", "initContainers"}) {
        if (!pod.contains(kind)) continue;
        for (json& c : pod[kind]) {
            json& env = c["env"];
            if (!env.is_array()) env = json::array();
            env.push_back({{"name", "KGPU_SIM_NODE"}, {"value", "/kgpu-sim/" + fs::path(sim_fixture(base)).filename().string()}});
            env.push_back({{"name", "KGPU_SIM_EVENTS"}, {"value", "/kgpu-sim/" + fs::path(sim_events(base)).filename().string()}});
            json& mounts = c["volumeMounts"];
            if (!mounts.is_array()) mounts = json::array();
            mounts.push_back({{"name", "kgpu-e2e-sim"}, {"mountPath", "/kgpu-sim"}, {"readOnly", true}});
            for (size_t i = 0; i < libs.size(); ++i)
                mounts.push_back({{"name", fmt::format("kgpu-e2e-sim-lib{}", i)}, {"mountPath", libs[i]}, {"readOnly", true}});
        }
    }
}

// `kgpu runtime install` as the init container runs it, changed only in what this cluster differs
// from a systemd node: host paths the suite may not write (under <base>/host instead), the
// simulated driver root, containerd's own config and socket, and the restart: kube-mini's
// containerd has no service manager, so the suite's supervisor (kube_e2e_supervisor) plays
// systemd and the install restarts containerd as NVIDIA's installer does, with SIGHUP
// (--restart-mode signal), which needs the host's PID namespace to see containerd (hostPID).
// /dev/char links would go to the host's /dev: --no-dev-char-links.
void adapt_runtime_install(const Cluster& c, json& pod, json& container) {
    Args a;
    for (const auto& v : container["args"]) a.items.push_back(v.get<std::string>());
    const std::string base = c.base();
    auto remapped = [&](const std::string& flag, const std::string& fallback) {
        const std::string v = a.get(flag);
        return host_path(c, v.empty() ? fallback : v);
    };
    a.set("--restart-mode", "signal");
    a.set("--socket", c.env("CONTAINERD_SOCKET"));
    a.set("--config", c.env("CONTAINERD_CONFIG"));
    a.set("--install-dir", remapped("--install-dir", "/usr/local/kgpu"));
    a.set("--runtime-config", runtime_config(base));
    a.set("--runtime-log-file", remapped("--runtime-log-file", "/var/log/kgpu-container-runtime.log"));
    a.set("--nvidia-driver-root", driver_root(base));
    for (const char* f : {"--drop-in", "--dbus-socket", "--nvml-library", "--nvidia-dev-root"})
        if (!a.get(f).empty()) a.set(f, host_path(c, a.get(f)));
    a.flag("--no-dev-char-links");
    container["args"] = a.items;
    pod["hostPID"] = true;
    // kube-mini's stand-in API server refuses privileged containers ("disallowed by cluster
    // policy": it never allows them, as kube-apiserver without --allow-privileged). What the
    // install does needs no more than root with the runtime's default capabilities: writing under
    // the host's root (DAC_OVERRIDE), chroot into it (SYS_CHROOT), SIGHUP to containerd (same uid).
    if (container.contains("securityContext")) container["securityContext"].erase("privileged");
}

// A pod template kube-mini's API server refuses: a privileged container (see above).
bool privileged(const json& pod) {
    for (const char* kind : {"containers", "initContainers"})
        for (const auto& c : pod.value(kind, json::array()))
            if (c.contains("securityContext") && c["securityContext"].value("privileged", false)) return true;
    return false;
}

}  // namespace

std::string driver_root(const std::string& base) { return base + "/driver"; }
std::string sim_fixture(const std::string& base) { return base + "/sim/dgx-h100.yaml"; }
std::string sim_events(const std::string& base) { return base + "/sim/events"; }
std::string runtime_config(const std::string& base) { return base + "/host/etc/kgpu/container-runtime.toml"; }

std::string host_path(const Cluster& c, const std::string& path) {
    const std::string p = fs::path(path).lexically_normal().string();
    auto under = [&](const std::string& dir) { return p == dir || p.starts_with(dir + "/"); };
    if (p == "/" || under("/proc") || under("/sys") || under("/dev")) return p;
    if (p == "/var/lib/kubelet/device-plugins") return c.env("KUBELET_DEVICE_PLUGINS_DIR");
    if (under("/var/lib/kubelet")) return c.env("KUBELET_ROOT_DIR") + p.substr(std::string("/var/lib/kubelet").size());
    if (p == "/run/containerd/containerd.sock" || p == "/var/run/containerd/containerd.sock") return c.env("CONTAINERD_SOCKET");
    return c.base() + "/host" + p;
}

bool kustomization_manifests(const Cluster& c, std::vector<Manifest>& out, std::string& error,
                             const std::vector<std::string>& only) {
    const std::string dir = std::string(KGPU_SOURCE_DIR) + "/deploy/kubernetes";
    YAML::Node k;
    try {
        k = YAML::LoadFile(dir + "/kustomization.yaml");
    } catch (const std::exception& e) {
        error = dir + "/kustomization.yaml: " + e.what();
        return false;
    }
    // The kustomization's `images:` edit, done here (kube-mini's kubectl has no -k): kgpu's image
    // as scripts/build-image names it, docker.io/library/kgpu:<version>.
    std::map<std::string, std::string> images;
    for (const auto& i : k["images"]) images[i["name"].as<std::string>()] = "kgpu:" + c.state().kgpu_version;
    for (const auto& r : k["resources"]) {
        const std::string name = r.as<std::string>();
        if (!only.empty() && std::find(only.begin(), only.end(), name) == only.end()) continue;
        std::string yaml, skipped;
        try {
            for (const auto& doc : YAML::LoadAllFromFile(dir + "/" + name)) {
                json j = to_json(doc);
                if (j.is_null()) continue;
                if (j.value("apiVersion", "").starts_with("rbac.authorization.k8s.io/")) {
                    skipped = "kube-mini's API server serves no rbac.authorization.k8s.io (and authorizes every request)";
                    break;
                }
                if (j.value("kind", "") == "DaemonSet") {
                    json& pod = j["spec"]["template"]["spec"];
                    for (json& v : pod["volumes"])
                        if (v.contains("hostPath")) v["hostPath"]["path"] = host_path(c, v["hostPath"]["path"].get<std::string>());
                    for (const char* kind : {"containers", "initContainers"}) {
                        if (!pod.contains(kind)) continue;
                        for (json& ctr : pod[kind]) {
                            const std::string image = ctr.value("image", "");
                            const std::string repo = image.substr(0, image.find(':'));
                            if (images.contains(repo)) ctr["image"] = images[repo];
                            if (is_runtime_install(ctr)) adapt_runtime_install(c, pod, ctr);
                            if (ctr.contains("args")) {
                                Args a;
                                for (const auto& v : ctr["args"]) a.items.push_back(v.get<std::string>());
                                // A host path the device plugin writes into its CDI spec.
                                if (!a.get("--nvidia-cdi-hook-path").empty())
                                    a.set("--nvidia-cdi-hook-path", host_path(c, a.get("--nvidia-cdi-hook-path")));
                                ctr["args"] = a.items;
                            }
                        }
                    }
                    if (pod.value("runtimeClassName", "") == "nvidia") add_simulated_driver(pod, c.base());
                    drop_unsupported_propagation(pod);
                    if (privileged(pod)) {
                        skipped = "its pod template has a privileged container, which kube-mini's API server refuses";
                        break;
                    }
                }
                // JSON documents in a YAML stream: a file that starts with '{' is read as one JSON
                // document by kube-mini's kubectl, hence the comment line first.
                yaml += (yaml.empty() ? "# deploy/kubernetes/" + name + ", adapted by tests/e2e\n" : "---\n") + j.dump() + "\n";
            }
        } catch (const std::exception& e) {
            error = dir + "/" + name + ": " + e.what();
            return false;
        }
        out.push_back({name, skipped.empty() ? yaml : std::string(), skipped});
    }
    return true;
}

}  // namespace kgpu::e2e
