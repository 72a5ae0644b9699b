// Discovery time: one full inventory pass (identity, memory, MIG, NUMA, pairwise topology) over
// the real dlopen of the simulator. The simulator answers from memory, so this measures kgpu's
// own cost per pass plus the NVML call overhead, not a real driver's latency.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>

#include "inventory/discovery.h"
#include "nvml/library.h"

namespace {

void discover_fixture(benchmark::State& state, const char* fixture) {
    const std::string node = std::string(KGPU_SOURCE_DIR) + "/sim/nodes/" + fixture;
    ::setenv("KGPU_SIM_NODE", node.c_str(), 1);
    ::unsetenv("KGPU_SIM_EVENTS");
    auto lib = kgpu::nvml::Library::load({KGPU_SIM_LIBRARY, "/"});
    if (!lib) {
        state.SkipWithError(lib.error().message.c_str());
        return;
    }
    auto session = kgpu::nvml::Session::open(*lib);
    if (!session) {
        state.SkipWithError(session.error().message.c_str());
        return;
    }
    kgpu::inventory::DiscoveryOptions opts;
    opts.sysfs_root = "/nonexistent-sysfs";  // NUMA from NVML: no host files involved
    size_t gpus = 0;
    for (auto _ : state) {
        auto n = kgpu::inventory::discover(*session, opts);
        if (!n) {
            state.SkipWithError(n.error().message.c_str());
            return;
        }
        gpus = n->gpus.size();
        benchmark::DoNotOptimize(n);
    }
    state.counters["gpus"] = static_cast<double>(gpus);
}

void BM_DiscoverDgxH100(benchmark::State& s) { discover_fixture(s, "dgx-h100.yaml"); }
void BM_DiscoverA100Mig(benchmark::State& s) { discover_fixture(s, "a100-mig.yaml"); }
BENCHMARK(BM_DiscoverDgxH100)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DiscoverA100Mig)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
