// The device plugin's side of MPS sharing (config sharing.mps; docs/device-plugin.md "MPS"):
// which control daemons a node needs. The daemons themselves are src/mps; `kgpu
// mps-control-daemon` runs them from the same configuration the plugin reads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "deviceplugin/resources.h"
#include "inventory/node.h"
#include "mps/mps.h"

namespace kgpu::deviceplugin {

// One control daemon per MPS resource (Resource::mps) of `resources`, with each physical GPU
// once and the number of its replicas; other resources get none (as NVIDIA's manager skips
// resources that are not shared). GPU memory and compute capability come from `node`. MIG devices are
// marked (validate() refuses them). Specs are not validated here.
std::vector<mps::DaemonSpec> mps_daemon_specs(const std::vector<Resource>& resources, const inventory::Node& node);

// Whether `config` shares devices with MPS (a sharing.mps section with a replicated resource).
bool shares_with_mps(const Config& config);

// Whether each MPS resource's control daemon can serve clients, for the health of its devices
// (NVIDIA's plugin asks once at start and then keeps advertising devices nobody can use).
//
// A daemon is up when its `.started` exists and the control binary got an answer to
// `get_default_active_thread_percentage` since that file appeared. `.started` is looked at every
// `watch_interval` (a stat: cheap, nothing logged by MPS): kgpu's mps-control-daemon removes it
// the moment its daemon dies or stops, so the devices turn Unhealthy within that interval, and a
// new `.started` (another inode or time) is a restarted daemon, probed at once. Besides, every
// `probe_interval` the daemon is asked (a hung daemon, or one run by NVIDIA's mps-control-daemon,
// which never removes `.started`); one that does not answer is asked again every
// `retry_interval`.
class MpsWatcher {
public:
    struct State {
        bool up = false;
        std::string reason;  // why it is down (or "answering")
    };
    using Callback = std::function<void(const std::map<std::string, State>&)>;
    struct Options {
        mps::Root root;
        std::string control_binary;  // empty: every daemon is down (the reason says so)
        std::chrono::milliseconds watch_interval{100};
        std::chrono::milliseconds probe_interval{std::chrono::seconds(10)};
        std::chrono::milliseconds retry_interval{500};
        std::chrono::milliseconds command_timeout{std::chrono::seconds(1)};
    };

    // `on_change` is called from the watcher thread after every change, with every resource.
    MpsWatcher(std::vector<std::string> resources, Options options, Callback on_change);
    ~MpsWatcher();
    MpsWatcher(const MpsWatcher&) = delete;
    MpsWatcher& operator=(const MpsWatcher&) = delete;

    // Checks every daemon once (snapshot() reflects it on return), then starts the thread.
    void start();
    void stop();
    std::map<std::string, State> snapshot() const;

private:
    struct Watched {
        std::string resource;
        mps::Control control;
        State state;
        std::string started_key;  // inode and time of the .started the last good answer followed
        std::chrono::steady_clock::time_point last_probe{};
    };
    bool check(Watched& w, std::chrono::steady_clock::time_point now);  // true when the state changed
    void run();

    Options opts_;
    Callback on_change_;
    mutable std::mutex mu_;  // guards the states
    std::vector<Watched> watched_;
    std::mutex stop_mu_;
    std::condition_variable stop_cv_;
    bool stopping_ = false;
    std::thread thread_;
};

}  // namespace kgpu::deviceplugin
