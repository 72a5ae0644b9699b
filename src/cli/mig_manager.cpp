// `kgpu mig-manager` (mig_manager.h).
#include "cli/mig_manager.h"

#include <signal.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/duration.h"
#include "common/log.h"
#include "common/process.h"
#include "common/strings.h"
#include "deviceplugin/config.h"
#include "deviceplugin/paused.h"
#include "exporter/attribution.h"
#include "inventory/discovery.h"
#include "kube/client.h"
#include "kube/events.h"
#include "kube/node_watch.h"
#include "mig/manager.h"

namespace kgpu::cli {

void add_mig_manager_command(CLI::App& app, MigManagerFlags& f) {
    auto* cmd = app.add_subcommand("mig-manager",
                                   "Follow the node label nvidia.com/mig.config: apply that MIG config (mig-parted's file) "
                                   "and report nvidia.com/mig.config.state, as the GPU Operator's mig-manager");
    add_nvml_options(*cmd, f.nvml);
    cmd->add_option("--kubeconfig", f.kubeconfig, "The kubeconfig (default $KUBECONFIG, else in-cluster)");
    cmd->add_option("-n,--node-name", f.node_name, "The node whose label is followed (required)")->envname("NODE_NAME");
    cmd->add_option("-f,--config-file", f.config_file,
                    "The mig-parted config file whose configs the label names (required; env DEFAULT_CONFIG_FILE "
                    "is the fallback)")
        ->envname("CONFIG_FILE");
    cmd->add_option("-r,--with-reboot", f.with_reboot,
                    "Reboot the node when a MIG mode change needs it (state rebooting); default false: state failed")
        ->envname("WITH_REBOOT")
        ->expected(0, 1)
        ->default_str("true");
    cmd->add_option("-m,--host-root-mount", f.host_root, "Where the host's / is mounted, for the reboot")
        ->envname("HOST_ROOT_MOUNT")
        ->capture_default_str();
    cmd->add_option("--reboot-command", f.reboot_command,
                    "The command that reboots the node, split on spaces (default: chroot <host root> reboot)")
        ->envname("KGPU_MIG_REBOOT_COMMAND");
    cmd->add_option("--paused-gpus-file", f.paused_gpus_file,
                    fmt::format("Where the GPUs being changed are listed for kgpu's device plugin, which stops offering "
                                "them (its --mig-paused-gpus-file; default {}; \"\" for none)",
                                deviceplugin::kDefaultPausedGpusFile))
        ->envname("KGPU_MIG_PAUSED_GPUS_FILE");
    cmd->add_option("--process-timeout", f.process_timeout,
                    "How long a GPU's processes may keep it from changing before the state is failed (30s, 5m, 1h)")
        ->envname("KGPU_MIG_PROCESS_TIMEOUT")
        ->capture_default_str();
    cmd->add_option("--pod-resources-kubelet-socket", f.pod_resources_socket,
                    "The kubelet's PodResources socket: names the pods on a busy GPU")
        ->capture_default_str();
    // The GPU Operator passes these; kgpu needs none of them (it stops no operand or host service:
    // its device plugin, labels and exporter follow MIG changes live).
    for (const char* name : {"-s,--reconfigure-script", "-i,--host-nvidia-dir", "-o,--host-mig-manager-state-file",
                             "-k,--host-kubelet-systemd-service", "-g,--gpu-clients-file", "-p,--default-gpu-clients-namespace",
                             "-a,--driver-root-ctr-path", "-b,--dev-root",
                             "-j,--dev-root-ctr-path", "--nvidia-cdi-hook-path"})
        cmd->add_option(name, f.ignored, "Accepted for NVIDIA's mig-manager; unused")->group("NVIDIA's, unused");
    for (const char* name : {"-d,--with-shutdown-host-gpu-clients", "--cdi-enabled"})
        cmd->add_option(name, f.ignored, "Accepted for NVIDIA's mig-manager; unused")->expected(0, 1)->group("NVIDIA's, unused");
}

namespace {

struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<std::string> config;  // the label's latest value ("" absent)
    std::string state;                  // the state label as last seen
    bool fresh = false;
};

// What the flags ask for, checked; or the usage error (exit 2).
struct Settings {
    mig::ManagerOptions manager;
    std::vector<std::string> reboot_argv;
};
Result<Settings> settings_from(const MigManagerFlags& f) {
    auto usage = [](std::string msg) { return std::unexpected(Error{Code::invalid_argument, std::move(msg)}); };
    if (f.node_name.empty()) return usage("invalid -n <node-name> flag: must not be empty string (--node-name, NODE_NAME)");
    if (auto st = kube::check_node_name(f.node_name); !st) return usage(st.error().message);
    Settings s;
    mig::ManagerOptions& mo = s.manager;
    mo.config_file = f.config_file;
    if (mo.config_file.empty())
        if (const char* v = std::getenv("DEFAULT_CONFIG_FILE"); v && *v) mo.config_file = v;
    if (mo.config_file.empty())
        return usage("-f <config-file> is required (--config-file, CONFIG_FILE or DEFAULT_CONFIG_FILE): the mig-parted "
                     "configs the label nvidia.com/mig.config names");
    if (!f.with_reboot.empty()) {
        auto b = deviceplugin::parse_bool(f.with_reboot);
        if (!b) return usage("--with-reboot / WITH_REBOOT: " + b.error().message);
        mo.with_reboot = *b;
    }
    auto timeout = parse_duration(f.process_timeout);
    if (!timeout || timeout->count() <= 0)
        return usage(fmt::format("--process-timeout / KGPU_MIG_PROCESS_TIMEOUT '{}': expected a duration above zero (30s, 5m)",
                                 f.process_timeout));
    mo.process_timeout = *timeout;
    mo.paused_gpus_file = f.paused_gpus_file.value_or(deviceplugin::kDefaultPausedGpusFile);
    s.reboot_argv = {"/usr/sbin/chroot", f.host_root, "reboot"};
    if (!f.reboot_command.empty()) {
        s.reboot_argv.clear();
        for (auto part : strings::split(f.reboot_command, ' '))
            if (!part.empty()) s.reboot_argv.emplace_back(part);
    }
    return s;
}

// The running manager: follows the node's label and applies each value (mig::reconfigure), with
// the state label, Events, the pods on busy GPUs and the reboot as its hooks. Not copied or
// moved: the watch's and the recorder's callbacks point into it.
class Follower {
public:
    Follower(const MigManagerFlags& f, Settings settings, const sigset_t& mask, nvml::Session session,
             std::shared_ptr<kube::Client> api)
        : f_(f),
          settings_(std::move(settings)),
          mask_(mask),
          session_(std::move(session)),
          api_(std::move(api)),
          events_(
              [api = api_](std::string_view method, std::string_view path, std::string_view body, std::string_view type) {
                  return api->request(method, path, body, type);
              },
              recorder_options(f.node_name)),
          pods_(pod_resources_options(f.pod_resources_socket)) {}
    Follower(const Follower&) = delete;
    Follower& operator=(const Follower&) = delete;

