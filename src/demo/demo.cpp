#include "demo/demo.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/process.h"
#include "deviceplugin/config.h"
#include "common/strings.h"
#include "demo/host.h"
#include "demo/http.h"
#include "demo/kubelet.h"
#include "demo/locate.h"
#include "demo/process.h"

namespace kgpu::demo {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kResource = "nvidia.com/gpu";
constexpr const char* kNamespace = "default";
constexpr const char* kPod = "cuda-train";
constexpr const char* kContainer = "trainer";
constexpr int kPodGpus = 2;
constexpr int kXid = 94;  // "Contained ECC error": recoverable once the faulting work is gone
constexpr int kSteps = 5;
// --mps: the MPS walk (NVIDIA's README MPS config with 4 replicas; sim/README.md's stand-in daemon).
constexpr int kMpsSteps = 4;
constexpr unsigned kMpsReplicas = 4;

// Environment variables the children must not inherit: the demo sets everything by flag so a
// shell with NVIDIA's device-plugin or GFD variables exported still gets the same run. The device
// plugin's settings' variables come from its settings table; these are the others.
std::vector<std::string> scrubbed_env() {
    std::vector<std::string> env = {
        "CONFIG_FILE", "DP_DISABLE_HEALTHCHECKS", "DP_ENABLE_HEALTHCHECKS", "IMEX_CHANNEL_IDS", "IMEX_REQUIRED",
        "KGPU_LOG_LEVEL", "KGPU_INIT_RETRY_MS", "NVIDIA_VISIBLE_DEVICES", "KGPU_SIM_NODE", "KGPU_SIM_EVENTS",
        // the exporter's (dcgm-exporter's names)
        "DCGM_EXPORTER_LISTEN", "DCGM_EXPORTER_INTERVAL", "DCGM_EXPORTER_KUBERNETES",
        "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE", "DCGM_EXPORTER_NO_HOSTNAME", "DCGM_POD_RESOURCES_KUBELET_SOCKET",
        "KGPU_EXPORTER_HOSTNAME_LABEL", "CONTAINER_RUNTIME_ENDPOINT", "NVIDIA_RESOURCE_NAMES",
        // the API server: the demo's plugin must not post Events on, or follow the label of, the
        // real Node of a pod it runs in
        "NODE_NAME", "KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "CONFIG_FILE_SRCDIR",
        "DEFAULT_CONFIG", "NODE_LABEL", "FALLBACK_STRATEGIES", "KGPU_NODE_HEALTH_EVENTS", "KGPU_NODE_HEALTH_ANNOTATION",
    };
    for (auto& v : deviceplugin::option_variables()) env.push_back(std::move(v));
    return env;
}

// The longest socket path below the work dir: <work>/host/var/lib/kubelet/device-plugins/kgpu-nvidia-com-gpu.sock.
constexpr size_t kLongestSocketSuffix = std::string_view("/host/var/lib/kubelet/device-plugins/kgpu-nvidia-com-gpu.sock").size();
constexpr size_t kSunPathMax = 107;  // sizeof(sockaddr_un::sun_path) - 1

const char* signal_name(int sig) {
    switch (sig) {
        case SIGINT: return "SIGINT";
        case SIGTERM: return "SIGTERM";
        case SIGHUP: return "SIGHUP";
        default: return "a signal";
    }
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
long long millis(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

std::string read_or_empty(const fs::path& p) {
    auto r = files::read(p);
    return r ? *r : std::string{};
}

std::string tail(const fs::path& p, size_t lines) {
    std::string s = read_or_empty(p);
    std::vector<std::string_view> all;
    for (auto l : strings::split(s, '\n'))
        if (!l.empty()) all.push_back(l);
    std::string out;
    for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += "    | " + std::string(all[i]) + "\n";
    return out.empty() ? "    | (empty)\n" : out;
}

std::string short_uuid(const std::string& uuid) { return uuid.size() > 12 ? uuid.substr(0, 12) + "…" : uuid; }

// A failed step or setup problem: the message, the exit code it maps to, and a log worth showing.
struct Failure {
    int exit_code = 1;
    std::string message;
    fs::path log;
};

class Demo {
public:
    Demo(const Options& o, std::ostream& out) : opts_(o), out_(out) {}
    ~Demo() {
        try {
            teardown();
        } catch (...) {  // a destructor must not throw; the Child members still stop the children
        }
    }

    // run_steps() behind an exception barrier: what the steps do not expect (a child's output of
    // another shape, bad_alloc) is a message and exit 1 after the teardown, never std::terminate
    // with the children and the work dir left behind.
    int run();

private:
    template <class... Args>
    void say(fmt::format_string<Args...> f, Args&&... args) {
        out_ << fmt::format(f, std::forward<Args>(args)...) << '\n';
        out_.flush();
    }
    bool interrupted();
    std::function<bool()> cancel_fn() {
        return [this] { return interrupted(); };
    }
    // Reads the signalfd first, so a failure caused by the interruption (a child that got the
    // same signal) is reported as the interruption.
    std::optional<Failure> interrupted_failure() {
        if (!interrupted()) return std::nullopt;
        return Failure{128 + signal_, fmt::format("interrupted by {}", signal_name(signal_)), {}};
    }
    Failure step_failure(std::string message, fs::path log = {}) {
        if (auto f = interrupted_failure()) return *f;
        return Failure{1, std::move(message), std::move(log)};
    }

    std::optional<Failure> locate();
    std::optional<Failure> make_work_dir();
    std::optional<Failure> read_node();
    std::optional<Failure> start();
    std::optional<Failure> step_register();
    std::optional<Failure> step_allocate();
    std::optional<Failure> step_xid();
    std::optional<Failure> step_metrics();
    std::optional<Failure> step_doctor();
    std::optional<Failure> wait_exporter();
    std::optional<Failure> start_mps();
    std::optional<Failure> step_mps_register();
    std::optional<Failure> step_mps_share();
    std::optional<Failure> step_mps_kill();
    std::optional<Failure> step_mps_metrics();
    void teardown();
    int run_steps();

    SpawnOptions child(const std::string& name, std::vector<std::string> args) const;
    Status append_event(const std::string& line);

    Options opts_;
    std::ostream& out_;
    Clock::time_point t0_ = Clock::now();
    int signal_ = 0;
    int sfd_ = -1;
    sigset_t old_mask_{};
    bool mask_changed_ = false;
    struct sigaction old_pipe_ {};
    bool torn_down_ = false;

    fs::path exe_, sim_, node_file_, work_;
    HostPaths host_;
    fs::path logs_, events_;
    SimNode node_;

    std::unique_ptr<KubeletEmulator> kubelet_;
    Child plugin_, exporter_;
    Clock::time_point plugin_started_;
    PluginRegistration reg_;
    std::vector<std::string> pod_ids_;  // the demo pod's device IDs
    std::string faulted_uuid_;          // the GPU step 3 sent an XID to
    std::string exporter_host_;
    int exporter_port_ = 0;

    // --mps
    Child mps_daemon_;
    fs::path mps_root_, mps_control_, mps_config_;
    std::string mps_uuid_;                 // the GPU the two MPS pods share
    std::vector<std::string> mps_pod_ids_;  // their replicas
};

bool Demo::interrupted() {
    if (signal_) return true;
    if (sfd_ < 0) return false;
    signalfd_siginfo si{};
    if (::read(sfd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) signal_ = static_cast<int>(si.ssi_signo);
    return signal_ != 0;
}

SpawnOptions Demo::child(const std::string& name, std::vector<std::string> args) const {
    SpawnOptions s;
    s.argv = {exe_.string()};
    s.argv.insert(s.argv.end(), args.begin(), args.end());
    s.set_env = {{"KGPU_SIM_NODE", node_file_.string()}, {"KGPU_SIM_EVENTS", events_.string()}, {"NO_COLOR", "1"}};
    s.unset_env = scrubbed_env();
    s.log_path = (logs_ / (name + ".log")).string();
    return s;
}

Status Demo::append_event(const std::string& line) {
    std::ofstream f(events_, std::ios::app);
    f << line << '\n';
    f.flush();
    if (!f) return fail(Code::io, "appending to {}", events_.string());
    return {};
}

std::optional<Failure> Demo::locate() {
    auto exe = self_exe();
    if (!exe) return Failure{1, exe.error().message, {}};
    exe_ = *exe;
    auto sim = find_sim_library(exe_, opts_.nvml_library);
    if (!sim) return Failure{2, sim.error().message, {}};
    sim_ = sim->path;
    auto node = find_node(exe_, opts_.node);
    if (!node) return Failure{2, node.error().message, {}};
    node_file_ = node->path;
    return std::nullopt;
}

std::optional<Failure> Demo::make_work_dir() {
    std::string parent = "/tmp";
    if (const char* t = std::getenv("TMPDIR"); t && *t) parent = t;
    // Unix socket paths are limited to 107 bytes: fall back to /tmp when $TMPDIR is too deep.
    if (parent.size() + std::string_view("/kgpu-demo-XXXXXX").size() + kLongestSocketSuffix > kSunPathMax) parent = "/tmp";
    while (parent.size() > 1 && parent.back() == '/') parent.pop_back();
    std::string tmpl = parent + "/kgpu-demo-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr)
        return Failure{1, fmt::format("cannot create a work dir {}: {}", tmpl, std::strerror(errno)), {}};
    work_ = tmpl;
    host_.root = work_ / "host";
    logs_ = work_ / "logs";
    events_ = work_ / "sim-events";
    std::error_code ec;
    fs::create_directories(logs_, ec);
    if (ec) return Failure{1, fmt::format("creating {}: {}", logs_.string(), ec.message()), {}};
    if (auto st = files::write_atomic(events_, "# kgpu demo: fault commands for the simulator (sim/README.md)\n"); !st)
        return Failure{1, st.error().message, {}};
    return std::nullopt;
}

std::optional<Failure> Demo::read_node() {
    auto spawn = child("info", {"info", "--json", "--nvml-library", sim_.string()});
    spawn.stdout_path = (logs_ / "info.json").string();
    auto rc = run_to_completion(spawn, std::chrono::duration_cast<std::chrono::milliseconds>(opts_.step_timeout), cancel_fn());
    if (!rc) return step_failure("kgpu info: " + rc.error().message, spawn.log_path);
    if (auto f = interrupted_failure()) return f;
    if (*rc != 0)
        return Failure{2,
                       fmt::format("the simulator could not load the node {} (kgpu info exited {}); a node file is a "
                                   "simulator fixture, see sim/README.md",
                                   node_file_.string(), *rc),
                       spawn.log_path};
    auto node = parse_info_json(read_or_empty(spawn.stdout_path));
    if (!node) return Failure{2, fmt::format("{}: {}", node_file_.string(), node.error().message), spawn.log_path};
    node_ = std::move(*node);
    if (node_.gpus.size() < static_cast<size_t>(kPodGpus) + 1)
        return Failure{2,
                       fmt::format("{}: the demo needs a node with at least {} GPUs (a {}-GPU pod and one to fault), "
                                   "this one has {}",
                                   node_file_.string(), kPodGpus + 1, kPodGpus, node_.gpus.size()),
                       {}};
    return std::nullopt;
}

std::optional<Failure> Demo::start() {
    if (auto st = write_fake_host(host_, node_); !st) return Failure{1, st.error().message, {}};
    kubelet_ = std::make_unique<KubeletEmulator>(host_.device_plugins().string(), host_.pod_resources_socket().string());
    if (auto st = kubelet_->start(); !st) return Failure{1, "kubelet emulator: " + st.error().message, {}};
    say("  kubelet emulator: Registration on {}", kubelet_->kubelet_socket());
    say("                    PodResources on {}", kubelet_->pod_resources_socket());

    if (opts_.mps)
        if (auto f = start_mps()) return f;
    auto plugin = child("device-plugin",
                        {"device-plugin", "--log-level", "info", "--nvml-library", sim_.string(), "--device-plugin-path",
                         host_.device_plugins().string(), "--nvidia-driver-root", host_.root.string(), "--cdi-spec-dir",
                         host_.cdi_dir().string(), "--health-recovery-period",
                         fmt::format("{}s", opts_.recovery_period.count())});
    if (opts_.mps)
        plugin.argv.insert(plugin.argv.end(), {"--config-file", mps_config_.string(), "--mps-root", mps_root_.string(),
                                               "--mps-control-binary", mps_control_.string()});
    plugin_started_ = Clock::now();
    auto p = Child::spawn(plugin);
    if (!p) return Failure{1, "starting kgpu device-plugin: " + p.error().message, {}};
    plugin_ = std::move(*p);
    say("  kgpu device-plugin: pid {} (--health-recovery-period {}s), log {}", plugin_.pid(), opts_.recovery_period.count(),
        plugin_.log_path());

    auto exporter = child("exporter", {"exporter", "--log-level", "info", "--nvml-library", sim_.string(), "--address",
                                       "127.0.0.1:0", "--collect-interval", "500", "--kubernetes",
                                       "--pod-resources-kubelet-socket", host_.pod_resources_socket().string(),
                                       // no CRI on the fake host: never talk to this machine's containerd
                                       "--container-runtime-endpoint",
                                       "unix://" + (host_.root / "run/containerd/containerd.sock").string()});
    if (opts_.mps)
        exporter.argv.insert(exporter.argv.end(), {"--mps-root", mps_root_.string(), "--kubernetes-virtual-gpus"});
    auto e = Child::spawn(exporter);
    if (!e) return Failure{1, "starting kgpu exporter: " + e.error().message, {}};
    exporter_ = std::move(*e);
    say("  kgpu exporter: pid {} (--address 127.0.0.1:0 --kubernetes), log {}", exporter_.pid(), exporter_.log_path());
    return std::nullopt;
}

std::optional<Failure> Demo::step_register() {
    say("");
    say("[1/{}] The device plugin registers nvidia.com/gpu with the kubelet", kSteps);
    auto reg = kubelet_->wait_registered(kResource, opts_.step_timeout, cancel_fn());
    if (!reg) {
        if (auto code = plugin_.poll())
            return step_failure(fmt::format("kgpu device-plugin exited with {} before registering", *code), plugin_.log_path());
        return step_failure(fmt::format("no Register for {} on {} within {} s", kResource, kubelet_->kubelet_socket(),
                                        opts_.step_timeout.count()),
                            plugin_.log_path());
    }
    reg_ = *reg;
    say("  Register: resource {}, endpoint {}, API {}, {} ms after the plugin started", reg_.resource_name, reg_.endpoint,
        reg_.version, millis(reg_.when - plugin_started_));
    say("  GetDevicePluginOptions: get_preferred_allocation_available = {}", reg_.preferred_allocation);
    // The first list can race the first health probe: wait for every device to be listed Healthy.
    auto list = kubelet_->wait_devices(
        kResource, [&](const DeviceList& l) { return l.devices.size() == node_.gpus.size() && l.healthy() == static_cast<int>(l.devices.size()); },
        opts_.step_timeout, cancel_fn());
    if (!list) {
        auto now = kubelet_->devices(kResource);
        return step_failure(fmt::format("ListAndWatch lists {} devices ({} Healthy); the node has {} GPUs", now.devices.size(),
                                        now.healthy(), node_.gpus.size()),
                            plugin_.log_path());
    }
    say("  ListAndWatch (update #{}): {} devices", list->update, list->devices.size());
    for (const auto& d : list->devices) {
        const SimGpu* g = node_.by_id(d.id);
        std::string numa = d.numa.empty() ? "-" : std::to_string(d.numa.front());
        say("    {}  {:<8} NUMA {}   GPU {} {}", d.id, d.health, numa, g ? std::to_string(g->index) : "?", g ? g->name : "");
    }
    say("  => node status: capacity nvidia.com/gpu: {}, allocatable nvidia.com/gpu: {}", list->devices.size(), list->healthy());
    return std::nullopt;
}

std::optional<Failure> Demo::step_allocate() {
    say("");
    say("[2/{}] A pod asks for {} GPUs: GetPreferredAllocation, then Allocate", kSteps, kPodGpus);
    say("  pod {}/{}, container {}: resources.limits nvidia.com/gpu: {}", kNamespace, kPod, kContainer, kPodGpus);
    auto list = kubelet_->devices(kResource);
    std::vector<std::string> available;
    for (const auto& d : list.devices)
        if (d.health == "Healthy") available.push_back(d.id);
    std::vector<std::string> ids;
    if (reg_.preferred_allocation) {
        auto pref = kubelet_->prefer(kResource, available, kPodGpus);
        if (!pref) return step_failure(pref.error().message, plugin_.log_path());
        ids = *pref;
        say("  GetPreferredAllocation(available: {} devices, size {}) -> {}", available.size(), kPodGpus, fmt::join(ids, ", "));
    } else {
        if (available.size() < static_cast<size_t>(kPodGpus))
            return step_failure(fmt::format("{} Healthy devices listed, the pod needs {}", available.size(), kPodGpus),
                                plugin_.log_path());
        ids.assign(available.begin(), available.begin() + kPodGpus);  // what the kubelet does without it
        say("  the plugin offers no preferred allocation: the kubelet takes the first {}", kPodGpus);
    }
    if (ids.size() != static_cast<size_t>(kPodGpus))
        return step_failure(fmt::format("preferred allocation returned {} devices for a request of {}", ids.size(), kPodGpus),
                            plugin_.log_path());
    const SimGpu* a = node_.by_id(ids[0]);
    const SimGpu* b = node_.by_id(ids[1]);
    if (!a || !b) return step_failure(fmt::format("preferred allocation returned unknown IDs {}", fmt::join(ids, ", ")));
    const std::string conn = node_.connection(a->index, b->index);
    bool node_has_nvlink = false;
    for (size_t i = 0; i < node_.gpus.size(); ++i)
        for (size_t j = i + 1; j < node_.gpus.size(); ++j)
            node_has_nvlink |= SimNode::is_nvlink(node_.connection(static_cast<int>(i), static_cast<int>(j)));
    say("  topology (nvidia-smi topo -m): GPU {} <-> GPU {} = {}{}", a->index, b->index, conn,
        SimNode::is_nvlink(conn) ? fmt::format(" ({} bonded NVLinks): an NVLink pair", conn.substr(2)) : "");
    if (node_has_nvlink && !SimNode::is_nvlink(conn))
        return step_failure(fmt::format("the node has NVLink pairs but the preferred allocation is GPU {} + GPU {} ({})",
                                        a->index, b->index, conn),
                            plugin_.log_path());
    if (!node_has_nvlink) say("  (this node has no NVLink: the pair is the closest on PCIe)");

    auto resp = kubelet_->allocate(kResource, ids);
    if (!resp) return step_failure(resp.error().message, plugin_.log_path());
    say("  Allocate({}) -> the container's spec:", fmt::join(ids, ", "));
    std::map<std::string, std::string> envs(resp->envs().begin(), resp->envs().end());
    for (const auto& [k, v] : envs) say("    env {}={}", k, v);
    for (const auto& m : resp->mounts()) say("    mount {} -> {}{}", m.host_path(), m.container_path(), m.read_only() ? " (ro)" : "");
    for (const auto& d : resp->devices()) say("    device {} ({})", d.host_path(), d.permissions());
    for (const auto& [k, v] : resp->annotations()) say("    annotation {}={}", k, v);
    auto vis = envs.find("NVIDIA_VISIBLE_DEVICES");
    if (vis == envs.end())
        return step_failure("Allocate answered without NVIDIA_VISIBLE_DEVICES (default device-list strategy envvar)",
                            plugin_.log_path());
    for (const auto& id : ids)
        if (vis->second.find(id) == std::string::npos)
            return step_failure(fmt::format("NVIDIA_VISIBLE_DEVICES={} does not name {}", vis->second, id));
    pod_ids_ = ids;
    kubelet_->add_pod({kNamespace, kPod, kContainer, kResource, ids});
    // The pod's job starts working: the simulator shows it as utilisation on its two GPUs.
    if (auto st = append_event(fmt::format("util {} 87 41", a->index)); !st) return step_failure(st.error().message);
    if (auto st = append_event(fmt::format("util {} 92 44", b->index)); !st) return step_failure(st.error().message);
    say("  => the container runtime sees NVIDIA_VISIBLE_DEVICES and mounts exactly GPU {} and GPU {}; PodResources now "
        "lists {}/{} with them", a->index, b->index, kNamespace, kPod);
    say("     (its job starts: `util {} 87 41` and `util {} 92 44` appended to the simulator's events file)", a->index,
        b->index);
    return std::nullopt;
}

std::optional<Failure> Demo::step_xid() {
    say("");
    say("[3/{}] An XID makes a GPU Unhealthy; it recovers", kSteps);
    // The highest-index GPU the pod does not hold.
    const SimGpu* target = nullptr;
    for (auto it = node_.gpus.rbegin(); it != node_.gpus.rend() && !target; ++it)
        if (std::find(pod_ids_.begin(), pod_ids_.end(), it->uuid) == pod_ids_.end() &&
            std::find(pod_ids_.begin(), pod_ids_.end(), std::to_string(it->index)) == pod_ids_.end())
            target = &*it;
    if (!target) return step_failure("no GPU outside the pod to fault");
    const std::string id = target->uuid;
    faulted_uuid_ = id;
    const size_t log_offset = read_or_empty(plugin_.log_path()).size();
    const int total = static_cast<int>(node_.gpus.size());
    // NVML hands an event only to the processes registered for it when it happens: the exporter
    // must be up before the XID, or step 4 would show no XID (issue #23).
    if (auto f = wait_exporter()) return f;

    auto t_xid = Clock::now();
    if (auto st = append_event(fmt::format("xid {} {}", target->index, kXid)); !st) return step_failure(st.error().message);
    {
        std::ofstream k(host_.kernel_log(), std::ios::app);
        k << kernel_xid_line(*target, kXid) << '\n';
    }
    say("  `xid {} {}` appended to the simulator's events file (the driver reports XID {} on GPU {}, {});", target->index,
        kXid, kXid, target->index, short_uuid(id));
    say("  the kernel log line a real driver writes: {}", kernel_xid_line(*target, kXid));
    auto bad = kubelet_->wait_devices(
        kResource,
        [&](const DeviceList& l) {
            return std::any_of(l.devices.begin(), l.devices.end(), [&](const DeviceState& d) { return d.id == id && d.health == "Unhealthy"; });
        },
        opts_.step_timeout, cancel_fn());
    if (!bad)
        return step_failure(fmt::format("{} not Unhealthy in ListAndWatch within {} s of XID {}", id, opts_.step_timeout.count(), kXid),
                            plugin_.log_path());
    say("  ListAndWatch (update #{}, {} ms after the XID): {} Unhealthy", bad->update, millis(bad->when - t_xid), id);
    say("  => allocatable nvidia.com/gpu: {} (capacity {}): the scheduler places no new pod on GPU {}", bad->healthy(), total,
        target->index);
    if (bad->healthy() != total - 1)
        return step_failure(fmt::format("expected allocatable {} after one Unhealthy GPU, got {}", total - 1, bad->healthy()));

    auto good = kubelet_->wait_devices(
        kResource, [&](const DeviceList& l) { return l.healthy() == total; }, opts_.recovery_period + opts_.step_timeout,
        cancel_fn());
    if (!good)
        return step_failure(fmt::format("{} did not recover within {} s (XID {} is recoverable; --health-recovery-period {}s)", id,
                                        (opts_.recovery_period + opts_.step_timeout).count(), kXid, opts_.recovery_period.count()),
                            plugin_.log_path());
    say("  ListAndWatch (update #{}, {:.1f} s after the XID): {} Healthy again (XID {} is recoverable: no new XID and clean",
        good->update, seconds(good->when - t_xid), id, kXid);
    say("    probes for --health-recovery-period {}s; NVIDIA's plugin would keep it Unhealthy until restarted)",
        opts_.recovery_period.count());
    std::string log = read_or_empty(plugin_.log_path());
    std::vector<std::string> lines;
    for (auto l : strings::split(std::string_view(log).substr(std::min(log_offset, log.size())), '\n'))
        if (l.find(id) != std::string_view::npos || l.find("GPU " + std::to_string(target->index)) != std::string_view::npos)
            lines.emplace_back(l);
    if (!lines.empty()) {
        say("  the device plugin's log:");
        for (size_t i = 0; i < lines.size() && i < 4; ++i) say("    | {}", lines[i]);
    }
    say("  => allocatable nvidia.com/gpu: {}", good->healthy());
    return std::nullopt;
}

// Reads the exporter's address from its log ("listening on <address>"). The exporter logs it
// after its GPUs are registered for XID events, so an XID appended afterwards reaches it.
std::optional<Failure> Demo::wait_exporter() {
    if (exporter_port_ != 0) return std::nullopt;
    auto end = Clock::now() + opts_.step_timeout;
    while (exporter_port_ == 0) {
        auto where = find_listening_address(read_or_empty(exporter_.log_path()));
        if (!where) return step_failure(where.error().message, exporter_.log_path());
        if (*where) {
            exporter_host_ = (*where)->host;
            exporter_port_ = (*where)->port;
            break;
        }
        if (auto f = interrupted_failure()) return f;
        if (auto code = exporter_.poll())
            return step_failure(fmt::format("kgpu exporter exited with {} before listening", *code), exporter_.log_path());
        if (Clock::now() > end)
            return step_failure(fmt::format("kgpu exporter did not log 'listening on <address>' within {} s",
                                            opts_.step_timeout.count()),
                                exporter_.log_path());
        std::this_thread::sleep_for(50ms);
    }
    say("  kgpu exporter listens on {}:{} (read from its log; it watches XID events from then on)", exporter_host_,
        exporter_port_);
    return std::nullopt;
}

std::optional<Failure> Demo::step_metrics() {
    say("");
    say("[4/{}] The exporter's metrics carry the pod's labels", kSteps);
    if (auto f = wait_exporter()) return f;
    auto end = Clock::now() + opts_.step_timeout;

    // Wait until a scrape shows GPU_UTIL for each of the pod's GPUs with the pod's labels.
    const std::string pod_labels[] = {fmt::format("pod=\"{}\"", kPod), fmt::format("namespace=\"{}\"", kNamespace),
                                      fmt::format("container=\"{}\"", kContainer)};
    std::string body, last_error;
    std::vector<std::string> util_lines, pod_lines;
    std::string xid_line;  // step 3's XID on the faulted GPU, once the exporter reports it
    const std::string xid_code = fmt::format("err_code=\"{}\"", kXid);
    int scrapes = 0;
    auto t_scrape = Clock::now();
    while (true) {
        auto r = http_get(exporter_host_, exporter_port_, "/metrics", 5s);
        ++scrapes;
        if (r && r->status == 200) {
            body = std::move(r->body);
            util_lines.clear();
            pod_lines.clear();
            xid_line.clear();
            for (auto l : strings::split(body, '\n')) {
                if (l.starts_with("DCGM_FI_DEV_XID_ERRORS{") && !faulted_uuid_.empty() &&
                    l.find("\"" + faulted_uuid_ + "\"") != std::string_view::npos && l.find(xid_code) != std::string_view::npos)
                    xid_line = l;
                if (!l.starts_with("DCGM_FI_DEV_GPU_UTIL{")) continue;
                util_lines.emplace_back(l);
                if (std::all_of(std::begin(pod_labels), std::end(pod_labels),
                                [&](const std::string& lab) { return l.find(lab) != std::string_view::npos; }))
                    pod_lines.emplace_back(l);
            }
            bool every_gpu = std::all_of(pod_ids_.begin(), pod_ids_.end(), [&](const std::string& id) {
                const SimGpu* g = node_.by_id(id);
                return std::any_of(pod_lines.begin(), pod_lines.end(), [&](const std::string& l) {
                    return g && l.find("\"" + g->uuid + "\"") != std::string::npos;
                });
            });
            const bool xid_seen = faulted_uuid_.empty() || !xid_line.empty();
            if (every_gpu && xid_seen) break;
            last_error = fmt::format("{} DCGM_FI_DEV_GPU_UTIL lines, {} with the pod's labels{}", util_lines.size(),
                                     pod_lines.size(),
                                     xid_seen ? "" : fmt::format("; no DCGM_FI_DEV_XID_ERRORS line for {} with {}",
                                                                 faulted_uuid_, xid_code));
        } else {
            last_error = r ? fmt::format("HTTP {}", r->status) : r.error().message;
        }
        if (auto f = interrupted_failure()) return f;
        if (auto code = exporter_.poll())
            return step_failure(fmt::format("kgpu exporter exited with {}", *code), exporter_.log_path());
        if (Clock::now() > end) {
            (void)files::write_atomic(logs_ / "metrics.txt", body);
            return step_failure(fmt::format("no scrape of http://{}:{}/metrics showed DCGM_FI_DEV_GPU_UTIL with {} {} {} "
                                            "for the pod's GPUs and step 3's XID {} within {} s (last: {})",
                                            exporter_host_, exporter_port_, pod_labels[0], pod_labels[1], pod_labels[2],
                                            kXid, opts_.step_timeout.count(), last_error),
                                exporter_.log_path());
        }
        std::this_thread::sleep_for(250ms);
    }
    (void)files::write_atomic(logs_ / "metrics.txt", body);
    size_t families = 0;
    for (auto l : strings::split(body, '\n'))
        if (l.starts_with("# TYPE ")) ++families;
    say("  GET http://{}:{}/metrics (scrape {}, {} ms after the first): {} bytes, {} metric families", exporter_host_,
        exporter_port_, scrapes, millis(Clock::now() - t_scrape), body.size(), families);
    for (auto l : strings::split(body, '\n'))
        if (l.starts_with("# HELP DCGM_FI_DEV_GPU_UTIL") || l.starts_with("# TYPE DCGM_FI_DEV_GPU_UTIL")) say("    {}", l);
    for (const auto& l : pod_lines) say("    {}", l);
    for (const auto& l : util_lines)
        if (std::find(pod_lines.begin(), pod_lines.end(), l) == pod_lines.end()) {
            say("    {}", l);
            say("    … ({} more GPU_UTIL lines without a pod: GPUs no pod holds)", util_lines.size() - pod_lines.size() - 1);
            break;
        }
    if (!xid_line.empty()) {
        say("  and step 3's XID, as dcgm-exporter reports the last one:");
        say("    {}", xid_line);
    }
    say("  => the pod's GPUs are labelled pod/namespace/container from the kubelet's PodResources List, like dcgm-exporter");
    say("     with --kubernetes");
    return std::nullopt;
}

std::optional<Failure> Demo::step_doctor() {
    say("");
    say("[5/{}] kgpu doctor on the simulated node", kSteps);
    auto spawn = child("doctor", {"doctor", "--json", "--root", host_.root.string(), "--nvml-library", sim_.string()});
    spawn.stdout_path = (logs_ / "doctor.json").string();
    say("  kgpu doctor --root {} --nvml-library {}", host_.root.string(), sim_.string());
    auto rc = run_to_completion(spawn, std::chrono::duration_cast<std::chrono::milliseconds>(opts_.step_timeout), cancel_fn());
    if (!rc) return step_failure("kgpu doctor: " + rc.error().message, spawn.log_path);
    auto j = nlohmann::json::parse(read_or_empty(spawn.stdout_path), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("checks") || !j["checks"].is_array() || !j.contains("summary") ||
        !j["summary"].is_object())
        return step_failure(fmt::format("kgpu doctor exited {} without a JSON report (an object with a \"checks\" array "
                                        "and a \"summary\" object)",
                                        *rc),
                            spawn.log_path);
    // Grouped by layer like doctor's own text report; evidence for the links the demo exercised
    // (device plugin, kubelet, the XID it injected) and for anything not ok.
    for (const char* layer : {"hardware", "driver", "runtime", "device plugin", "kubelet", "workload"}) {
        bool header = false;
        for (const auto& c : j["checks"]) {
            if (!c.is_object() || c.value("layer", "") != layer) continue;
            if (!header) say("  {}", layer);
            header = true;
            const std::string status = c.value("status", "?");
            const std::string tag = status == "ok" ? "[ OK ]" : status == "warn" ? "[WARN]" : status == "fail" ? "[FAIL]" : "[SKIP]";
            say("    {} {:<28} {}", tag, c.value("id", ""), c.value("title", ""));
            const std::string l = layer, evidence = c.value("evidence", ""), fix = c.value("fix", "");
            if (status == "warn" || status == "fail" || l == "device plugin" || l == "kubelet" || c.value("id", "") == "kernel.xid") {
                for (auto e : strings::split(evidence, '\n'))
                    if (!e.empty()) say("           {}", e);
                if (!fix.empty() && status != "ok") say("           fix: {}", fix);
            }
        }
    }
    const auto& s = j["summary"];
    say("  doctor summary: {} ok, {} warn, {} fail, {} skipped (exit {})", s.value("ok", 0), s.value("warn", 0),
        s.value("fail", 0), s.value("skipped", 0), *rc);
    if (s.value("fail", 0) != 0 || *rc != 0)
        return step_failure(fmt::format("kgpu doctor found {} failing check(s) on the simulated node", s.value("fail", 0)),
                            spawn.log_path);
    return std::nullopt;
}

// ---- --mps: two pods share one GPU through MPS ---------------------------------------------------

// The MPS daemon before the plugin (as the DaemonSets start on an MPS node): the stand-in control
// binary next to the simulator, NVIDIA's README MPS config with 4 replicas, the MPS root in the
// work dir.
std::optional<Failure> Demo::start_mps() {
    mps_control_ = sim_.parent_path() / "nvidia-cuda-mps-control";
    std::error_code ec;
    if (!fs::is_regular_file(mps_control_, ec))
        return Failure{2,
                       fmt::format("--mps needs the simulator's stand-in nvidia-cuda-mps-control next to {} (tried {})",
                                   sim_.string(), mps_control_.string()),
                       {}};
    mps_root_ = work_ / "mps";
    mps_config_ = work_ / "mps-config.yaml";
    const std::string cfg = fmt::format(
        "# NVIDIA's README \"With CUDA MPS\" config, with {} replicas\nversion: v1\nsharing:\n  mps:\n    resources:\n"
        "    - name: nvidia.com/gpu\n      replicas: {}\n",
        kMpsReplicas, kMpsReplicas);
    if (auto st = files::write_atomic(mps_config_, cfg); !st) return Failure{1, st.error().message, {}};
    auto d = child("mps-control-daemon", {"mps-control-daemon", "--log-level", "info", "--nvml-library", sim_.string(),
                                          "--config-file", mps_config_.string(), "--mps-root", mps_root_.string(),
                                          "--mps-control-binary", mps_control_.string()});
    auto c = Child::spawn(d);
    if (!c) return Failure{1, "starting kgpu mps-control-daemon: " + c.error().message, {}};
    mps_daemon_ = std::move(*c);
    say("  kgpu mps-control-daemon: pid {} (sharing.mps, {} replicas per GPU; --mps-root {}), log {}", mps_daemon_.pid(),
        kMpsReplicas, mps_root_.string(), mps_daemon_.log_path());
    say("    its control binary: the simulator's stand-in {}", mps_control_.string());
    return std::nullopt;
}

std::optional<Failure> Demo::step_mps_register() {
    say("");
    say("[1/{}] The MPS daemon sets the limits; the device plugin registers {} replicas per GPU", kMpsSteps, kMpsReplicas);
    const fs::path started = mps_root_ / kResource / ".started";
    auto end = Clock::now() + opts_.step_timeout;
    while (!fs::exists(started)) {
        if (auto f = interrupted_failure()) return f;
        if (auto code = mps_daemon_.poll())
            return step_failure(fmt::format("kgpu mps-control-daemon exited with {}", *code), mps_daemon_.log_path());
        if (Clock::now() > end)
            return step_failure(fmt::format("no {} within {} s", started.string(), opts_.step_timeout.count()),
                                mps_daemon_.log_path());
        std::this_thread::sleep_for(50ms);
    }
    const fs::path control_log = mps_root_ / kResource / "log" / "control.log";
    say("  the daemon's commands, from {}:", control_log.string());
    // (The texts are named: a range-for does not extend the life of a temporary inside its range.)
    const std::string commands = read_or_empty(control_log);
    for (auto l : strings::split(commands, '\n'))
        if (!l.empty()) say("    | {}", l);
    size_t exclusive = 0;
    const std::string events = read_or_empty(events_);
    for (auto l : strings::split(events, '\n'))
        if (l.starts_with("computemode ") && l.ends_with(" 3")) ++exclusive;
    say("  and every GPU to compute mode EXCLUSIVE_PROCESS through NVML ({} `computemode <gpu> 3` lines in the", exclusive);
    say("  simulator's events file: compute mode is the GPU's, every process sees it)");

    auto reg = kubelet_->wait_registered(kResource, opts_.step_timeout, cancel_fn());
    if (!reg) return step_failure(fmt::format("no Register for {} within {} s", kResource, opts_.step_timeout.count()),
                                  plugin_.log_path());
    reg_ = *reg;
    const size_t want = node_.gpus.size() * kMpsReplicas;
    auto list = kubelet_->wait_devices(
        kResource, [&](const DeviceList& l) { return l.devices.size() == want && l.healthy() == static_cast<int>(want); },
        opts_.step_timeout, cancel_fn());
    if (!list) {
        auto now = kubelet_->devices(kResource);
        return step_failure(fmt::format("ListAndWatch lists {} devices ({} Healthy); expected {} Healthy", now.devices.size(),
                                        now.healthy(), want),
                            plugin_.log_path());
    }
    say("  ListAndWatch (update #{}): {} devices, Healthy once the plugin's `get_default_active_thread_percentage`", list->update,
        list->devices.size());
    say("  to the daemon was answered:");
    for (size_t i = 0; i < list->devices.size() && i < kMpsReplicas + 1; ++i)
        say("    {}  {}", list->devices[i].id, list->devices[i].health);
    say("    … ({} more)", list->devices.size() - std::min<size_t>(list->devices.size(), kMpsReplicas + 1));
    say("  => node status: capacity nvidia.com/gpu: {}, allocatable nvidia.com/gpu: {}", list->devices.size(), list->healthy());
    return std::nullopt;
}

std::optional<Failure> Demo::step_mps_share() {
    say("");
    say("[2/{}] Two pods share one GPU through MPS, each within its limits", kMpsSteps);
    const auto list = kubelet_->devices(kResource);
    if (list.devices.empty()) return step_failure("no devices listed", plugin_.log_path());
    const std::string first = list.devices.front().id;
    mps_uuid_ = first.substr(0, first.find("::"));
    const SimGpu* gpu = node_.by_id(mps_uuid_);
    const char* pods[] = {"mps-a", "mps-b"};
    for (unsigned k = 0; k < 2; ++k) {
        const std::string id = fmt::format("{}::{}", mps_uuid_, k);
        auto resp = kubelet_->allocate(kResource, {id});
        if (!resp) return step_failure(resp.error().message, plugin_.log_path());
        std::map<std::string, std::string> envs(resp->envs().begin(), resp->envs().end());
        say("  pod {}/{} (nvidia.com/gpu: 1) -> Allocate({}):", kNamespace, pods[k], id);
        for (const auto& [key, v] : envs) say("    env {}={}", key, v);
        for (const auto& m : resp->mounts()) say("    mount {} -> {}", m.host_path(), m.container_path());
        auto pipe = envs.find("CUDA_MPS_PIPE_DIRECTORY");
        if (pipe == envs.end() || pipe->second != "/mps/nvidia.com/gpu/pipe")
            return step_failure("Allocate answered without CUDA_MPS_PIPE_DIRECTORY=/mps/nvidia.com/gpu/pipe", plugin_.log_path());
        mps_pod_ids_.push_back(id);
        kubelet_->add_pod({kNamespace, pods[k], "main", kResource, {id}});
    }
    // What a CUDA process in either pod gets from the daemon, asked as it would (same pipe directory).
    process::RunOptions ask;
    ask.argv = {mps_control_.string()};
    ask.set_env = {{"CUDA_MPS_PIPE_DIRECTORY", (mps_root_ / kResource / "pipe").string()},
                   {"CUDA_MPS_LOG_DIRECTORY", (mps_root_ / kResource / "log").string()}};
    ask.stdin_text = fmt::format("get_default_active_thread_percentage\nget_default_device_pinned_mem_limit {}\n",
                                 gpu ? gpu->index : 0);
    auto answer = process::run(ask);
    if (!answer || answer->exit_code != 0)
        return step_failure(fmt::format("asking the MPS daemon for its limits failed: {}",
                                        answer ? answer->err : answer.error().message),
                            mps_daemon_.log_path());
    auto parts = strings::split(strings::trim(answer->out), '\n');
    say("  both run on GPU {} ({}), as clients of one MPS server: `echo get_default_active_thread_percentage |",
        gpu ? gpu->index : 0, short_uuid(mps_uuid_));
    say("  nvidia-cuda-mps-control` answers {} (% of the SMs each may use), the pinned-memory limit of each on that GPU",
        parts.empty() ? "?" : std::string(parts[0]));
    say("  is {} (its memory / {})", parts.size() > 1 ? std::string(parts[1]) : "?", kMpsReplicas);
    say("  => unlike time-slicing, the two pods run at once, each capped; unlike MIG, nothing is partitioned in hardware");
    return std::nullopt;
}

std::optional<Failure> Demo::step_mps_kill() {
    say("");
    say("[3/{}] The MPS daemon dies: its replicas turn Unhealthy, it is restarted, they come back", kMpsSteps);
    const fs::path pidfile = mps_root_ / kResource / "pipe" / "nvidia-cuda-mps-control.pid";
    const std::string pid_text(strings::trim(read_or_empty(pidfile)));
    const int pid = pid_text.empty() ? 0 : std::atoi(pid_text.c_str());
    if (pid <= 0) return step_failure(fmt::format("no daemon pid in {}", pidfile.string()), mps_daemon_.log_path());
    const auto t_kill = Clock::now();
    ::kill(pid, SIGKILL);
    say("  kill -9 {} (the stand-in nvidia-cuda-mps-control daemon, from {})", pid, pidfile.string());
    auto bad = kubelet_->wait_devices(kResource, [](const DeviceList& l) { return l.healthy() == 0; }, opts_.step_timeout,
                                      cancel_fn());
    if (!bad) return step_failure("the replicas did not turn Unhealthy", plugin_.log_path());
    say("  ListAndWatch (update #{}, {} ms after the kill): all {} replicas Unhealthy, allocatable 0 (NVIDIA's plugin",
        bad->update, millis(bad->when - t_kill), bad->devices.size());
    say("  would keep advertising them Healthy)");
    const int total = static_cast<int>(bad->devices.size());
    auto good = kubelet_->wait_devices(kResource, [&](const DeviceList& l) { return l.healthy() == total; },
                                       opts_.step_timeout, cancel_fn());
    if (!good) return step_failure("the replicas did not come back", mps_daemon_.log_path());
    say("  ListAndWatch (update #{}, {} ms after the kill): Healthy again: kgpu mps-control-daemon saw its daemon die",
        good->update, millis(good->when - t_kill));
    say("  (it is the daemon's subreaper), started it again after its backoff and set the limits again");
    const std::string daemon_log = read_or_empty(mps_daemon_.log_path());
    for (auto l : strings::split(daemon_log, '\n'))
        if (l.find("control daemon down") != std::string_view::npos || l.find("retrying") != std::string_view::npos ||
            l.find("control daemon running") != std::string_view::npos)
            say("    | {}", l);
    return std::nullopt;
}

std::optional<Failure> Demo::step_mps_metrics() {
    say("");
    say("[4/{}] The exporter shows the MPS limits, the daemon's state and both pods", kMpsSteps);
    if (auto f = wait_exporter()) return f;
    auto end = Clock::now() + opts_.step_timeout;
    std::vector<std::string> mps_lines, pod_lines;
    std::string body;
    while (true) {
        auto r = http_get(exporter_host_, exporter_port_, "/metrics", 5s);
        if (r && r->status == 200) {
            body = std::move(r->body);
            mps_lines.clear();
            pod_lines.clear();
            bool restarted = false;
            for (auto l : strings::split(body, '\n')) {
                if (l.starts_with("kgpu_mps_")) mps_lines.emplace_back(l);
                if (l.starts_with("kgpu_mps_daemon_restarts_total{") && l.ends_with(" 1")) restarted = true;
                if (l.starts_with("DCGM_FI_DEV_GPU_UTIL{") && l.find("pod=\"mps-") != std::string_view::npos)
                    pod_lines.emplace_back(l);
            }
            if (restarted && pod_lines.size() == 2) break;
        }
        if (auto f = interrupted_failure()) return f;
        if (Clock::now() > end) {
            (void)files::write_atomic(logs_ / "metrics.txt", body);
            return step_failure(fmt::format("no scrape showed kgpu_mps_daemon_restarts_total 1 and both MPS pods within {} s",
                                            opts_.step_timeout.count()),
                                exporter_.log_path());
        }
        std::this_thread::sleep_for(250ms);
    }
    (void)files::write_atomic(logs_ / "metrics.txt", body);
    for (const auto& l : mps_lines)
        if (!l.starts_with("kgpu_mps_pinned_memory_limit_bytes") || l.find("\"" + mps_uuid_ + "\"") != std::string::npos)
            say("    {}", l);
    say("    … (one kgpu_mps_pinned_memory_limit_bytes per GPU)");
    for (const auto& l : pod_lines) say("    {}", l);
    say("  => each pod on the shared GPU has its own series (vgpu = its replica), as for time-slicing");
    return std::nullopt;
}

void Demo::teardown() {
    if (torn_down_) return;
    torn_down_ = true;
    // Children first (the plugin ends its ListAndWatch stream and removes its socket), then the
    // emulator's servers, then the files.
    std::vector<std::string> stopped;
    for (auto* c : {&plugin_, &exporter_, &mps_daemon_}) {
        if (c->pid() <= 0) continue;
        int code = c->stop(5s);
        stopped.push_back(fmt::format("{} (pid {}) exit {}",
                                      c == &plugin_ ? "device plugin" : c == &exporter_ ? "exporter" : "mps-control-daemon",
                                      c->pid(), code));
    }
    if (kubelet_) kubelet_->stop();
    kubelet_.reset();
    if (!stopped.empty()) say("stopped: {}", fmt::join(stopped, ", "));
    if (!work_.empty()) {
        if (opts_.keep) {
            say("kept: {} (logs in {})", work_.string(), logs_.string());
        } else {
            std::error_code ec;
            fs::remove_all(work_, ec);
            if (ec) std::cerr << "kgpu demo: removing " << work_.string() << ": " << ec.message() << "\n";
            else say("removed {}", work_.string());
        }
    }
    if (sfd_ >= 0) {
        // Consume what arrived during the teardown: restoring the mask must not deliver a late
        // SIGINT/SIGTERM/SIGHUP with its default action (death) after the work is done.
        signalfd_siginfo si{};
        while (::read(sfd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        }
        ::close(sfd_);
        sfd_ = -1;
    }
    if (mask_changed_) {
        // Signals consumed through the signalfd are gone; restoring the mask delivers nothing new
        // (one that arrives between the drain and the restore still takes its default action).
        ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
        ::sigaction(SIGPIPE, &old_pipe_, nullptr);
        mask_changed_ = false;
    }
}

int Demo::run() {
    try {
        return run_steps();
    } catch (const std::exception& e) {
        std::cerr << "kgpu demo: internal error: " << e.what() << "\n";
        try {
            teardown();
        } catch (...) {
        }
        return 1;
    }
}

int Demo::run_steps() {
    auto report = [&](const Failure& f, const char* where) {
        if (f.exit_code >= 128) {
            std::cerr << "kgpu demo: " << f.message << "; stopping\n";
        } else {
            std::cerr << "kgpu demo: " << where << f.message << "\n";
            if (!f.log.empty()) std::cerr << "  last lines of " << f.log.string() << ":\n" << tail(f.log, 12);
        }
        teardown();
        return f.exit_code;
    };
    if (auto f = locate()) return report(*f, "");

    // SIGINT/SIGTERM/SIGHUP (a closed terminal) are read from a signalfd, blocked before any
    // thread exists so every thread (gRPC's included) inherits the mask; children get an empty
    // mask back (process.cpp).
    const sigset_t mask = process::signal_set({SIGINT, SIGTERM, SIGHUP});
    ::pthread_sigmask(SIG_BLOCK, &mask, &old_mask_);
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ign, &old_pipe_);  // a closed stdout must not skip the teardown
    mask_changed_ = true;
    sfd_ = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd_ < 0) {
        const int err = errno;
        ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
        ::sigaction(SIGPIPE, &old_pipe_, nullptr);
        mask_changed_ = false;
        return report(Failure{1, fmt::format("signalfd: {}", std::strerror(err)), {}}, "setup: ");
    }

    if (auto f = make_work_dir()) return report(*f, "");
    say("kgpu demo: the node side of GPUs in Kubernetes, end to end, on a simulated node");
    say("  node: {}", node_file_.string());
    say("  simulated driver: {}", sim_.string());
    say("  work dir: {} ({})", work_.string(), opts_.keep ? "kept: --keep" : "removed at the end; --keep keeps it");
    if (auto f = read_node()) return report(*f, "");
    say("  the node: {} GPU(s), {}, driver {}, CUDA {} (kgpu info --json)", node_.gpus.size(),
        node_.gpus.empty() ? "" : node_.gpus.front().name, node_.driver_version, node_.cuda_version);
    say("  fake host for kgpu doctor: {}", host_.root.string());
    if (auto f = start()) return report(*f, "setup: ");

    using StepFn = std::optional<Failure> (Demo::*)();
    const std::vector<StepFn> steps =
        opts_.mps ? std::vector<StepFn>{&Demo::step_mps_register, &Demo::step_mps_share, &Demo::step_mps_kill,
                                        &Demo::step_mps_metrics}
                  : std::vector<StepFn>{&Demo::step_register, &Demo::step_allocate, &Demo::step_xid,
                                        &Demo::step_metrics, &Demo::step_doctor};
    const int n = static_cast<int>(steps.size());
    for (int i = 0; i < n; ++i) {
        if (interrupted()) return report(*interrupted_failure(), "");
        if (auto f = (this->*steps[i])()) return report(*f, fmt::format("step {}/{} failed: ", i + 1, n).c_str());
    }
    say("");
    say("all {} steps passed in {:.1f} s", n, seconds(Clock::now() - t0_));
    teardown();
    return 0;
}

}  // namespace

int run(const Options& opts, std::ostream& out) {
    // Demo::run() has the barrier for the steps; this one covers building the Demo.
    try {
        Demo demo(opts, out);
        return demo.run();
    } catch (const std::exception& e) {
        std::cerr << "kgpu demo: internal error: " << e.what() << "\n";
        return 1;
    }
}

}  // namespace kgpu::demo
