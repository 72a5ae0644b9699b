// `kgpu mps-control-daemon`'s core: one MPS control daemon per MPS-shared resource, started as
// NVIDIA's daemon starts it and kept alive (NVIDIA's is started once and never looked at again).
//
// Starting one (NVIDIA's order): every GPU of the resource to EXCLUSIVE_PROCESS, the pipe and
// log directories (the pipe directory labelled for containers when SELinux is on),
// `nvidia-cuda-mps-control -d`, one `set_default_device_pinned_mem_limit <index> <MiB>M` per GPU,
// `set_default_active_thread_percentage <100/replicas>`, then `.started` (and `.ready` once every
// daemon runs).
//
// Keeping it alive: the supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER), so the daemon
// that `-d` forks off becomes its child and its death is seen at once (waitpid), without asking
// it anything; a daemon that is stopped (SIGSTOP, state T) counts as not answering, and every
// probe_interval it is asked `get_default_active_thread_percentage` (a daemon that is alive but
// hung). A daemon that died or does not answer loses `.started` and `.ready` at once (the device
// plugin turns that resource's devices Unhealthy on it), is killed if still there, and is started
// again after a backoff (backoff_initial, doubling up to backoff_max; back to backoff_initial
// after healthy_reset of running). Each state change is written to <resource>/status.json.
//
// Stopping (SIGTERM): each daemon gets `quit`, and nothing more is sent to it; its GPUs go back to
// compute mode DEFAULT and `.started`/`.ready` are removed (as NVIDIA's Stop does; the logs stay).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "mps/mps.h"
#include "nvml/device.h"

namespace kgpu::mps {

// The GPUs' side: compute mode, through NVML in production, recorded in tests.
class ComputeModes {
public:
    virtual ~ComputeModes() = default;
    virtual Status set(const SharedGpu& gpu, nvml::ComputeMode mode) = 0;
};

struct SupervisorOptions {
    Root root;
    std::string control_binary;
    std::chrono::milliseconds command_timeout{std::chrono::seconds(2)};
    std::chrono::milliseconds watch_interval{100};  // how often tick() should run
    std::chrono::milliseconds probe_interval{std::chrono::seconds(10)};
    std::chrono::milliseconds backoff_initial{500};
    std::chrono::milliseconds backoff_max{std::chrono::seconds(30)};
    std::chrono::milliseconds healthy_reset{std::chrono::seconds(60)};
    std::filesystem::path proc_root = "/proc";
};

enum class DaemonState { starting, running, restarting, stopped };
std::string_view to_string(DaemonState s);

struct DaemonStatus {
    std::string resource;
    DaemonState state = DaemonState::starting;
    pid_t pid = 0;            // 0: unknown
    unsigned restarts = 0;    // starts after the first
    std::string last_error;   // why it last went down (empty: never)
    unsigned active_thread_percentage = 100;
    std::vector<PinnedLimit> pinned_limits;
};

class Supervisor {
public:
    // specs must have passed validate().
    Supervisor(std::vector<DaemonSpec> specs, SupervisorOptions options, ComputeModes& modes);
    ~Supervisor() = default;
    Supervisor(const Supervisor&) = delete;
    Supervisor& operator=(const Supervisor&) = delete;

    // Becomes a child subreaper and starts every daemon; one that fails is logged and retried by
    // tick() after the backoff. Errors: io when the MPS root cannot be created.
    Status start();
    // One round: reaps children, notices dead, stopped and (every probe_interval) silent daemons,
    // restarts those whose backoff has passed. Call it every watch_interval.
    void tick();
    // Sends `quit` to every daemon that was started, puts its GPUs back to DEFAULT, removes
    // .started and .ready.
    void stop();

    std::vector<DaemonStatus> status() const;

private:
    struct Slot {
        DaemonSpec spec;
        Control control;
        DaemonStatus status;
        std::chrono::steady_clock::time_point next_start{}, running_since{}, last_probe{};
        std::chrono::milliseconds backoff{0};
        bool ever_started = false;  // `-d` succeeded at least once: stop() sends quit
    };

    void start_one(Slot& s);
    void went_down(Slot& s, const std::string& why);
    void write_status(const Slot& s) const;
    void update_ready() const;
    std::optional<pid_t> find_daemon(const Slot& s) const;
    char process_state(pid_t pid) const;  // from <proc>/<pid>/stat; 0 when gone

    SupervisorOptions opts_;
    ComputeModes& modes_;
    std::vector<Slot> slots_;
};

// What the supervisors of a node wrote: every <root>/<resource>/status.json (resource names of one
// or two levels, "nvidia.com/gpu"), sorted by resource. A daemon whose status says running but
// whose .started is gone counts as restarting (its supervisor died with it). Files that do not
// parse are skipped; what is wrong with each (naming the file) goes to `problems` when given
// (the exporter reads these on every pass and logs each problem once). Errors: none (a missing
// root is an empty list).
std::vector<DaemonStatus> read_statuses(const Root& root, std::vector<std::string>* problems = nullptr);

// Runs the supervisor until SIGTERM, SIGINT or SIGQUIT (returns false) or SIGHUP (returns true:
// the caller reloads its configuration and calls again). On SIGHUP `reload_ok`, when given, is
// asked first, with the daemons still running: false keeps them and the running configuration
// (the caller said why), as the device plugin keeps its own on a bad reload. Blocks those signals
// and SIGCHLD in the calling thread and waits on a signalfd between ticks; the caller must have
// blocked them before starting any other thread (NVML's included), or a signal may go to a thread
// that dies of it. Stops the daemons before returning.
Result<bool> run(Supervisor& supervisor, std::chrono::milliseconds watch_interval,
                 const std::function<bool()>& reload_ok = {});

// Labels `path` system_u:object_r:container_file_t:s0 when SELinux is enabled (/sys/fs/selinux
// exists), so containers may use the MPS pipes, as NVIDIA's daemon does; nothing otherwise.
Status label_for_containers(const std::filesystem::path& path);

}  // namespace kgpu::mps