    int run() {
        events_.start();
        watch_ = kube::watch_node(api_, f_.node_name, [this](const nlohmann::json& node) { on_node(node); });
        const mig::ManagerHooks hooks = make_hooks();
        log::info("mig-manager: following node {}'s label {} through {}; configs from {}", f_.node_name,
                  mig::kConfigLabel, api_->config().server, settings_.manager.config_file);
        watch_->start();
        auto last_retry = std::chrono::steady_clock::now();
        while (!stopping_) {
            std::optional<std::string> value;
            std::string state;
            {
                std::unique_lock lk(shared_.mu);
                shared_.cv.wait_for(lk, std::chrono::milliseconds(200), [&] { return shared_.fresh; });
                if (shared_.fresh) {
                    value = shared_.config;
                    state = shared_.state;
                    shared_.fresh = false;
                }
            }
            if (value) apply(*value, state, hooks);
            if (unwritten_state_ && std::chrono::steady_clock::now() - last_retry >= std::chrono::seconds(5)) {
                last_retry = std::chrono::steady_clock::now();
                set_state(*unwritten_state_);
            }
            if (!stopping_) (void)interrupted();
        }
        // What is queued (the Event of a run cut short above) gets up to 5 s to be written.
        for (int i = 0; i < 50; ++i) {
            const auto st = events_.stats();
            if (st.created + st.updated + st.failed + st.rate_limited + st.queue_full >= events_recorded_) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        watch_->request_stop();
        events_.request_stop();
        events_.stop();
        watch_->stop();
        return 0;
    }

private:
    static kube::EventRecorderOptions recorder_options(const std::string& node) {
        kube::EventRecorderOptions eo;
        eo.node = node;
        eo.component = "kgpu-mig-manager";
        return eo;
    }
    static exporter::PodResourcesOptions pod_resources_options(const std::string& socket) {
        exporter::PodResourcesOptions po;
        po.socket = socket;
        po.extra_resources = {"nvidia.com/*"};  // renamed resources (resources.gpus) hold GPUs too
        return po;
    }

    // The watch's callback: a new value of the config label wakes the loop.
    void on_node(const nlohmann::json& node) {
        const auto value = kube::label_of(node, mig::kConfigLabel);
        if (!value) return;  // deleted, or not a Node: nothing to apply
        std::lock_guard lk(shared_.mu);
        shared_.state = kube::label_of(node, mig::kStateLabel).value_or("");
        if (shared_.config == *value) return;
        shared_.config = *value;
        shared_.fresh = true;
        shared_.cv.notify_all();
    }

    // One value of the label ("" when it is gone) and the state label seen with it.
    void apply(const std::string& value, const std::string& state, const mig::ManagerHooks& hooks) {
        const mig::ManagerOptions& mo = settings_.manager;
        if (value.empty()) {
            log::info("mig-manager: node {} has no label {}: nothing to apply", f_.node_name, mig::kConfigLabel);
            std::error_code ec;
            if (first_ && !mo.paused_gpus_file.empty()) std::filesystem::remove(mo.paused_gpus_file, ec);  // a run cut short before
            if (cut_short_) {  // its pending state must not stay
                set_state("failed");
                hooks.event("Warning", mig::kReasonFailed,
                            fmt::format("MIG config '{}' not applied: the label was removed before it was done", *cut_short_));
            }
            cut_short_.reset();
        } else {
            log::info("mig-manager: {}={}", mig::kConfigLabel, value);
            const auto outcome = mig::reconfigure(session_, value, first_ ? state : std::string(), mo, hooks);
            cut_short_ = outcome == mig::Outcome::interrupted ? std::optional(value) : std::nullopt;
            if (outcome == mig::Outcome::interrupted && stopping_) {
                set_state("failed");
                hooks.event("Warning", mig::kReasonFailed,
                            fmt::format("MIG config '{}' not applied: the MIG manager stopped before it was done", value));
            }
            if (outcome == mig::Outcome::rebooting) log::info("mig-manager: the node is rebooting");
        }
        first_ = false;
    }

    mig::ManagerHooks make_hooks() {
        mig::ManagerHooks hooks;
        hooks.set_state = [this](const std::string& state) { set_state(state); };
        hooks.event = [this](const std::string& type, const std::string& reason, const std::string& message) {
            ++events_recorded_;
            events_.record(type, reason, message);
        };
        hooks.pod_uses = [this] { return pod_uses(); };
        hooks.interrupted = [this] { return interrupted(); };
        hooks.reboot = [this] { return reboot(); };
        return hooks;
    }

    // The state label, written at once (a merge patch; 3 tries): it is what an operator and the
    // GPU Operator's tooling wait on, so it is not queued behind Events. One still not written is
    // tried again every 5 s from the loop (an API server away must not leave `pending`).
    void set_state(const std::string& state) {
        const std::string body = nlohmann::json{{"metadata", {{"labels", {{mig::kStateLabel, state}}}}}}.dump();
        std::string why;
        for (int attempt = 0; attempt < 3; ++attempt) {
            auto r = api_->request("PATCH", "/api/v1/nodes/" + f_.node_name, body, "application/merge-patch+json");
            if (r && r->status / 100 == 2) {
                log::info("mig-manager: {}={}", mig::kStateLabel, state);
                unwritten_state_.reset();
                return;
            }
            why = r ? fmt::format("HTTP {}: {}", r->status, r->body.substr(0, 200)) : r.error().message;
            std::this_thread::sleep_for(std::chrono::seconds(1));
        }
        if (unwritten_state_ != state)
            log::error("mig-manager: setting {}={} on node {}: {} (trying again every 5 s)", mig::kStateLabel, state,
                       f_.node_name, why);
        unwritten_state_ = state;
    }

    std::optional<std::vector<mig::PodUse>> pod_uses() {
        inventory::DiscoveryOptions d;
        d.topology = false;
        auto node = inventory::discover(session_, d);
        if (!node) return std::nullopt;
        auto map = pods_.list(*node);
        if (!map) return std::nullopt;
        std::vector<mig::PodUse> out;
        for (const auto& u : map->uses)
            out.push_back({u.target.gpu_index, u.target.gpu_instance_id, u.pod.namespace_name + "/" + u.pod.pod});
        return out;
    }

    // A signal (stop) or a new label value (the run in progress gives way).
    bool interrupted() {
        timespec zero{0, 0};
        if (const int sig = sigtimedwait(&mask_, nullptr, &zero); sig > 0) {
            log::info("mig-manager: {}: stopping", strsignal(sig));
            stopping_ = true;
        }
        std::lock_guard lk(shared_.mu);
        return stopping_.load() || shared_.fresh;
    }

    // The reboot: the command, then up to 5 minutes for the shutdown to stop this process
    // (SIGTERM: the node is going down, say nothing more); still running after that, it did not.
    std::string reboot() {
        const auto& argv = settings_.reboot_argv;
        process::RunOptions ro;
        ro.argv = argv;
        ro.timeout = std::chrono::seconds(60);
        auto r = process::run(ro);
        if (!r) return r.error().message;
        if (r->exit_code != 0) return fmt::format("{} exited {}: {}", fmt::join(argv, " "), r->exit_code, r->err);
        for (int i = 0; i < 300; ++i) {
            timespec one{1, 0};
            if (const int sig = sigtimedwait(&mask_, nullptr, &one); sig > 0) {
                log::info("mig-manager: {}: the node is going down", strsignal(sig));
                stopping_ = true;
                return "";
            }
        }
        return fmt::format("the node was still up 5 minutes after `{}`", fmt::join(argv, " "));
    }

    const MigManagerFlags& f_;
    const Settings settings_;
    const sigset_t mask_;
    nvml::Session session_;
    std::shared_ptr<kube::Client> api_;
    kube::EventRecorder events_;
    exporter::PodResourcesClient pods_;
    Shared shared_;
    std::unique_ptr<kube::NodeWatch> watch_;  // after shared_: its callback writes there until it stops
    std::optional<std::string> unwritten_state_;
    std::atomic<bool> stopping_{false};
    unsigned long events_recorded_ = 0;
    bool first_ = true;
    std::optional<std::string> cut_short_;  // the config of a run a new label value interrupted
};

}  // namespace

int run_mig_manager(const MigManagerFlags& f) {
    auto settings = settings_from(f);
    if (!settings) {
        std::cerr << "kgpu mig-manager: " << settings.error().message << "\n";
        return 2;
    }
    // Blocked before any thread starts (NVML's own included), so each one inherits the mask and
    // SIGTERM reaches the loop, which ends the run cleanly.
    const sigset_t mask = process::block_signals({SIGTERM, SIGINT});
    auto session = open_nvml(f.nvml);
    if (!session) {
        std::cerr << "kgpu mig-manager: " << session.error().message << "\n";
        return 1;
    }
    auto config = kube::resolve_config(f.kubeconfig);
    if (!config) {
        std::cerr << "kgpu mig-manager: " << config.error().message << "\n";
        return 1;
    }
    auto api = std::make_shared<kube::Client>(std::move(*config), std::chrono::seconds(10));
    Follower follower(f, std::move(*settings), mask, std::move(*session), std::move(api));
    return follower.run();
}

}  // namespace kgpu::cli
