// The device plugin's control object (internal to src/deviceplugin): what plugin.cpp (serving,
// health, Allocate, the control loop) and plugin_config.cpp (the config file, the node label,
// inotify, the paused-GPUs file, Node reporting) share.
#pragma once

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "deviceplugin/plugin.h"
#include "common/fd.h"
#include "common/files.h"
#include "common/log.h"
#include "common/log_once.h"
#include "common/memory.h"
#include "common/process.h"
#include "deviceplugin/allocate.h"
#include "deviceplugin/allocator.h"
#include "deviceplugin/cdi_refresh.h"
#include "deviceplugin/extras.h"
#include "deviceplugin/health.h"
#include "deviceplugin/mig_caps.h"
#include "deviceplugin/mps.h"
#include "deviceplugin/node_events.h"
#include "deviceplugin/paused.h"
#include "deviceplugin/registrar.h"
#include "deviceplugin/resources.h"
#include "deviceplugin/server.h"
#include "inventory/discovery.h"
#include "kube/client.h"
#include "kube/events.h"
#include "kube/node_watch.h"
#include "nvml/library.h"

namespace kgpu::deviceplugin::detail {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// What one resource's handlers read: replaced as a whole (under Plugin::mu_) when the node or
// the configuration changes, so a call in flight keeps the snapshot it started with.
struct EntryState {
    Resource resource;
    std::unique_ptr<Allocator> allocator;
    std::shared_ptr<const Config> config;
};

struct Entry {
    std::string name;
    std::shared_ptr<ResourceServer> server;   // shared with the registrar
    std::shared_ptr<const EntryState> state;  // guarded by Plugin::mu_
};

// Everything that exists while NVML is up. The control thread is the only one that changes
// `entries`; it holds Plugin::mu_ while it does, and the health thread reads under mu_.
// Registration runs on the registrar's own thread (registrar.h).
struct Served {
    std::optional<nvml::Session> session;
    inventory::Node node;
    std::vector<std::unique_ptr<Entry>> entries;
    std::unique_ptr<HealthMonitor> health;
    std::shared_ptr<Registrar> registrar;
    // The MPS resources' control daemons (mps.h), and what it watches ("<root>|<binary>|<names>").
    std::unique_ptr<MpsWatcher> mps;
    std::string mps_key;
};

// Why apply() runs: the error policy differs (see apply()).
enum class Trigger { start, sighup, node_change };

inline bool same_health(const HealthConfig& a, const HealthConfig& b) {
    return a.disabled == b.disabled && a.ignored_xids == b.ignored_xids && a.recoverable_xids == b.recoverable_xids &&
           a.reset_xids == b.reset_xids && a.recovery_period == b.recovery_period;
}

class Plugin {
public:
    explicit Plugin(PluginOptions opts) : opts_(std::move(opts)), settler_(memory::Settler::Policy{.settle = opts_.settle}) {}
    int run();

private:
    // run()'s steps. The signalfd (SIGTERM, SIGINT, SIGHUP) and the MIG change eventfd; false
    // (logged) when either cannot be made.
    bool open_control_fds(const sigset_t& mask);
    // Waits while the device-plugin directory does not exist; false when a signal said stop.
    bool wait_for_plugin_dir();
    // The inotify watch of the device-plugin directory and the kubelet socket's; false (logged)
    // when it cannot be set up.
    bool watch_plugin_dirs();
    // Serving starts (apply); an exit code, or -1 to go on (serving, or retrying later).
    int try_serving(bool first);
    // Until a signal says stop: signals, directory changes, MIG changes, the config label,
    // retries; the exit code.
    int control_loop();
    // Stops everything and returns `code` (or ends the process at once, see stop_serving).
    int finish(int code);

