// MIG management through NVML (issue #28 part 1): mode changes, GPU and compute instances created
// and destroyed with the driver's placement rules and errors, and the changes seen by every
// process sharing the events file. Placements and profile ids are NVIDIA's MIG user guide's
// (A100 and H100: `nvidia-smi mig -lgipp`).
#include "sim_support.h"
#include "support/files.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace simtest {
namespace {

// NVML_GPU_INSTANCE_PROFILE_* index -> the id an A100/H100 reports, its placements (start list,
// size) and the most instances, as the guide lists them.
struct Expected {
    unsigned index, id;
    std::vector<unsigned> starts;
    unsigned size, max;
};
const std::vector<Expected> kA100 = {
    {0, 19, {0, 1, 2, 3, 4, 5, 6}, 1, 7},  // 1g.10gb
    {7, 20, {0, 1, 2, 3, 4, 5, 6}, 1, 1},  // 1g.10gb+me
    {9, 15, {0, 2, 4, 6}, 2, 4},           // 1g.20gb
    {1, 14, {0, 2, 4}, 2, 3},              // 2g.20gb
    {2, 9, {0, 4}, 4, 2},                  // 3g.40gb
    {3, 5, {0}, 4, 1},                     // 4g.40gb
    {4, 0, {0}, 8, 1},                     // 7g.80gb
};

class SimMigManage : public SimTest {
protected:
    TempDir dir;
    std::string events = dir.file("events");

