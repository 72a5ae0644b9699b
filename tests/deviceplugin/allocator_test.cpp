#include "deviceplugin/allocator.h"

#include <bit>
#include <cstdint>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace kgpu::deviceplugin {
namespace {

using inventory::PcieLevel;

std::string id_of(unsigned i) { return fmt::format("GPU-{:02}", i); }

Resource resource_of(const std::vector<std::optional<int>>& numa) {
    Resource r;
    r.name = "nvidia.com/gpu";
    for (unsigned i = 0; i < numa.size(); ++i) {
        Device d;
        d.id = d.physical_id = d.uuid = id_of(i);
        d.gpu_index = d.minor = i;
        d.numa = numa[i];
        r.devices.push_back(d);
    }
    r.reindex();
    return r;
}

void link(inventory::Topology& t, unsigned a, unsigned b, unsigned nvlinks, PcieLevel pcie) {
    t.at(a, b) = t.at(b, a) = inventory::Link{nvlinks, pcie};
}

std::vector<std::string> ids(std::initializer_list<unsigned> idx) {
    std::vector<std::string> out;
    for (unsigned i : idx) out.push_back(id_of(i));
    return out;
}

std::vector<std::string> all_ids(unsigned n) {
    std::vector<std::string> out;
    for (unsigned i = 0; i < n; ++i) out.push_back(id_of(i));
    return out;
}

// pcie-nvlink-pairs.yaml: NVLink 0-1 and 2-3 (12 links), each pair behind one switch, SYS across;
// GPUs 0,1 on NUMA 0 and 2,3 on NUMA 1.
struct Pairs {
    Resource resource = resource_of({0, 0, 1, 1});
    inventory::Topology topo{4};
    Pairs() {
        for (unsigned a = 0; a < 4; ++a)
            for (unsigned b = a + 1; b < 4; ++b) link(topo, a, b, 0, PcieLevel::system);
        link(topo, 0, 1, 12, PcieLevel::single);
        link(topo, 2, 3, 12, PcieLevel::single);
    }
};

TEST(DevicePluginAllocator, PairScores) {
    EXPECT_EQ(pair_score({2, PcieLevel::system}), 200);
    EXPECT_EQ(pair_score({0, PcieLevel::internal}), 60);
    EXPECT_EQ(pair_score({0, PcieLevel::single}), 50);
    EXPECT_EQ(pair_score({0, PcieLevel::multiple}), 40);
    EXPECT_EQ(pair_score({0, PcieLevel::hostbridge}), 30);
    EXPECT_EQ(pair_score({0, PcieLevel::node}), 20);
    EXPECT_EQ(pair_score({0, PcieLevel::system}), 10);
    EXPECT_EQ(pair_score({0, PcieLevel::unknown}), 0);
}

TEST(DevicePluginAllocator, PicksTheNvlinkPair) {
    Pairs p;
    Allocator a(p.resource, p.topo);
    EXPECT_EQ(a.prefer(all_ids(4), {}, 2), ids({0, 1}));
    EXPECT_EQ(a.prefer(ids({1, 2, 3}), {}, 2), ids({2, 3}));
    EXPECT_EQ(a.prefer(ids({0, 2, 3, 1}), {}, 2), ids({0, 1}));  // order of available does not matter
    EXPECT_EQ(a.prefer(all_ids(4), ids({3}), 2), ids({2, 3}));   // must_include honoured
    EXPECT_EQ(a.prefer(all_ids(4), ids({1}), 2), ids({0, 1}));
    EXPECT_EQ(a.prefer(all_ids(4), ids({1, 2}), 2), ids({1, 2}));
    EXPECT_EQ(a.prefer(all_ids(4), {}, 3), ids({0, 1, 2}));      // tie on score and NUMA: lowest indices
    EXPECT_EQ(a.prefer(all_ids(4), ids({3}), 3), ids({0, 1, 3}));  // 1220 each way: lowest indices
    EXPECT_EQ(a.prefer(ids({0, 2, 3}), ids({3}), 2), ids({2, 3}));
    EXPECT_EQ(a.prefer(all_ids(4), {}, 4), all_ids(4));
    EXPECT_EQ(preferred_allocation(p.resource, p.topo, all_ids(4), {}, 2), ids({0, 1}));
    EXPECT_EQ(a.score(ids({0, 1})), 1200);
    EXPECT_EQ(a.numa_nodes(ids({1, 2})), 2);
}

TEST(DevicePluginAllocator, NumaBreaksScoreTies) {
    // HGX-like: all pairs NV18 through NVSwitch, GPUs 0-3 on NUMA 0, 4-7 on NUMA 1.
    Resource r = resource_of({0, 0, 0, 0, 1, 1, 1, 1});
    inventory::Topology t(8);
    for (unsigned a = 0; a < 8; ++a)
        for (unsigned b = a + 1; b < 8; ++b) link(t, a, b, 18, a / 4 == b / 4 ? PcieLevel::node : PcieLevel::system);
    Allocator a(r, t);
    EXPECT_EQ(a.prefer(all_ids(8), {}, 4), ids({0, 1, 2, 3}));
    EXPECT_EQ(a.prefer(ids({2, 3, 4, 5, 6}), {}, 3), ids({4, 5, 6}));
    EXPECT_EQ(a.prefer(ids({2, 3, 4, 5, 6}), ids({2}), 2), ids({2, 3}));
    EXPECT_EQ(a.prefer(ids({2, 4, 5, 6}), ids({2}), 2), ids({2, 4}));
}

// Issue #13: a 1-GPU request took the lowest free GPU and broke NVLink pairs a later 2-GPU pod
// needs. Prefer GPUs whose partners are taken, then the smallest intact island.
TEST(DevicePluginAllocator, KeepsNvlinkIslandsWhole) {
    Pairs p;
    Allocator a(p.resource, p.topo);
    EXPECT_EQ(a.prefer(ids({1, 2, 3}), {}, 1), ids({1}));  // GPU 0 taken: its partner, pair 2-3 stays
    EXPECT_EQ(a.prefer(ids({0, 1, 3}), {}, 1), ids({3}));  // GPU 2 taken: GPU 3, not GPU 0
    EXPECT_EQ(a.prefer(all_ids(4), {}, 1), ids({0}));      // all pairs whole: the lowest index
    EXPECT_EQ(a.prefer(ids({0, 1, 3}), {}, 2), ids({0, 1}));  // the pair, as before
    // A GPU without NVLink is the smallest island: taken before any pair is broken.
    Resource r5 = resource_of({0, 0, 1, 1, 1});
    inventory::Topology t5(5);
    for (unsigned x = 0; x < 5; ++x)
        for (unsigned y = x + 1; y < 5; ++y) link(t5, x, y, 0, PcieLevel::system);
    link(t5, 0, 1, 4, PcieLevel::single);
    link(t5, 2, 3, 4, PcieLevel::single);
    Allocator b(r5, t5);
    EXPECT_EQ(b.prefer(all_ids(5), {}, 1), ids({4}));
    // Chain 2-3-4 (an island of 3) and pair 0-1: GPU 2 or 0 break as much; the pair is the smaller island.
    link(t5, 3, 4, 4, PcieLevel::single);
    Allocator c(r5, t5);
    EXPECT_EQ(c.prefer(all_ids(5), {}, 1), ids({0}));
    EXPECT_EQ(c.prefer(ids({1, 2, 3, 4}), {}, 1), ids({1}));
    // Switched off (kgpu before #13): the lowest index.
    Allocator plain(p.resource, p.topo);
    plain.set_island_aware(false);
    EXPECT_EQ(plain.prefer(ids({0, 1, 3}), {}, 1), ids({0}));
}

TEST(DevicePluginAllocator, Errors) {
    Pairs p;
    Allocator a(p.resource, p.topo);
    struct Case {
        std::vector<std::string> available, must;
        int size;
        std::string needle;
    };
    const Case cases[] = {
        {all_ids(4), {}, 0, "less than 1"},
        {all_ids(4), {}, -3, "less than 1"},
        {ids({0, 1}), {}, 3, "larger than the 2 available"},
        {ids({0, 1}), ids({2}), 2, "'GPU-02' is not in available"},
        {{"GPU-00", "GPU-zz"}, {}, 1, "unknown device ID 'GPU-zz'"},
        {all_ids(4), {"GPU-zz"}, 1, "unknown device ID 'GPU-zz' in must_include"},
        {{"GPU-00", "GPU-01", "GPU-00"}, {}, 1, "duplicate device ID 'GPU-00'"},
        {all_ids(4), ids({1, 1}), 2, "duplicate device ID 'GPU-01' in must_include"},
        {all_ids(4), ids({0, 1, 2}), 2, "more than the allocation size 2"},
    };
    for (const Case& c : cases) {
        auto r = a.prefer(c.available, c.must, c.size);
        ASSERT_FALSE(r.has_value()) << c.needle;
        EXPECT_EQ(r.error().code, Code::invalid_argument);
        EXPECT_NE(r.error().message.find(c.needle), std::string::npos) << r.error().message;
    }
    EXPECT_FALSE(a.score({"nope"}).has_value());
}

TEST(DevicePluginAllocator, GpuOutsideTheTopologyScoresZero) {
    Resource r = resource_of({0, 0, 0});
    inventory::Topology t(2);
    link(t, 0, 1, 0, PcieLevel::single);
    Allocator a(r, t);
    EXPECT_EQ(a.score(ids({0, 2})), 0);
    EXPECT_EQ(a.prefer(ids({2, 1, 0}), ids({2}), 2), ids({0, 2}));
}

// ---- brute force over random topologies -------------------------------------------------------

struct Random {
    Resource resource;
    inventory::Topology topo;
    std::vector<int> w;  // n x n
    std::vector<int> numa_group;
};

Random random_node(unsigned n, std::mt19937& rng, int style) {
    Random r;
    std::vector<std::optional<int>> numa(n);
    std::uniform_int_distribution<int> numa_d(0, 2);
    for (auto& x : numa) {
        const int v = numa_d(rng);
        if (v < 2) x = v;  // 2: unknown
    }
    r.resource = resource_of(numa);
    r.topo = inventory::Topology(n);
    const PcieLevel levels[] = {PcieLevel::internal, PcieLevel::single,    PcieLevel::multiple, PcieLevel::hostbridge,
                                PcieLevel::node,     PcieLevel::system,    PcieLevel::unknown};
    std::uniform_int_distribution<int> level_d(0, 6), nv_d(0, 3), coin(0, 3);
    for (unsigned a = 0; a < n; ++a)
        for (unsigned b = a + 1; b < n; ++b) {
            unsigned nv = 0;
            PcieLevel pl = levels[level_d(rng)];
            if (style == 0 && coin(rng) == 0) nv = static_cast<unsigned>(nv_d(rng)) + 1;  // sparse NVLink
            if (style == 1) nv = 2, pl = PcieLevel::system;                             // all equal: ties
            if (style == 2 && (a / 2 == b / 2)) nv = 4;                                  // pairs
            link(r.topo, a, b, nv, pl);
        }
    r.w.assign(n * n, 0);
    for (unsigned a = 0; a < n; ++a)
        for (unsigned b = 0; b < n; ++b)
            if (a != b) r.w[a * n + b] = pair_score(r.topo.at(a, b));
    for (auto& x : numa) r.numa_group.push_back(x ? *x : 2);
    return r;
}

// Score and distinct NUMA groups of every subset (bit i = GPU i).
struct Table {
    std::vector<std::int64_t> score;
    std::vector<std::uint8_t> numa;
};

Table tabulate(const Random& r, unsigned n) {
    Table t;
    t.score.assign(size_t{1} << n, 0);
    t.numa.assign(size_t{1} << n, 0);
    for (std::uint32_t mask = 1; mask < (1u << n); ++mask) {
        const unsigned low = static_cast<unsigned>(std::countr_zero(mask));
        const std::uint32_t rest = mask & (mask - 1);
        std::int64_t s = t.score[rest];
        for (unsigned j = low + 1; j < n; ++j)
            if (rest & (1u << j)) s += r.w[low * n + j];
        t.score[mask] = s;
        unsigned groups = 0;
        for (unsigned j = 0; j < n; ++j)
            if (mask & (1u << j)) groups |= 1u << r.numa_group[j];
        t.numa[mask] = static_cast<std::uint8_t>(std::popcount(groups));
    }
    return t;
}

// NVLink score of a pair (100 per link), the part the island rules look at.
int nvlink(const Random& r, unsigned a, unsigned b) { return a == b ? 0 : 100 * static_cast<int>(r.topo.at(a, b).nvlinks); }

// The specified answer: highest score, then the least NVLink score from the set to available
// GPUs left out, then the smallest sum of the NVLink island sizes (components over the available
// GPUs) of its members, then fewest NUMA groups, then lowest indices.
std::uint32_t brute(const Random& r, const Table& t, unsigned n, std::uint32_t avail, std::uint32_t must, int size) {
    std::vector<int> island(n, 0);
    for (unsigned i = 0; i < n; ++i) {
        if (!(avail & (1u << i))) continue;
        std::uint32_t seen = 1u << i, frontier = seen;
        while (frontier) {
            std::uint32_t next = 0;
            for (unsigned x = 0; x < n; ++x)
                if (frontier & (1u << x))
                    for (unsigned y = 0; y < n; ++y)
                        if ((avail & (1u << y)) && !(seen & (1u << y)) && nvlink(r, x, y) > 0) next |= 1u << y;
            seen |= next;
            frontier = next;
        }
        island[i] = std::popcount(seen);
    }
    struct Key {
        std::int64_t score, broken, islands;
        int numa;
    };
    auto key = [&](std::uint32_t mask) {
        Key k{t.score[mask], 0, 0, t.numa[mask]};
        for (unsigned i = 0; i < n; ++i) {
            if (!(mask & (1u << i))) continue;
            k.islands += island[i];
            for (unsigned j = 0; j < n; ++j)
                if ((avail & (1u << j)) && !(mask & (1u << j))) k.broken += nvlink(r, i, j);
        }
        return k;
    };
    bool found = false;
    Key best{};
    std::uint32_t best_mask = 0;
    for (std::uint32_t mask = 0; mask < (1u << n); ++mask) {
        if ((mask & avail) != mask || (mask & must) != must || std::popcount(mask) != size) continue;
        const Key k = key(mask);
        bool better = !found;
        if (!better) {
            if (k.score != best.score) better = k.score > best.score;
            else if (k.broken != best.broken) better = k.broken < best.broken;
            else if (k.islands != best.islands) better = k.islands < best.islands;
            else if (k.numa != best.numa) better = k.numa < best.numa;
            else {
                const std::uint32_t diff = mask ^ best_mask;
                better = diff != 0 && (mask & (diff & (~diff + 1))) != 0;
            }
        }
        if (better) best = k, best_mask = mask, found = true;
    }
    return best_mask;
}

std::vector<std::string> ids_of_mask(std::uint32_t mask, unsigned n) {
    std::vector<std::string> out;
    for (unsigned i = 0; i < n; ++i)
        if (mask & (1u << i)) out.push_back(id_of(i));
    return out;
}

void check_against_brute_force(unsigned n, unsigned seed, int style, int random_queries) {
    std::mt19937 rng(seed);
    const Random r = random_node(n, rng, style);
    const Table t = tabulate(r, n);
    Allocator a(r.resource, r.topo);
    const std::uint32_t full = (1u << n) - 1;
    for (int size = 1; size <= static_cast<int>(n); ++size) {
        const std::uint32_t want = brute(r, t, n, full, 0, size);
        auto got = a.prefer(all_ids(n), {}, size);
        ASSERT_TRUE(got.has_value()) << got.error().message;
        EXPECT_EQ(*a.score(*got), t.score[want]) << "n=" << n << " seed=" << seed << " size=" << size;
        EXPECT_EQ(*got, ids_of_mask(want, n)) << "n=" << n << " seed=" << seed << " size=" << size;
    }
    std::uniform_int_distribution<std::uint32_t> mask_d(0, full);
    for (int q = 0; q < random_queries; ++q) {
        const std::uint32_t avail = mask_d(rng) | 1u;
        const int count = std::popcount(avail);
        const std::uint32_t must = avail & mask_d(rng) & mask_d(rng);
        const int lo = std::max(1, std::popcount(must));
        const int size = lo + static_cast<int>(rng() % static_cast<unsigned>(count - lo + 1));
        const std::uint32_t want = brute(r, t, n, avail, must, size);
        // Shuffle the request order: the answer must not depend on it.
        auto available = ids_of_mask(avail, n);
        std::shuffle(available.begin(), available.end(), rng);
        auto got = a.prefer(available, ids_of_mask(must, n), size);
        ASSERT_TRUE(got.has_value()) << got.error().message;
        EXPECT_EQ(*got, ids_of_mask(want, n)) << "n=" << n << " seed=" << seed << " avail=" << avail
                                              << " must=" << must << " size=" << size;
    }
}

TEST(DevicePluginAllocator, MatchesBruteForceUpTo12Gpus) {
    for (unsigned n = 1; n <= 12; ++n)
        for (unsigned seed = 1; seed <= 6; ++seed) check_against_brute_force(n, seed * 1000 + n, static_cast<int>(seed % 3), 20);
}

TEST(DevicePluginAllocator, MatchesBruteForceAt16Gpus) {
    check_against_brute_force(16, 42, 0, 12);
    check_against_brute_force(16, 43, 1, 6);
    check_against_brute_force(16, 44, 2, 6);
}

TEST(DevicePluginAllocator, ConcurrentCallsAgree) {
    std::mt19937 rng(7);
    const Random r = random_node(12, rng, 0);
    const Allocator a(r.resource, r.topo);
    const auto expected = a.prefer(all_ids(12), {}, 5);
    ASSERT_TRUE(expected.has_value());
    std::vector<std::thread> threads;
    std::vector<int> mismatches(4, 0);
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 50; ++i)
                if (a.prefer(all_ids(12), {}, 5) != *expected) ++mismatches[static_cast<size_t>(t)];
        });
    for (auto& th : threads) th.join();
    EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace kgpu::deviceplugin
