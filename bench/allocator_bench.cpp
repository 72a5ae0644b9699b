// GetPreferredAllocation on whole GPUs (DESIGN.md budget: < 300 us on 8 GPUs, optimal).
// Run: build/release/bench/kgpu_allocator_bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include "deviceplugin/allocator.h"

namespace {

using namespace kgpu;
using inventory::PcieLevel;

struct Node {
    deviceplugin::Resource resource;
    inventory::Topology topo;
    std::vector<std::string> ids;
};

Node make(unsigned n, int numa_per, auto&& link) {
    Node node{{"nvidia.com/gpu", {}}, inventory::Topology(n), {}};
    for (unsigned i = 0; i < n; ++i) {
        const std::string id = fmt::format("GPU-{:02}", i);
        node.resource.devices.push_back(deviceplugin::Device{id, i, id, i, static_cast<int>(i) / numa_per, false});
        node.ids.push_back(id);
    }
    for (unsigned a = 0; a < n; ++a)
        for (unsigned b = a + 1; b < n; ++b) node.topo.at(a, b) = node.topo.at(b, a) = link(a, b);
    return node;
}

// HGX: every pair NV18 through NVSwitch; PCIe NODE within a socket, SYS across.
Node hgx(unsigned n) {
    return make(n, static_cast<int>(n / 2), [n](unsigned a, unsigned b) {
        return inventory::Link{18, (a < n / 2) == (b < n / 2) ? PcieLevel::node : PcieLevel::system};
    });
}

// PCIe cards with NVLink bridges in pairs, two cards per switch, two switches per socket.
Node pairs(unsigned n) {
    return make(n, static_cast<int>(n / 2), [n](unsigned a, unsigned b) {
        if (a / 2 == b / 2) return inventory::Link{4, PcieLevel::single};
        if (a / 4 == b / 4) return inventory::Link{0, PcieLevel::multiple};
        if ((a < n / 2) == (b < n / 2)) return inventory::Link{0, PcieLevel::hostbridge};
        return inventory::Link{0, PcieLevel::system};
    });
}

void run(benchmark::State& state, const Node& node) {
    const deviceplugin::Allocator allocator(node.resource, node.topo);
    const int size = static_cast<int>(state.range(0));
    for (auto _ : state) {
        auto r = allocator.prefer(node.ids, {}, size);
        benchmark::DoNotOptimize(r);
    }
}

void BM_Prefer_HGX8(benchmark::State& s) { static const Node n = hgx(8); run(s, n); }
void BM_Prefer_Pairs8(benchmark::State& s) { static const Node n = pairs(8); run(s, n); }
void BM_Prefer_HGX16(benchmark::State& s) { static const Node n = hgx(16); run(s, n); }
void BM_Prefer_Pairs16(benchmark::State& s) { static const Node n = pairs(16); run(s, n); }

// Building the score matrix once per resource/topology.
void BM_AllocatorBuild16(benchmark::State& state) {
    static const Node n = pairs(16);
    for (auto _ : state) {
        deviceplugin::Allocator a(n.resource, n.topo);
        benchmark::DoNotOptimize(a);
    }
}

}  // namespace

BENCHMARK(BM_Prefer_HGX8)->DenseRange(1, 8)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Prefer_Pairs8)->DenseRange(1, 8)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Prefer_HGX16)->Arg(4)->Arg(8)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Prefer_Pairs16)->Arg(4)->Arg(8)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AllocatorBuild16)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
