// GetPreferredAllocation on whole GPUs (DESIGN.md budget: < 300 us on 8 GPUs, optimal), and on
// replicas / MIG devices (the spreading allocator).
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
    Node node;
    node.resource.name = "nvidia.com/gpu";
    node.topo = inventory::Topology(n);
    for (unsigned i = 0; i < n; ++i) {
        const std::string id = fmt::format("GPU-{:02}", i);
        deviceplugin::Device d;
        d.id = d.physical_id = d.uuid = id;
        d.gpu_index = d.minor = i;
        d.numa = static_cast<int>(i) / numa_per;
        node.resource.devices.push_back(d);
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

// 8 GPUs x 48 replicas (time-slicing) and 8 GPUs x 7 MIG devices: the spreading allocator.
Node shared(unsigned gpus, unsigned per_gpu, bool mig) {
    Node node;
    node.resource.name = "nvidia.com/gpu";
    node.resource.replicas = mig ? 1 : per_gpu;
    node.topo = inventory::Topology(gpus);
    for (unsigned g = 0; g < gpus; ++g) {
        for (unsigned k = 0; k < per_gpu; ++k) {
            deviceplugin::Device d;
            d.gpu_index = d.minor = g;
            d.numa = static_cast<int>(g / (gpus / 2));
            if (mig) {
                d.uuid = d.id = d.physical_id = fmt::format("{}:{}", g, k);
                d.mig = deviceplugin::MigInstance{k, 7 + k, 0, "1g.10gb", std::nullopt, std::nullopt, ""};
            } else {
                d.uuid = fmt::format("GPU-{:02}", g);
                d.physical_id = d.uuid;
                d.id = fmt::format("{}::{}", d.uuid, k);
                d.replica = k;
            }
            node.resource.devices.push_back(d);
            node.ids.push_back(d.id);
        }
    }
    node.resource.reindex();
    return node;
}

void BM_Prefer_Replicas8x48(benchmark::State& s) { static const Node n = shared(8, 48, false); run(s, n); }
void BM_Prefer_Mig8x7(benchmark::State& s) { static const Node n = shared(8, 7, true); run(s, n); }

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
BENCHMARK(BM_Prefer_Replicas8x48)->Arg(1)->Arg(8)->Arg(48)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Prefer_Mig8x7)->Arg(1)->Arg(4)->Arg(8)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AllocatorBuild16)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
