// `kgpu demo`: the whole node-side chain of the seeds on a simulated GPU node, narrated.
//
// In a fresh work dir (mkdtemp under $TMPDIR, else /tmp), without root, it lays out a fake host,
// starts `kgpu device-plugin` and `kgpu exporter` as children of this same binary (/proc/self/exe)
// on the simulated driver library, plays the kubelet (kubelet.h), and walks five steps, each
// printed with what happened and the evidence:
//   1. registration, and nvidia.com/gpu capacity/allocatable from ListAndWatch;
//   2. a 2-GPU pod: GetPreferredAllocation (an NVLink pair) then Allocate (NVIDIA_VISIBLE_DEVICES);
//   3. XID 94 written to the simulator's events file: a GPU goes Unhealthy (allocatable N-1) and
//      recovers after --health-recovery-period;
//   4. the exporter's /metrics, with the demo pod's pod/namespace/container labels;
//   5. `kgpu doctor --root <fake host>` on the same simulated node.
// Teardown always runs (success, failed step, SIGINT/SIGTERM/SIGHUP): children get SIGTERM then SIGKILL
// and are reaped, servers stop, and the work dir is removed unless `keep`.
#pragma once

#include <chrono>
#include <optional>
#include <ostream>
#include <string>

namespace kgpu::demo {

struct Options {
    std::optional<std::string> node;          // fixture path or name; default dgx-h100.yaml next to the binary
    std::optional<std::string> nvml_library;  // the simulator; default next to the binary
    bool keep = false;                        // keep the work dir (logs, fake host) for inspection
    std::chrono::seconds recovery_period{3};  // passed to the device plugin's --health-recovery-period
    std::chrono::seconds step_timeout{20};    // how long one step may wait for its condition
    // The MPS walk instead (docs/demo.md): `kgpu mps-control-daemon` with the simulator's stand-in
    // nvidia-cuda-mps-control, NVIDIA's MPS config with 4 replicas; 1. the daemon's limits and the
    // replicas registered, 2. two pods on one GPU with the pipe directory and their limits, 3. the
    // daemon killed: Unhealthy, restarted, Healthy, 4. kgpu_mps_* and both pods' series.
    bool mps = false;
};

// Runs the demo, narrating to `out` (errors to stderr). Exit code: 0 every step passed; 1 a step
// failed (the message names the step and the evidence, with the tail of the child's log);
// 2 usage or setup error (no simulator, bad node file, node with fewer than 2 GPUs);
// 130/143/129 interrupted by SIGINT/SIGTERM/SIGHUP. An exception is caught: message, teardown,
// exit 1.
int run(const Options& opts, std::ostream& out);

}  // namespace kgpu::demo