    Status apply(const Config& cfg, Trigger trigger);
    // apply()'s steps. The resources `cfg` makes of `node`, with their warnings logged (once
    // each); an error only where the trigger makes it fatal.
    Result<std::vector<Resource>> resources_for(const Config& cfg, const inventory::Node& node, Trigger trigger);
    // Stops serving the resources not in `wanted` (an empty list first).
    void drop_unwanted(const std::map<std::string, Resource*>& wanted);
    // Takes `wanted`'s resources into the served entries (moved from); the entries made new.
    std::vector<Entry*> update_entries(const std::map<std::string, Resource*>& wanted, const Config& cfg,
                                       const inventory::Node& node);
    // The MPS daemons' and the GPUs' health for the served node; health_ from the first probes.
    void watch_health(const Config& cfg, const nvml::Session& session, const std::vector<std::string>& mps_names);
    // Stops everything served. `exiting` (the process ends next): the health thread gets a
    // short grace to leave NVML's uninterruptible wait; returns false when it did not, and then
    // served_ is left in place (destroying it would wait for the thread) for the caller to end
    // the process with std::_Exit.
    bool stop_serving(bool empty_lists, bool exiting = false);
    void start_servers();
    void on_health(const std::vector<GpuHealth>& health);
    // Posts what changed between health_ and `next` on the Node (node_events.h), when enabled.
    void report_health_locked(const std::vector<GpuHealth>& next);
    // The Event recorder for --node-name/NODE_NAME and an API server configuration, if any.
    void start_node_reporting();
    void on_mps(const std::map<std::string, MpsWatcher::State>& states);
    void watch_mps(const Config& cfg, const std::vector<std::string>& names);
    void publish_locked(Entry& e);
    bool unhealthy_locked(const Resource& r, const Device& d) const;
    v1beta1::ListAndWatchResponse device_list_locked(const Resource& r) const;
    std::shared_ptr<const EntryState> state_of(const Entry& e) const;
    Result<v1beta1::AllocateResponse> allocate(const Entry& e, const v1beta1::AllocateRequest& req) const;
    Result<v1beta1::PreferredAllocationResponse> prefer(const Entry& e,
                                                        const v1beta1::PreferredAllocationRequest& req) const;
    // Re-reads the config file and applies it (SIGHUP); false when the running one stays.
    bool reload();
    // The config file read and resolved with the environment and flags.
    Result<Config> read_config() const;
    // Per-node configs: the config the node label `value` names (config_source.h), applied
    // when it differs from the running one, and the state label set.
    void on_config_label(const std::string& value);
    // At start, with a config source: the node's label read once (5 s at most) and the config
    // chosen before anything is served. Returns an exit code, or -1 to go on.
    int choose_initial_config();
    // Starts the watch of the config label once the directory holds two configs or more: with
    // one, no label can change anything (checked at start and at each control-loop wake-up, at
    // least once a minute).
    void maybe_start_watch();
    // Warns about each unknown key of `cfg` not warned about before (once per key and file).
    void warn_unknown_keys(const Config& cfg);
    void handle_inotify(int fd);
    std::chrono::milliseconds next_timeout() const;
    // The paused-GPUs file (paused.h): its directory added to the inotify watch once it exists
    // (tried at each control-loop wake-up), and the file read again when it changes.
    void watch_paused(int ifd);
    void read_paused();

    PluginOptions opts_;
    // eventfd: the health thread saw a MIG configuration change. Before served_: it outlives the
    // health thread.
    Fd mig_fd_;
    Fd signal_fd_;   // SIGTERM, SIGINT, SIGHUP (blocked for the whole process)
    Fd inotify_fd_;  // the device-plugin directories and the paused-GPUs file's
    std::optional<Served> served_;
    bool nvml_failed_logged_ = false;
    Clock::time_point next_init_{};
    log::Once reported_{4096};  // warnings already logged ("reported once")
    log::Once unknown_warned_{4096};  // "<file>\n<key>" of the unknown keys warned about
    // 10 s after the control loop last did something (serving started, a reload, a label or MIG
    // change), the pages of code and read-only data that start-up brought in go back to the
    // kernel; what serving runs is faulted back on its next call (its functions lie together:
    // src/function-order.txt). Later, once more whenever a burst of Allocate calls has brought
    // back the gRPC path's pages and arenas (memory::Settler's policy).
    memory::Settler settler_;
    void maybe_release_pages();
    void release_later() { settler_.busy(); }

    // Guards served_->entries (structure and states) and health_ against the health thread and
    // the gRPC handlers.
    mutable std::mutex mu_;
    std::vector<GpuHealth> health_;  // by GPU index
    std::map<std::string, bool> mps_up_;  // MPS resource -> its control daemon answers
    CdiSpecRefresher cdi_refresh_;   // the CDI spec follows a driver change (control thread only)
    OwnedSpecs extra_specs_;         // the extra CDI specs this process wrote (extras.h)
    // GPU health Events and the health annotation on the Node (node_events.h); null when off.
    // Its queue never waits for the API server, so the health thread calls it under mu_.
    std::unique_ptr<kube::EventRecorder> events_;
    // The API server (start_node_reporting), the watch of this Node for the config label, and
    // what it saw: label_fd_ (eventfd) wakes the control loop, which reads label_seen_ (these
    // three are declared before the watch: its callback uses them until the watch is gone).
    Fd label_fd_;
    std::mutex label_mu_;
    std::optional<std::string> label_seen_;  // guarded by label_mu_
    std::shared_ptr<kube::Client> api_;
    std::unique_ptr<kube::NodeWatch> watch_;
    bool watch_started_ = false;
    std::string label_applied_;              // control thread only
    log::Once config_warned_{4096};          // config-source warnings already logged
    int paused_wd_ = -1;                     // the paused-GPUs file's directory in the inotify set
    std::set<int> main_wds_;                 // the device-plugin directories' watches
    std::set<std::string> paused_;           // GPU UUIDs paused for a MIG change; guarded by mu_
    std::string paused_error_;               // the file's last parse error (logged once)
};

}  // namespace kgpu::deviceplugin::detail
