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
#include "common/strings.h"
#include "deviceplugin/config.h"
#include "demo/host.h"
#include "demo/http.h"
#include "demo/kubelet.h"
#include "demo/locate.h"
#include "demo/process.h"
#include "demo/walk.h"


namespace kgpu::demo::detail {

namespace {

// Environment variables the children must not inherit: the demo sets everything by flag so a
// shell with NVIDIA's device-plugin or GFD variables exported still gets the same run. The device
// plugin's settings' variables come from its settings table; these are the others.
std::vector<std::string> scrubbed_env() {
    std::vector<std::string> env = {
        "CONFIG_FILE", "DP_DISABLE_HEALTHCHECKS", "DP_ENABLE_HEALTHCHECKS", "IMEX_CHANNEL_IDS", "IMEX_REQUIRED",
        "KGPU_LOG_LEVEL", "KGPU_INIT_RETRY_MS", "KGPU_PROBE_INTERVAL_MS", "KGPU_SETTLE_MS", "KGPU_FOREIGN_PROBE_MS",
        "KGPU_FOREIGN_GRACE_MS", "KGPU_RECOVERY_PERIOD_MS",
        "NVIDIA_VISIBLE_DEVICES", "KGPU_SIM_NODE", "KGPU_SIM_EVENTS",
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

}  // namespace

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
                                       "unix://" + (host_.root / "run/containerd/containerd.sock").string(),
                                       "--ready-file", (work_ / "exporter.ready").string()});
    if (opts_.mps)
        exporter.argv.insert(exporter.argv.end(), {"--mps-root", mps_root_.string(), "--kubernetes-virtual-gpus"});
    auto e = Child::spawn(exporter);
    if (!e) return Failure{1, "starting kgpu exporter: " + e.error().message, {}};
    exporter_ = std::move(*e);
    say("  kgpu exporter: pid {} (--address 127.0.0.1:0 --kubernetes), log {}", exporter_.pid(), exporter_.log_path());
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

}  // namespace kgpu::demo::detail

namespace kgpu::demo {

int run(const Options& opts, std::ostream& out) {
    // Demo::run() has the barrier for the steps; this one covers building the Demo.
    try {
        detail::Demo demo(opts, out);
        return demo.run();
    } catch (const std::exception& e) {
        std::cerr << "kgpu demo: internal error: " << e.what() << "\n";
        return 1;
    }
}

}  // namespace kgpu::demo
