// kgpu: parse, dispatch, exit code. Everything else lives in libraries the tests link.
#include <absl/synchronization/mutex.h>

#include "cli/app.h"

int main(int argc, char** argv) {
    // Debian's abseil is built without NDEBUG, so by default every absl::Mutex (all of gRPC's
    // locks) records its lock order in a process-wide graph to detect deadlock cycles: about 5 %
    // of the device plugin's CPU per gRPC call (perf). kIgnore is what an NDEBUG build of abseil
    // does; kgpu's own locks are std::mutex.
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
    return kgpu::cli::run(argc, argv);
}
