// kgpu doctor: the device plugin, the kubelet and the API server (checks.h).
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
#include "deviceplugin/config.h"
#include "doctor/grpc_probe.h"
#include "doctor/kube_api.h"
#include "kube/client.h"

namespace kgpu::doctor::checks {

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
    std::vector<fs::path> socks;
    for (const auto& e : entries_noted(dir, r)) {
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

namespace {
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
}  // namespace

namespace {
std::string resource_key(std::string_view resource) {
    std::string k(resource);
    for (char& c : k)
        if (c == '/' || c == '.') c = '-';
    return k;
}
}  // namespace

namespace {
std::vector<PluginSocket> plugin_sockets(const State& s, CheckResult& r) {
    std::vector<PluginSocket> out;
    for (const auto& e : entries_noted(s.host(s.opt.device_plugin_dir), r)) {
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
}  // namespace

// Two plugins for one resource: the kubelet (v1.26) keeps one client per resource name, the one
// registered last, and drops it when either plugin's stream ends (issue #12).
void check_one_plugin_per_resource(State& s, CheckResult& r) {
    std::map<std::string, std::vector<const PluginSocket*>> by_key;
    const auto socks = plugin_sockets(s, r);
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
    for (auto& p : plugin_sockets(s, r))
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

}  // namespace kgpu::doctor::checks