    void SetUp() override {
        SimTest::SetUp();
        append(events, "");
    }
    unsigned profileId(nvmlDevice_t d, unsigned index) {
        nvmlGpuInstanceProfileInfo_t info{};
        EXPECT_EQ(NV(nvmlDeviceGetGpuInstanceProfileInfo)(d, index, &info), NVML_SUCCESS);
        return info.id;
    }
    nvmlReturn_t setMode(nvmlDevice_t d, unsigned mode, nvmlReturn_t* activation) {
        return NV(nvmlDeviceSetMigMode)(d, mode, activation);
    }
    std::pair<unsigned, unsigned> mode(nvmlDevice_t d) {
        unsigned cur = 9, pend = 9;
        EXPECT_EQ(NV(nvmlDeviceGetMigMode)(d, &cur, &pend), NVML_SUCCESS);
        return {cur, pend};
    }
    // MIG on for GPU `g` of a100-mig.yaml (GPUs 2 and 3 start with it off).
    void enable(unsigned g) {
        nvmlReturn_t activation = -1;
        ASSERT_EQ(setMode(dev(g), NVML_DEVICE_MIG_ENABLE, &activation), NVML_SUCCESS);
        ASSERT_EQ(activation, NVML_SUCCESS);
    }
    nvmlReturn_t create(unsigned g, unsigned index, nvmlGpuInstance_t* gi, std::optional<unsigned> start = {}) {
        const unsigned id = profileId(dev(g), index);
        if (!start) return NV(nvmlDeviceCreateGpuInstance)(dev(g), id, gi);
        const unsigned size = std::find_if(kA100.begin(), kA100.end(), [&](auto& e) { return e.index == index; })->size;
        nvmlGpuInstancePlacement_t p{*start, size};
        return NV(nvmlDeviceCreateGpuInstanceWithPlacement)(dev(g), id, &p, gi);
    }
    nvmlGpuInstanceInfo_t info(nvmlGpuInstance_t gi) {
        nvmlGpuInstanceInfo_t i{};
        EXPECT_EQ(NV(nvmlGpuInstanceGetInfo)(gi, &i), NVML_SUCCESS);
        return i;
    }
    nvmlComputeInstance_t fullCi(nvmlGpuInstance_t gi, unsigned ciIndex) {
        nvmlComputeInstance_t ci = nullptr;
        EXPECT_EQ(NV(nvmlGpuInstanceCreateComputeInstance)(gi, ciIndex, &ci), NVML_SUCCESS);
        return ci;
    }
    // Whether the device lists a compute process (the count query answers INSUFFICIENT_SIZE).
    bool hasProcesses(nvmlDevice_t d) {
        unsigned n = 0;
        return NV(nvmlDeviceGetComputeRunningProcesses_v3)(d, &n, nullptr) == NVML_ERROR_INSUFFICIENT_SIZE;
    }
    std::vector<std::string> migUuids(unsigned g) {
        std::vector<std::string> out;
        for (unsigned i = 0; i < 7; ++i) {
            nvmlDevice_t m = nullptr;
            if (NV(nvmlDeviceGetMigDeviceHandleByIndex)(dev(g), i, &m) == NVML_SUCCESS) out.push_back(uuid(m));
        }
        return out;
    }
};

TEST_F(SimMigManage, ProfileIdsPlacementsAndCountsAreTheGuides) {
    ASSERT_EQ(start(fixture("a100-mig.yaml"), events), NVML_SUCCESS);
    for (unsigned g : {0u, 2u}) {  // MIG on and MIG off: placements are listed either way
        for (const Expected& e : kA100) {
            SCOPED_TRACE("GPU " + std::to_string(g) + " profile index " + std::to_string(e.index));
            nvmlGpuInstanceProfileInfo_t info{};
            ASSERT_EQ(NV(nvmlDeviceGetGpuInstanceProfileInfo)(dev(g), e.index, &info), NVML_SUCCESS);
            EXPECT_EQ(info.id, e.id);
            EXPECT_EQ(info.instanceCount, e.max);
            unsigned count = 0;
            ASSERT_EQ(NV(nvmlDeviceGetGpuInstancePossiblePlacements_v2)(dev(g), e.id, nullptr, &count), NVML_SUCCESS);
            ASSERT_EQ(count, e.starts.size());
            std::vector<nvmlGpuInstancePlacement_t> p(count);
            unsigned small = count - 1;
            EXPECT_EQ(NV(nvmlDeviceGetGpuInstancePossiblePlacements_v2)(dev(g), e.id, p.data(), &small),
                      NVML_ERROR_INSUFFICIENT_SIZE);
            ASSERT_EQ(NV(nvmlDeviceGetGpuInstancePossiblePlacements_v2)(dev(g), e.id, p.data(), &count), NVML_SUCCESS);
            for (unsigned i = 0; i < count; ++i) {
                EXPECT_EQ(p[i].start, e.starts[i]);
                EXPECT_EQ(p[i].size, e.size);
            }
        }
        // Ids that are no profile of the product, and the index space's end.
        unsigned count = 0;
        EXPECT_EQ(NV(nvmlDeviceGetGpuInstancePossiblePlacements_v2)(dev(g), 1, nullptr, &count), NVML_ERROR_NOT_SUPPORTED);
        nvmlGpuInstanceProfileInfo_t info{};
        EXPECT_EQ(NV(nvmlDeviceGetGpuInstanceProfileInfo)(dev(g), NVML_GPU_INSTANCE_PROFILE_COUNT, &info),
                  NVML_ERROR_INVALID_ARGUMENT);
    }
    // A GPU without MIG answers NOT_SUPPORTED for all of it.
    NV(nvmlShutdown)();
    ASSERT_EQ(start(fixture("t4x4.yaml")), NVML_SUCCESS);
    nvmlReturn_t activation = -1;
    EXPECT_EQ(setMode(dev(0), NVML_DEVICE_MIG_ENABLE, &activation), NVML_ERROR_NOT_SUPPORTED);
    unsigned count = 0;
    EXPECT_EQ(NV(nvmlDeviceGetGpuInstancePossiblePlacements_v2)(dev(0), 19, nullptr, &count), NVML_ERROR_NOT_SUPPORTED);
}

TEST_F(SimMigManage, ModeChangesAtOnceWhenIdleAndWaitsForAResetWithProcesses) {
    ASSERT_EQ(start(fixture("a100-mig.yaml"), events), NVML_SUCCESS);
    nvmlReturn_t activation = -1;
    EXPECT_EQ(setMode(dev(2), 7, &activation), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(setMode(dev(2), NVML_DEVICE_MIG_ENABLE, nullptr), NVML_ERROR_INVALID_ARGUMENT);
    // Idle: at once.
    ASSERT_EQ(setMode(dev(2), NVML_DEVICE_MIG_ENABLE, &activation), NVML_SUCCESS);
    EXPECT_EQ(activation, NVML_SUCCESS);
    EXPECT_EQ(mode(dev(2)), std::make_pair(1u, 1u));
    // A process on GPU 3: the new mode is pending until the GPU is reset.
    append(events, "proc 3 4242 1048576\n");
    ASSERT_TRUE(eventually([&] { return hasProcesses(dev(3)); }));
    ASSERT_EQ(setMode(dev(3), NVML_DEVICE_MIG_ENABLE, &activation), NVML_SUCCESS);
    EXPECT_EQ(activation, NVML_ERROR_IN_USE);
    EXPECT_EQ(mode(dev(3)), std::make_pair(0u, 1u));
    unsigned count = 0;
    EXPECT_EQ(NV(nvmlDeviceGetGpuInstanceRemainingCapacity)(dev(3), 19, &count), NVML_ERROR_NOT_SUPPORTED);
    append(events, "noproc 3 4242\nreset 3\n");
    ASSERT_TRUE(eventually([&] { return mode(dev(3)) == std::make_pair(1u, 1u); }));
    // Disabling with GPU instances present is refused; with none it is immediate.
    EXPECT_EQ(setMode(dev(0), NVML_DEVICE_MIG_DISABLE, &activation), NVML_ERROR_IN_USE);
    ASSERT_EQ(setMode(dev(3), NVML_DEVICE_MIG_DISABLE, &activation), NVML_SUCCESS);
    EXPECT_EQ(activation, NVML_SUCCESS);
    EXPECT_EQ(mode(dev(3)), std::make_pair(0u, 0u));
}

TEST_F(SimMigManage, APassedThroughGpuNeedsAResetForEveryModeChange) {
    const std::string node = dir.write("vm.yaml", [] {
        std::ifstream in(fixture("a100-mig.yaml"));
        std::stringstream ss;
        ss << in.rdbuf();
        std::string s = ss.str();
        const std::string off = "mig: {mode: disabled, max_devices: 7}   # MIG capable, currently off";
        s.replace(s.find(off), off.size(), "mig: {mode: disabled, max_devices: 7, reset_required: true}");
        return s;
    }());
    ASSERT_EQ(start(node, events), NVML_SUCCESS);
    nvmlReturn_t activation = -1;
    ASSERT_EQ(setMode(dev(2), NVML_DEVICE_MIG_ENABLE, &activation), NVML_SUCCESS);
    EXPECT_EQ(activation, NVML_ERROR_RESET_REQUIRED);
    EXPECT_EQ(mode(dev(2)), std::make_pair(0u, 1u));
    append(events, "reset 2\n");
    ASSERT_TRUE(eventually([&] { return mode(dev(2)) == std::make_pair(1u, 1u); }));
}

TEST_F(SimMigManage, AutomaticPlacementIsTheDriversSoTheBigInstanceMustComeFirst) {
    ASSERT_EQ(start(fixture("a100-mig.yaml"), events), NVML_SUCCESS);
    enable(2);
    // The guide's example: 1g, 1g, 2g, then 3g fails with INSUFFICIENT_RESOURCES...
    nvmlGpuInstance_t gi[4] = {};
    ASSERT_EQ(create(2, 0, &gi[0]), NVML_SUCCESS);
    ASSERT_EQ(create(2, 0, &gi[1]), NVML_SUCCESS);
    ASSERT_EQ(create(2, 1, &gi[2]), NVML_SUCCESS);
    EXPECT_EQ(create(2, 2, &gi[3]), NVML_ERROR_INSUFFICIENT_RESOURCES);
    EXPECT_EQ(info(gi[0]).placement.start, 6u);
    EXPECT_EQ(info(gi[1]).placement.start, 0u);
    EXPECT_EQ(info(gi[2]).placement.start, 4u);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(NV(nvmlGpuInstanceDestroy)(gi[i]), NVML_SUCCESS);
    EXPECT_EQ(NV(nvmlGpuInstanceDestroy)(gi[0]), NVML_ERROR_INVALID_ARGUMENT);  // stale handle
    // ... while 3g first fits them all: 3g at 4, 2g at 0, 1g at 2 and 3 (the GI ids follow the place).
    ASSERT_EQ(create(2, 2, &gi[3]), NVML_SUCCESS);
    ASSERT_EQ(create(2, 1, &gi[2]), NVML_SUCCESS);
    ASSERT_EQ(create(2, 0, &gi[0]), NVML_SUCCESS);
    ASSERT_EQ(create(2, 0, &gi[1]), NVML_SUCCESS);
    std::map<unsigned, std::pair<unsigned, unsigned>> byId;  // GI id -> profile id, start
    for (auto g : gi) byId[info(g).id] = {info(g).profileId, info(g).placement.start};
    EXPECT_EQ(byId, (std::map<unsigned, std::pair<unsigned, unsigned>>{{2, {9, 4}}, {3, {14, 0}}, {9, {19, 2}}, {10, {19, 3}}}));
    unsigned left = 9;
    ASSERT_EQ(NV(nvmlDeviceGetGpuInstanceRemainingCapacity)(dev(2), 19, &left), NVML_SUCCESS);
    EXPECT_EQ(left, 0u);
    ASSERT_EQ(NV(nvmlDeviceGetGpuInstanceRemainingCapacity)(dev(2), 9, &left), NVML_SUCCESS);
    EXPECT_EQ(left, 0u);
}

TEST_F(SimMigManage, ExplicitPlacementsAreCheckedAgainstTheTableAndTheInstancesThere) {
    ASSERT_EQ(start(fixture("a100-mig.yaml"), events), NVML_SUCCESS);
    enable(2);
    nvmlGpuInstance_t gi = nullptr;
    EXPECT_EQ(create(2, 2, &gi, 2), NVML_ERROR_INVALID_ARGUMENT);  // 3g starts at 0 or 4 only
    EXPECT_EQ(create(2, 0, &gi, 7), NVML_ERROR_INVALID_ARGUMENT);  // no 1g at slice 7
    nvmlGpuInstancePlacement_t wrongSize{0, 2};
    EXPECT_EQ(NV(nvmlDeviceCreateGpuInstanceWithPlacement)(dev(2), 9, &wrongSize, &gi), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(NV(nvmlDeviceCreateGpuInstance)(dev(2), 1, &gi), NVML_ERROR_INVALID_ARGUMENT);  // index, not an id
    ASSERT_EQ(create(2, 3, &gi, 0), NVML_SUCCESS);  // 4g at 0:4
    nvmlGpuInstance_t other = nullptr;
    EXPECT_EQ(create(2, 1, &other, 2), NVML_ERROR_INSUFFICIENT_RESOURCES);  // overlaps the 4g
    EXPECT_EQ(create(2, 3, &other, 0), NVML_ERROR_INSUFFICIENT_RESOURCES);  // one 4g at most
    ASSERT_EQ(create(2, 2, &other, 4), NVML_SUCCESS);                        // 4g + 3g: the whole GPU
    unsigned left = 9;
    for (const Expected& e : kA100) {
        ASSERT_EQ(NV(nvmlDeviceGetGpuInstanceRemainingCapacity)(dev(2), e.id, &left), NVML_SUCCESS);
        EXPECT_EQ(left, 0u) << "profile id " << e.id;
    }
    // MIG off: no instance can be made.
    EXPECT_EQ(NV(nvmlDeviceCreateGpuInstance)(dev(3), 19, &gi), NVML_ERROR_NOT_SUPPORTED);
    // One 1g.10gb+me at most, even where another would not overlap it.
    enable(3);
    nvmlGpuInstance_t me = nullptr;
    ASSERT_EQ(create(3, 7, &me, 0), NVML_SUCCESS);
    EXPECT_EQ(create(3, 7, &me, 1), NVML_ERROR_INSUFFICIENT_RESOURCES);
    EXPECT_EQ(create(3, 0, &me, 1), NVML_SUCCESS);
}

// Every mix of A100 profiles: the simulator accepts it (each instance at the placement a search of
// the guide's table found) exactly when the table allows it, and refuses one that does not fit.
TEST_F(SimMigManage, EveryProfileMixFitsExactlyWhenThePlacementTableSaysSo) {
    ASSERT_EQ(start(fixture("a100-mig.yaml"), events), NVML_SUCCESS);
    enable(2);
    // A non-overlapping placement for each profile of `mix` (indices into kA100), if there is one.
    std::vector<unsigned> starts;
    std::function<bool(const std::vector<unsigned>&, size_t, unsigned)> place =
        [&](const std::vector<unsigned>& mix, size_t i, unsigned used) -> bool {
        if (i == mix.size()) return true;
        const Expected& e = kA100[mix[i]];
        for (unsigned s : e.starts) {
            const unsigned bits = ((1u << e.size) - 1) << s;
            if (used & bits) continue;
            starts.push_back(s);
            if (place(mix, i + 1, used | bits)) return true;
            starts.pop_back();
        }
        return false;
    };
    unsigned mixes = 0, fitting = 0;
    std::vector<unsigned> mix;
    std::function<void(size_t)> each = [&](size_t from) {
        if (!mix.empty()) {
            ++mixes;
            std::map<unsigned, unsigned> per;
            for (unsigned m : mix) ++per[m];
            bool countsOk = true;
            for (auto [m, n] : per) countsOk = countsOk && n <= kA100[m].max;
            starts.clear();
            const bool expected = countsOk && place(mix, 0, 0);
            if (!expected) {  // then any placements will do: some instance must be refused
                starts.clear();
                for (unsigned m : mix) starts.push_back(kA100[m].starts.back());
            }
            std::vector<nvmlGpuInstance_t> made;
            bool ok = true;
            for (size_t i = 0; i < mix.size() && ok; ++i) {
                nvmlGpuInstance_t gi = nullptr;
                ok = create(2, kA100[mix[i]].index, &gi, starts[i]) == NVML_SUCCESS;
                if (ok) made.push_back(gi);
            }
            EXPECT_EQ(ok, expected) << "a mix of " << mix.size() << ", the first profile index " << kA100[mix[0]].index;
            fitting += ok;
            for (auto gi : made) EXPECT_EQ(NV(nvmlGpuInstanceDestroy)(gi), NVML_SUCCESS);
        }
        if (mix.size() == 7) return;
        for (size_t k = from; k < kA100.size(); ++k) {
            mix.push_back(static_cast<unsigned>(k));
            each(k);
            mix.pop_back();
        }
    };
    each(0);
    EXPECT_EQ(mixes, 3431u);  // multisets of 1..7 of the 7 profiles
    // The guide's whole-GPU combinations are among those that fit: 7x 1g, 4g + 3g, 3g + 3g,
    // 3x 2g + 1g, 4x 1g.20gb.
    for (std::vector<unsigned> full : {std::vector<unsigned>(7, 0), {5, 4}, {4, 4}, {3, 3, 3, 0}, {2, 2, 2, 2}})
        EXPECT_TRUE(place(full, 0, 0));
    EXPECT_GT(fitting, 100u);
}

TEST_F(SimMigManage, AComputeInstanceMakesTheMigDeviceAndEveryProcessSeesTheSameIds) {
    ASSERT_EQ(start(fixture("a100-mig.yaml"), events), NVML_SUCCESS);
    enable(2);
    nvmlEventSet_t set = nullptr;
    ASSERT_EQ(NV(nvmlEventSetCreate)(&set), NVML_SUCCESS);
    ASSERT_EQ(NV(nvmlDeviceRegisterEvents)(dev(2), nvmlEventMigConfigChange, set), NVML_SUCCESS);
    nvmlGpuInstance_t gi = nullptr;
    ASSERT_EQ(create(2, 2, &gi, 0), NVML_SUCCESS);
    EXPECT_TRUE(migUuids(2).empty()) << "a GPU instance alone is no MIG device";
    unsigned n = 9;
    EXPECT_EQ(NV(nvmlGpuInstanceGetComputeInstanceRemainingCapacity)(gi, 2, &n), NVML_SUCCESS);
    EXPECT_EQ(n, 1u);
    nvmlComputeInstance_t small = nullptr;
    EXPECT_EQ(NV(nvmlGpuInstanceCreateComputeInstance)(gi, 0, &small), NVML_ERROR_NOT_SUPPORTED);
    nvmlComputeInstance_t ci = fullCi(gi, 2);  // the 3-slice compute instance of a 3g
    ASSERT_NE(ci, nullptr);
    nvmlComputeInstance_t again = nullptr;
    EXPECT_EQ(NV(nvmlGpuInstanceCreateComputeInstance)(gi, 2, &again), NVML_ERROR_INSUFFICIENT_RESOURCES);
    const auto uuids = migUuids(2);
    ASSERT_EQ(uuids.size(), 1u);
    nvmlDevice_t m = mig(2, 0);
    EXPECT_EQ(name(m), "NVIDIA A100-SXM4-80GB MIG 3g.40gb");
    unsigned giId = 99;
    ASSERT_EQ(NV(nvmlDeviceGetGpuInstanceId)(m, &giId), NVML_SUCCESS);
    EXPECT_EQ(giId, 1u);  // 3g at 0
    nvmlEventData_t e{};
    ASSERT_EQ(NV(nvmlEventSetWait_v2)(set, &e, 2000), NVML_SUCCESS);
    EXPECT_EQ(e.eventType, nvmlEventMigConfigChange);
    // The events file holds the layout, so a process loading the node now sees the same instance.
    EXPECT_NE(kgpu::test::slurp(events).find("mig 2 3g.40gb@0:gi1:ci0\n"), std::string::npos) << kgpu::test::slurp(events);
    EXPECT_EQ(NV(nvmlEventSetFree)(set), NVML_SUCCESS);
    for (int i = 0; i < 100 && NV(nvmlShutdown)() == NVML_SUCCESS; ++i) {
    }
    ASSERT_EQ(start(fixture("a100-mig.yaml"), events), NVML_SUCCESS);
    EXPECT_EQ(migUuids(2), uuids);
    EXPECT_EQ(mode(dev(2)), std::make_pair(1u, 1u));
    // A process on it keeps its compute instance; the GPU instance goes only after that.
    append(events, "proc 2:0 77 1048576\n");
    ASSERT_TRUE(eventually([&] { return hasProcesses(mig(2, 0)); }));
    nvmlGpuInstance_t same = nullptr;
    ASSERT_EQ(NV(nvmlDeviceGetGpuInstanceById)(dev(2), 1, &same), NVML_SUCCESS);
    nvmlComputeInstance_t sameCi = nullptr;
    ASSERT_EQ(NV(nvmlGpuInstanceGetComputeInstanceById)(same, 0, &sameCi), NVML_SUCCESS);
    EXPECT_EQ(NV(nvmlComputeInstanceDestroy)(sameCi), NVML_ERROR_IN_USE);
    EXPECT_EQ(NV(nvmlGpuInstanceDestroy)(same), NVML_ERROR_IN_USE);
    append(events, "noproc 2 77\n");
    ASSERT_TRUE(eventually([&] { return NV(nvmlComputeInstanceDestroy)(sameCi) == NVML_SUCCESS; }));
    EXPECT_TRUE(migUuids(2).empty());
    EXPECT_EQ(NV(nvmlGpuInstanceDestroy)(same), NVML_SUCCESS);
    EXPECT_NE(kgpu::test::slurp(events).find("mig 2 on\n"), std::string::npos);
}

TEST_F(SimMigManage, AnInstanceThatStaysKeepsItsHandlesWhileOthersChange) {
    ASSERT_EQ(start(fixture("a100-mig.yaml"), events), NVML_SUCCESS);
    // GPU 1 of the fixture: 3g gi2 @0, 2g gi5 @4, 1g gi13 @6, 1g gi14 @7.
    nvmlDevice_t kept = mig(1, 0);
    const std::string keptUuid = uuid(kept);
    nvmlGpuInstance_t gi = nullptr;
    ASSERT_EQ(NV(nvmlDeviceGetGpuInstanceById)(dev(1), 14, &gi), NVML_SUCCESS);
    nvmlComputeInstance_t ci = nullptr;
    ASSERT_EQ(NV(nvmlGpuInstanceGetComputeInstanceById)(gi, 0, &ci), NVML_SUCCESS);
    ASSERT_EQ(NV(nvmlComputeInstanceDestroy)(ci), NVML_SUCCESS);
    ASSERT_EQ(NV(nvmlGpuInstanceDestroy)(gi), NVML_SUCCESS);
    EXPECT_EQ(uuid(kept), keptUuid);  // the same handle still answers
    EXPECT_EQ(migUuids(1).size(), 3u);
}

}  // namespace
}  // namespace simtest
