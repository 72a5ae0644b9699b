#include "cluster.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>

#include <fmt/format.h>

namespace kgpu::e2e {

namespace fs = std::filesystem;

std::string shared_dir() {
    if (const char* d = std::getenv("KGPU_SHARED_DIR"); d != nullptr && *d != '\0') return d;
    return (fs::path(KGPU_SOURCE_DIR) / ".." / "shared").lexically_normal().string();
}

std::string kube_mini_script() { return shared_dir() + "/tools/kube/kube-mini.sh"; }

std::string tools_absent() {
    const std::string shared = shared_dir();
    if (!fs::exists(shared + "/tools/kube/up") && !fs::exists(kube_mini_script()))
        return fmt::format("no {}/tools/kube (kube-mini): the workspace's shared test tools are absent here (set "
                           "KGPU_SHARED_DIR to where they are); the e2e suite runs only beside them",
                           shared);
    return {};
}

std::string state_file() { return std::string(KGPU_E2E_BINARY_DIR) + "/state.json"; }

bool load_state(State& s, std::string& error) {
    std::ifstream in(state_file());
    if (!in) {
        error = state_file() + " is missing: the setup test KubeE2E.Up did not run (ctest runs it first as the fixture "
                               "kube_e2e; run the suite with `ctest -L e2e`)";
        return false;
    }
    json j;
    try {
        j = json::parse(in);
        s.skipped = j.value("skipped", "");
        s.base = j.value("base", "");
        s.kube = j.value("kube", "");
        s.kgpu_version = j.value("kgpu_version", "");
        s.env = j.value("env", std::map<std::string, std::string>{});
    } catch (const std::exception& e) {
        error = state_file() + ": " + e.what();
        return false;
    }
    return true;
}

void save_state(const State& s) {
    json j = {{"skipped", s.skipped}, {"base", s.base}, {"kube", s.kube}, {"env", s.env}, {"kgpu_version", s.kgpu_version}};
    fs::create_directories(KGPU_E2E_BINARY_DIR);
    const std::string tmp = state_file() + ".tmp";
    std::ofstream(tmp) << j.dump(2) << "\n";
    fs::rename(tmp, state_file());
}

RunResult run(const std::vector<std::string>& argv, std::chrono::seconds timeout, const std::map<std::string, std::string>& env) {
    std::vector<std::string> full = {"/usr/bin/timeout", "--kill-after=5", std::to_string(timeout.count())};
    full.insert(full.end(), argv.begin(), argv.end());
    auto r = kgpu::test::run_process(full, env);
    if (r.exit_code == 124 || r.exit_code == 137)
        r.err += fmt::format("\n(e2e: `{}` killed after {} s)", fmt::join(argv, " "), timeout.count());
    return r;
}

bool wait_until(const std::function<bool()>& poll, std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        if (poll()) return true;
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
}

std::string Cluster::env(const std::string& key) const {
    auto it = s_.env.find(key);
    return it == s_.env.end() ? std::string() : it->second;
}

RunResult Cluster::kubectl(const std::vector<std::string>& args, std::chrono::seconds timeout) const {
    std::vector<std::string> argv = {env("KUBECTL")};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, timeout);
}

json Cluster::get(const std::vector<std::string>& what, std::string* error) const {
    std::vector<std::string> args = {"get"};
    args.insert(args.end(), what.begin(), what.end());
    args.insert(args.end(), {"-o", "json"});
    auto r = kubectl(args);
    if (r.exit_code != 0) {
        if (error) *error = fmt::format("kubectl {}: {}", fmt::join(args, " "), r.err);
        return nullptr;
    }
    try {
        return json::parse(r.out);
    } catch (const std::exception& e) {
        if (error) *error = fmt::format("kubectl {}: {}", fmt::join(args, " "), e.what());
        return nullptr;
    }
}

RunResult Cluster::apply(const std::string& yaml, const std::string& name) const {
    const std::string dir = s_.base + "/manifests";
    fs::create_directories(dir);
    const std::string file = dir + "/" + name + ".yaml";
    std::ofstream(file) << yaml;
    return kubectl({"apply", "-f", file});
}

RunResult Cluster::ctr(const std::vector<std::string>& args, std::chrono::seconds timeout) const {
    std::vector<std::string> argv = {"/usr/bin/ctr", "--address", env("CONTAINERD_SOCKET"), "--namespace", "k8s.io"};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, timeout);
}

