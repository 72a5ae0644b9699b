// The e2e suite's view of its one-node Kubernetes cluster (kube-mini, from the workspace's
// ../shared/tools/kube; a test tool, never part of kgpu): where the shared tools are, the state
// the setup test leaves for the cases (tests/e2e/README.md), and small helpers over kube-mini's
// kubectl, containerd's ctr, the kubelet's files and the simulated driver.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "support/files.h"
#include "support/process.h"

namespace kgpu::e2e {

using json = nlohmann::json;
using kgpu::test::RunResult;

// The workspace's shared test tools: env KGPU_SHARED_DIR, else <source>/../shared.
std::string shared_dir();
// Why the suite cannot run here because the shared tools are absent ("" when they are present):
// the only reason it may skip. Anything else missing where they exist is a failure.
std::string tools_absent();
std::string kube_mini_script();  // <shared>/tools/kube/kube-mini.sh

// What the setup test (KubeE2E.Up) leaves for the cases and the cleanup, as JSON in the build tree.
struct State {
    std::string skipped;  // the reason the suite skips; empty when it runs
    std::string base;     // the suite's temp dir (everything the suite makes on the host is under it)
    std::string kube;     // kube-mini's DIR (<base>/k)
    std::map<std::string, std::string> env;  // kube-mini's DIR/env
    std::string kgpu_version;
};
std::string state_file();
bool load_state(State& s, std::string& error);
void save_state(const State& s);

using ::kgpu::test::slurp;  // support/files.h
// Runs argv (argv[0] an absolute path) with extra environment variables, killed after `timeout`.
RunResult run(const std::vector<std::string>& argv, std::chrono::seconds timeout = std::chrono::seconds(60),
              const std::map<std::string, std::string>& env = {});

// Calls `poll` until it returns true or `timeout` passes (every 200 ms); returns the last result.
// Waiting on the cluster's state, not on time: the deadline only bounds a failure.
bool wait_until(const std::function<bool()>& poll, std::chrono::seconds timeout);

class Cluster {
public:
    explicit Cluster(State s) : s_(std::move(s)) {}
    const State& state() const { return s_; }
    std::string env(const std::string& key) const;
    std::string base() const { return s_.base; }

    RunResult kubectl(const std::vector<std::string>& args, std::chrono::seconds timeout = std::chrono::seconds(60)) const;
    // `kubectl get <what...> -o json`; null with `error` set when kubectl fails.
    json get(const std::vector<std::string>& what, std::string* error = nullptr) const;
    // Writes `yaml` to a file under base() and applies it; returns kubectl's result.
    RunResult apply(const std::string& yaml, const std::string& name) const;
    RunResult ctr(const std::vector<std::string>& args, std::chrono::seconds timeout = std::chrono::seconds(60)) const;

    // The node's allocatable nvidia.com/gpu ("" when absent or unreadable).
    std::string allocatable_gpus() const;
    // The pod as JSON (null when absent).
    json pod(const std::string& ns, const std::string& name) const;
    bool pod_ready(const std::string& ns, const std::string& name) const;
    std::string pod_phase(const std::string& ns, const std::string& name) const;
    // The pods of a DaemonSet (by its app.kubernetes.io/name label) in kube-system.
    json daemonset_pods(const std::string& app) const;
    // A container's log as the kubelet wrote it (CRI format stripped), the newest restart.
    std::string container_log(const std::string& ns, const std::string& pod, const std::string& container) const;
    // The events whose involvedObject is the named pod: "reason: message" lines.
    std::vector<std::string> pod_events(const std::string& ns, const std::string& pod) const;
    // The device IDs the kubelet's device manager assigned to a pod's container for a resource
    // (its checkpoint, device-plugins/kubelet_internal_checkpoint).
    std::vector<std::string> assigned_devices(const std::string& pod_uid, const std::string& container,
                                              const std::string& resource = "nvidia.com/gpu") const;
    // The containerd id of a pod's container ("" when not running).
    std::string container_id(const std::string& ns, const std::string& pod, const std::string& container) const;
    // `sh -c script` run inside a running container through containerd (the API server here has
    // no pods/exec). `ctr tasks exec` without a tty has been seen to exit 0 with the output lost
    // (a loaded machine): the script's output is followed by an end marker, and a run whose
    // marker did not come back is run again (up to 3 times; scripts must be safe to repeat).
    // `out` is the script's output without the marker; `exit_code` the script's.
    RunResult exec(const std::string& container_id, const std::string& script) const;
    // Deletes a pod and waits until it is gone.
    bool delete_pod(const std::string& ns, const std::string& name, std::chrono::seconds timeout = std::chrono::seconds(90)) const;

    // Diagnostics for a failure message: pods, the node's GPU figures, the logs' tails.
    std::string describe() const;

private:
    State s_;
};

// The cluster the setup test left, or why a case cannot run: `skip` set when the suite skips
// here, `error` when the setup did not leave a usable cluster.
struct Attached {
    std::optional<Cluster> cluster;
    std::string skip, error;
};
Attached attach();

// The simulated node (sim/nodes/dgx-h100.yaml): GPU UUID -> device minor.
std::map<std::string, unsigned> fixture_minors(const std::string& fixture);
// The nvidia<minor> device nodes in an `ls /dev` listing, sorted.
std::vector<std::string> gpu_nodes(const std::string& ls);
// GPU UUIDs ("GPU-…") named in a text, in order of appearance, without repeats.
std::vector<std::string> uuids_in(const std::string& text);

}  // namespace kgpu::e2e
