// NVLink islands under churn (issue #13): over random sequences of 1- and 2-GPU requests and
// releases on each simulated fixture, the share of 2-GPU requests that get an NVLink pair when
// preferred allocation is
//   lowest-index   the lowest free indices (no topology; what a plugin without
//                  GetPreferredAllocation gets, and NVIDIA's choice for one GPU),
//   kgpu-before    kgpu's score search without the island rules (before #13: pairs for 2-GPU
//                  requests, the lowest index for 1-GPU requests),
//   kgpu           with the island rules (prefer GPUs whose NVLink partners are taken, then the
//                  smallest intact island).
// The topology comes from the real path: `kgpu info --json` on the simulator (dlopen).
// Run: <build>/bench/kgpu_allocator_islands [steps] [runs]   (defaults 20000 steps, 7 runs;
// medians over the runs, each run one seed shared by the three policies).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "deviceplugin/allocator.h"
#include "support/process.h"

namespace {

using namespace kgpu;

struct Fixture {
    std::string name;
    deviceplugin::Resource resource;
    inventory::Topology topo;
    std::vector<std::vector<bool>> nvlink;  // pairs with NVLink
    bool any_nvlink = false;
};

Fixture load(const std::string& name) {
    Fixture f;
    f.name = name;
    auto r = test::run_process({KGPU_BINARY, "info", "--json", "--nvml-library", KGPU_SIM_LIBRARY},
                               {{"KGPU_SIM_NODE", std::string(KGPU_SOURCE_DIR) + "/sim/nodes/" + name}});
    if (r.exit_code != 0) {
        std::fprintf(stderr, "kgpu info failed for %s: %s\n", name.c_str(), r.err.c_str());
        std::exit(1);
    }
    const auto info = nlohmann::json::parse(r.out);
    const auto& gpus = info.at("gpus");
    const unsigned n = static_cast<unsigned>(gpus.size());
    f.resource.name = "nvidia.com/gpu";
    for (const auto& g : gpus) {
        deviceplugin::Device d;
        d.id = d.physical_id = d.uuid = g.at("uuid").get<std::string>();
        d.gpu_index = g.at("index").get<unsigned>();
        if (!g.at("numa_node").is_null()) d.numa = g.at("numa_node").get<int>();
        f.resource.devices.push_back(d);
    }
    f.resource.reindex();
    f.topo = inventory::Topology(n);
    f.nvlink.assign(n, std::vector<bool>(n, false));
    for (const auto& p : info.at("topology").at("pairs")) {
        const unsigned a = p.at("gpu_a").get<unsigned>(), b = p.at("gpu_b").get<unsigned>();
        const unsigned nv = p.at("nvlink_count").get<unsigned>();
        const int level = p.at("pcie_level_value").get<int>();
        f.topo.at(a, b) = f.topo.at(b, a) = inventory::Link{nv, static_cast<inventory::PcieLevel>(level)};
        f.nvlink[a][b] = f.nvlink[b][a] = nv > 0;
        f.any_nvlink |= nv > 0;
    }
    return f;
}

// Not a fixture: n PCIe cards with NVLink bridges in pairs (like pcie-nvlink-pairs, larger),
// two cards per switch, half the cards per socket.
Fixture synthetic_pairs(unsigned n) {
    Fixture f;
    f.name = fmt::format("synthetic {}x pairs", n);
    f.resource.name = "nvidia.com/gpu";
    for (unsigned i = 0; i < n; ++i) {
        deviceplugin::Device d;
        d.id = d.physical_id = d.uuid = fmt::format("GPU-{:02}", i);
        d.gpu_index = i;
        d.numa = static_cast<int>(i < n / 2 ? 0 : 1);
        f.resource.devices.push_back(d);
    }
    f.resource.reindex();
    f.topo = inventory::Topology(n);
    f.nvlink.assign(n, std::vector<bool>(n, false));
    for (unsigned a = 0; a < n; ++a)
        for (unsigned b = a + 1; b < n; ++b) {
            inventory::Link l{0, (a < n / 2) == (b < n / 2) ? inventory::PcieLevel::hostbridge
                                                            : inventory::PcieLevel::system};
            if (a / 2 == b / 2) l = {4, inventory::PcieLevel::single};
            f.topo.at(a, b) = f.topo.at(b, a) = l;
            f.nvlink[a][b] = f.nvlink[b][a] = l.nvlinks > 0;
        }
    f.any_nvlink = true;
    return f;
}

enum class Policy { lowest_index, kgpu_before, kgpu };

struct Outcome {
    long pair_requests = 0, nvlink_pairs = 0, pair_possible = 0;
};

Outcome simulate(const Fixture& f, Policy policy, unsigned steps, unsigned seed) {
    const size_t n = f.resource.devices.size();
    deviceplugin::Allocator allocator(f.resource, f.topo);
    allocator.set_island_aware(policy == Policy::kgpu);
    std::mt19937 rng(seed);
    std::vector<bool> used(n, false);
    std::vector<std::vector<size_t>> live;  // allocations, oldest first
    Outcome res;
    for (unsigned step = 0; step < steps; ++step) {
        const unsigned r = static_cast<unsigned>(rng() % 100);
        const int size = (rng() % 100) < 60 ? 1 : 2;  // 60 % single-GPU pods
        const size_t free = static_cast<size_t>(std::count(used.begin(), used.end(), false));
        // Release with probability 45 %, or when the request does not fit.
        if (!live.empty() && (r < 45 || free < static_cast<size_t>(size))) {
            const size_t k = rng() % live.size();
            for (size_t p : live[k]) used[p] = false;
            live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
            continue;
        }
        if (free < static_cast<size_t>(size)) continue;
        std::vector<size_t> pick;
        if (policy == Policy::lowest_index) {
            for (size_t p = 0; p < n && pick.size() < static_cast<size_t>(size); ++p)
                if (!used[p]) pick.push_back(p);
        } else {
            std::vector<std::string> avail;
            for (size_t p = 0; p < n; ++p)
                if (!used[p]) avail.push_back(f.resource.devices[p].id);
            auto ids = allocator.prefer(avail, {}, size);
            if (!ids) {
                std::fprintf(stderr, "prefer failed: %s\n", ids.error().message.c_str());
                std::exit(1);
            }
            for (const auto& id : *ids) pick.push_back(static_cast<size_t>(f.resource.find(id) - f.resource.devices.data()));
        }
        if (size == 2) {
            ++res.pair_requests;
            if (f.nvlink[f.resource.devices[pick[0]].gpu_index][f.resource.devices[pick[1]].gpu_index]) ++res.nvlink_pairs;
            bool possible = false;  // was any NVLink pair free at all?
            for (size_t a = 0; a < n && !possible; ++a)
                for (size_t b = a + 1; b < n && !possible; ++b) possible = !used[a] && !used[b] && f.nvlink[a][b];
            res.pair_possible += possible;
        }
        for (size_t p : pick) used[p] = true;
        live.push_back(pick);
    }
    return res;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    const unsigned steps = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 20000;
    const unsigned runs = argc > 2 ? static_cast<unsigned>(std::atoi(argv[2])) : 7;
    fmt::print("2-GPU requests that got an NVLink pair ({} steps x {} runs, medians; 60 % 1-GPU requests,\n"
               "45 % releases)\n\n",
               steps, runs);
    fmt::print("{:<24} {:>13} {:>13} {:>13} {:>16}\n", "fixture", "lowest-index", "kgpu-before", "kgpu",
               "pair was free");
    std::vector<Fixture> fixtures;
    for (const char* name : {"pcie-nvlink-pairs.yaml", "dgx-h100.yaml", "a100-mig.yaml", "t4x4.yaml"})
        fixtures.push_back(load(name));
    fixtures.push_back(synthetic_pairs(8));
    fixtures.push_back(synthetic_pairs(16));
    for (const Fixture& f : fixtures) {
        const std::string& name = f.name;
        std::vector<double> share[3], possible;
        for (unsigned run = 0; run < runs; ++run) {
            const unsigned seed = 1000 + run;
            const Policy policies[] = {Policy::lowest_index, Policy::kgpu_before, Policy::kgpu};
            for (int p = 0; p < 3; ++p) {
                const Outcome r = simulate(f, policies[p], steps, seed);
                share[p].push_back(r.pair_requests ? 100.0 * static_cast<double>(r.nvlink_pairs) /
                                                         static_cast<double>(r.pair_requests)
                                                   : 0.0);
                if (p == 2)
                    possible.push_back(r.pair_requests ? 100.0 * static_cast<double>(r.pair_possible) /
                                                             static_cast<double>(r.pair_requests)
                                                       : 0.0);
            }
        }
        if (!f.any_nvlink) {
            fmt::print("{:<24} {:>13} {:>13} {:>13} {:>16}\n", name, "-", "-", "-", "(no NVLink)");
            continue;
        }
        fmt::print("{:<24} {:>12.1f}% {:>12.1f}% {:>12.1f}% {:>15.1f}%\n", name, median(share[0]), median(share[1]),
                   median(share[2]), median(possible));
    }
    fmt::print("\n'pair was free': with kgpu, the share of 2-GPU requests that arrived while some NVLink pair\n"
               "was entirely free (the ceiling for any policy given that history).\n");
    return 0;
}