std::string Cluster::allocatable_gpus() const {
    json n = get({"node", env("KUBE_NODE_NAME")});
    if (n.is_null()) return {};
    const json& a = n["status"]["allocatable"];
    return a.contains("nvidia.com/gpu") ? a["nvidia.com/gpu"].get<std::string>() : std::string();
}

json Cluster::pod(const std::string& ns, const std::string& name) const {
    auto r = kubectl({"get", "pod", "-n", ns, name, "-o", "json", "--ignore-not-found"});
    if (r.exit_code != 0 || r.out.find('{') == std::string::npos) return nullptr;
    try {
        return json::parse(r.out);
    } catch (...) {
        return nullptr;
    }
}

bool Cluster::pod_ready(const std::string& ns, const std::string& name) const {
    json p = pod(ns, name);
    if (p.is_null()) return false;
    for (const auto& c : p["status"].value("conditions", json::array()))
        if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
    return false;
}

std::string Cluster::pod_phase(const std::string& ns, const std::string& name) const {
    json p = pod(ns, name);
    return p.is_null() ? std::string() : p["status"].value("phase", "");
}

json Cluster::daemonset_pods(const std::string& app) const {
    json l = get({"pods", "-n", "kube-system", "-l", "app.kubernetes.io/name=" + app});
    return l.is_null() ? json::array() : l.value("items", json::array());
}

std::string Cluster::container_log(const std::string& ns, const std::string& pod_name, const std::string& container) const {
    json p = pod(ns, pod_name);
    if (p.is_null()) return {};
    const std::string dir = fmt::format("{}/{}_{}_{}/{}", env("POD_LOGS_DIR"), ns, pod_name,
                                        p["metadata"].value("uid", ""), container);
    // <restart count>.log: the highest number is the newest container.
    std::string newest;
    int best = -1;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string n = e.path().filename().string();
        if (!n.ends_with(".log")) continue;
        try {
            int i = std::stoi(n);
            if (i > best) best = i, newest = e.path().string();
        } catch (...) {
        }
    }
    if (newest.empty()) return {};
    // CRI log lines: <time> <stream> <P|F> <text>; P is a partial line continued by the next.
    std::istringstream in(slurp(newest));
    std::string out;
    for (std::string line; std::getline(in, line);) {
        std::istringstream f(line);
        std::string time, stream, tag;
        f >> time >> stream >> tag;
        std::string text;
        std::getline(f, text);
        if (!text.empty() && text[0] == ' ') text.erase(0, 1);
        out += text;
        if (tag != "P") out += "\n";
    }
    return out;
}

std::vector<std::string> Cluster::pod_events(const std::string& ns, const std::string& pod_name) const {
    std::vector<std::string> out;
    json l = get({"events", "-n", ns});
    if (l.is_null()) return out;
    for (const auto& e : l.value("items", json::array()))
        if (e["involvedObject"].value("kind", "") == "Pod" && e["involvedObject"].value("name", "") == pod_name)
            out.push_back(e.value("reason", "") + ": " + e.value("message", ""));
    return out;
}

std::vector<std::string> Cluster::assigned_devices(const std::string& pod_uid, const std::string& container,
                                                   const std::string& resource) const {
    std::vector<std::string> out;
    json cp;
    try {
        cp = json::parse(slurp(env("KUBELET_DEVICE_PLUGINS_DIR") + "/kubelet_internal_checkpoint"));
    } catch (...) {
        return out;
    }
    for (const auto& e : cp["Data"].value("PodDeviceEntries", json::array())) {
        if (e.value("PodUID", "") != pod_uid || e.value("ContainerName", "") != container ||
            e.value("ResourceName", "") != resource)
            continue;
        const json& ids = e["DeviceIDs"];
        if (ids.is_array()) {
            for (const auto& id : ids) out.push_back(id.get<std::string>());
        } else if (ids.is_object()) {  // per NUMA node
            for (const auto& [numa, list] : ids.items())
                for (const auto& id : list) out.push_back(id.get<std::string>());
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::string Cluster::container_id(const std::string& ns, const std::string& pod_name, const std::string& container) const {
    json p = pod(ns, pod_name);
    if (p.is_null()) return {};
    for (const auto& c : p["status"].value("containerStatuses", json::array())) {
        if (c.value("name", "") != container) continue;
        std::string id = c.value("containerID", "");
        const auto sep = id.find("://");
        return sep == std::string::npos ? id : id.substr(sep + 3);
    }
    return {};
}

RunResult Cluster::exec(const std::string& container_id, const std::string& script) const {
    static int n = 0;
    static constexpr std::string_view kMarker = "--kgpu-e2e-exec-end--";
    const std::string end_line = fmt::format("\n{}\n", kMarker);
    // The script runs in a subshell so an `exit` in it still reaches the marker; the empty line
    // after it keeps a trailing backslash from joining the closing parenthesis to its last line.
    const std::string wrapped = fmt::format("(\n{}\n\n)\nrc=$?; printf '\\n{}\\n'; exit $rc", script, kMarker);
    RunResult r;
    for (int attempt = 0; attempt < 3; ++attempt) {
        const std::string exec_id = fmt::format("e2e-{}-{}", ::getpid(), ++n);
        r = ctr({"tasks", "exec", "--exec-id", exec_id, container_id, "/bin/sh", "-c", wrapped});
        // The marker's own newline comes first, so output without a final newline still ends
        // exactly where the script stopped.
        const auto end = r.out.rfind(end_line);
        if (end != std::string::npos && end + end_line.size() == r.out.size()) {
            r.out.erase(end);
            return r;
        }
        // The container or exec failed before the script ran (ctr's own error): not a lost output.
        if (r.exit_code != 0 && r.out.empty()) return r;
    }
    r.err += fmt::format("\n(ctr tasks exec: the script's output never came back whole in 3 runs; last stdout: '{}')", r.out);
    if (r.exit_code == 0) r.exit_code = -1;
    return r;
}

bool Cluster::delete_pod(const std::string& ns, const std::string& name, std::chrono::seconds timeout) const {
    kubectl({"delete", "pod", "-n", ns, name});  // fails when already gone: the wait decides
    return wait_until([&] { return pod(ns, name).is_null(); }, timeout);
}

std::string Cluster::describe() const {
    std::string out = "\n--- kubectl get pods -A -o wide\n" + kubectl({"get", "pods", "-A", "-o", "wide"}).out;
    out += "--- node nvidia.com/gpu allocatable: '" + allocatable_gpus() + "'\n";
    for (const char* log : {"kubelet", "containerd"}) {
        const std::string text = slurp(s_.kube + "/logs/" + log + ".log");
        out += fmt::format("--- tail of {}/logs/{}.log\n{}\n", s_.kube, log,
                           text.size() > 3000 ? text.substr(text.size() - 3000) : text);
    }
    out += "--- " + s_.base + "/supervisor.log\n" + slurp(s_.base + "/supervisor.log");
    return out;
}

Attached attach() {
    Attached a;
    State s;
    if (!load_state(s, a.error)) return a;
    if (!s.skipped.empty()) {
        a.skip = s.skipped;
        return a;
    }
    if (s.env.empty() || !fs::exists(s.kube + "/env")) {
        a.error = "the setup test KubeE2E.Up did not bring the cluster up (no " + s.kube + "/env): see its output";
        return a;
    }
    a.cluster.emplace(std::move(s));
    return a;
}

std::map<std::string, unsigned> fixture_minors(const std::string& fixture) {
    std::map<std::string, unsigned> out;
    YAML::Node n = YAML::LoadFile(fixture);
    for (const auto& g : n["gpus"]) out[g["uuid"].as<std::string>()] = g["minor"].as<unsigned>();
    return out;
}

std::vector<std::string> gpu_nodes(const std::string& ls) {
    static const std::regex node(R"(^nvidia[0-9]+$)");
    std::vector<std::string> out;
    std::istringstream in(ls);
    for (std::string w; in >> w;)
        if (std::regex_match(w, node)) out.push_back(w);
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<std::string> uuids_in(const std::string& text) {
    static const std::regex uuid(R"(GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})");
    std::vector<std::string> out;
    std::set<std::string> seen;
    for (std::sregex_iterator it(text.begin(), text.end(), uuid), end; it != end; ++it)
        if (seen.insert(it->str()).second) out.push_back(it->str());
    return out;
}

}  // namespace kgpu::e2e
