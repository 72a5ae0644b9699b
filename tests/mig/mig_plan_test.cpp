// The placement search of `kgpu mig apply` over the A100/H100 tables of NVIDIA's MIG user guide
// (`nvidia-smi mig -lgipp`): placements in memory slices, at most so many of each.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <stdexcept>

#include "mig/plan.h"

namespace kgpu::mig {
namespace {

const std::vector<Profile> kA100_80 = {
    {"1g.10gb", 19, 1, 7, {0, 1, 2, 3, 4, 5, 6}},
    {"1g.10gb+me", 20, 1, 1, {0, 1, 2, 3, 4, 5, 6}},
    {"1g.20gb", 15, 2, 4, {0, 2, 4, 6}},
    {"2g.20gb", 14, 2, 3, {0, 2, 4}},
    {"3g.40gb", 9, 4, 2, {0, 4}},
    {"4g.40gb", 5, 4, 1, {0}},
    {"7g.80gb", 0, 8, 1, {0}},
};

const Profile& byName(const std::string& n) {
    for (const auto& p : kA100_80)
        if (p.name == n) return p;
    throw std::out_of_range(n);
}

// Every placement is one of its profile's and none overlap.
void expectValid(const Plan& p) {
    unsigned used = 0;
    for (const auto* list : {&p.keep, &p.create})
        for (const Placed& i : *list) {
            const Profile& prof = byName(i.profile);
            EXPECT_NE(std::find(prof.starts.begin(), prof.starts.end(), i.start), prof.starts.end()) << i.profile << "@" << i.start;
            const unsigned m = ((1u << prof.size) - 1) << i.start;
            EXPECT_EQ(used & m, 0u) << i.profile << "@" << i.start << " overlaps";
            used |= m;
        }
}

TEST(MigPlan, TheGuidesWholeGpuLayoutsFitAndOverfullOnesDoNot) {
    const std::vector<std::map<std::string, unsigned>> fit = {
        {{"7g.80gb", 1}},
        {{"4g.40gb", 1}, {"3g.40gb", 1}},
        {{"4g.40gb", 1}, {"2g.20gb", 1}, {"1g.10gb", 1}},
        {{"4g.40gb", 1}, {"1g.10gb", 3}},
        {{"3g.40gb", 2}},
        {{"3g.40gb", 1}, {"2g.20gb", 1}, {"1g.10gb", 1}},
        {{"3g.40gb", 1}, {"1g.10gb", 3}},
        {{"2g.20gb", 2}, {"3g.40gb", 1}},
        {{"2g.20gb", 3}, {"1g.10gb", 1}},
        {{"2g.20gb", 1}, {"1g.10gb", 5}},
        {{"1g.10gb", 7}},
        {{"1g.20gb", 4}},
        {{"1g.10gb+me", 1}, {"1g.10gb", 6}},
        {{"1g.10gb", 2}, {"2g.20gb", 1}, {"3g.40gb", 1}},  // all-balanced
    };
    for (const auto& w : fit) {
        std::string why;
        auto p = plan(kA100_80, {}, w, &why);
        ASSERT_TRUE(p) << why;
        EXPECT_TRUE(p->destroy.empty());
        unsigned n = 0;
        for (const auto& [k, v] : w) n += v;
        EXPECT_EQ(p->create.size(), n);
        expectValid(*p);
    }
    const std::vector<std::pair<std::map<std::string, unsigned>, std::string>> nofit = {
        {{{"3g.40gb", 2}, {"1g.10gb", 1}}, "no arrangement"},
        {{{"2g.20gb", 3}, {"3g.40gb", 1}}, "no arrangement"},
        {{{"1g.20gb", 4}, {"1g.10gb", 1}}, "no arrangement"},
        {{{"4g.40gb", 1}, {"3g.40gb", 1}, {"1g.10gb", 1}}, "no arrangement"},
        {{{"1g.10gb", 8}}, "at most 7"},
        {{{"3g.40gb", 3}}, "at most 2"},
        {{{"1g.5gb", 1}}, "not one of this GPU's (1g.10gb, 1g.10gb+me"},
    };
    for (const auto& [w, want] : nofit) {
        std::string why;
        EXPECT_FALSE(plan(kA100_80, {}, w, &why));
        EXPECT_NE(why.find(want), std::string::npos) << why;
    }
}

// Every count mix of the table: the search finds a layout exactly when one exists (an exhaustive
// search over the placements, without the planner's ordering and pruning, decides).
TEST(MigPlan, EveryMixOfTheTableFitsExactlyWhenSomeArrangementDoes) {
    std::function<bool(const std::vector<const Profile*>&, size_t, unsigned)> exists =
        [&](const std::vector<const Profile*>& items, size_t i, unsigned used) {
            if (i == items.size()) return true;
            for (unsigned s : items[i]->starts) {
                const unsigned m = ((1u << items[i]->size) - 1) << s;
                if (!(used & m) && exists(items, i + 1, used | m)) return true;
            }
            return false;
        };
    std::vector<unsigned> count(kA100_80.size(), 0);
    unsigned mixes = 0, fitting = 0;
    std::function<void(size_t, unsigned)> each = [&](size_t k, unsigned total) {
        if (k == kA100_80.size()) {
            if (total == 0) return;
            ++mixes;
            std::map<std::string, unsigned> w;
            std::vector<const Profile*> items;
            bool within = true;
            for (size_t i = 0; i < count.size(); ++i) {
                if (count[i]) w[kA100_80[i].name] = count[i];
                within = within && count[i] <= kA100_80[i].max;
                items.insert(items.end(), count[i], &kA100_80[i]);
            }
            const bool want = within && exists(items, 0, 0);
            std::string why;
            auto p = plan(kA100_80, {}, w, &why);
            EXPECT_EQ(p.has_value(), want) << why;
            if (p) {
                expectValid(*p);
                ++fitting;
            }
            return;
        }
        for (unsigned c = 0; total + c <= 8; ++c) {
            count[k] = c;
            each(k + 1, total + c);
        }
        count[k] = 0;
    };
    each(0, 0);
    EXPECT_EQ(mixes, 6434u);  // count vectors of 7 profiles with 1..8 instances in all
    EXPECT_GT(fitting, 100u);
}

TEST(MigPlan, WhatIsThereAndWantedStaysAndOnlyTheRestChanges) {
    // 3g at 4 and two 1g at 0 and 1 now; wanted: 3g x2 -> the 3g at 4 stays, one more at 0 after
    // the 1g's go.
    const std::vector<Placed> now = {{"3g.40gb", 4, 2}, {"1g.10gb", 0, 7}, {"1g.10gb", 1, 8}};
    auto p = plan(kA100_80, now, {{"3g.40gb", 2}}, nullptr);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->keep, (std::vector<Placed>{{"3g.40gb", 4, 2}}));
    EXPECT_EQ(p->destroy, (std::vector<Placed>{{"1g.10gb", 0, 7}, {"1g.10gb", 1, 8}}));
    EXPECT_EQ(p->create, (std::vector<Placed>{{"3g.40gb", 0, std::nullopt}}));
    // Already right: nothing changes.
    auto same = plan(kA100_80, now, {{"3g.40gb", 1}, {"1g.10gb", 2}}, nullptr);
    ASSERT_TRUE(same);
    EXPECT_FALSE(same->changes());
    // Keeping the 3g at 0 would leave no room for a 4g: then everything is laid out afresh.
    auto fresh = plan(kA100_80, {{"3g.40gb", 0, 1}}, {{"4g.40gb", 1}, {"3g.40gb", 1}}, nullptr);
    ASSERT_TRUE(fresh);
    EXPECT_TRUE(fresh->keep.empty());
    EXPECT_EQ(fresh->destroy.size(), 1u);
    EXPECT_EQ(fresh->create, (std::vector<Placed>{{"3g.40gb", 4, std::nullopt}, {"4g.40gb", 0, std::nullopt}}));
}

TEST(MigPlan, KeepsTheMostInstancesThatStillFitNotAllOrNothing) {
    // 7x 1g -> 4g + 3x 1g: the 1g's at 4, 5 and 6 can stay (the 4g takes 0-3); keeping those at
    // 0-2 would leave no room, and laying out afresh would destroy all seven.
    std::vector<Placed> now;
    for (unsigned i = 0; i < 7; ++i) now.push_back({"1g.10gb", i, 7 + i});
    auto p = plan(kA100_80, now, {{"4g.40gb", 1}, {"1g.10gb", 3}}, nullptr);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->keep, (std::vector<Placed>{{"1g.10gb", 4, 11}, {"1g.10gb", 5, 12}, {"1g.10gb", 6, 13}}));
    EXPECT_EQ(p->destroy.size(), 4u);
    EXPECT_EQ(p->create, (std::vector<Placed>{{"4g.40gb", 0, std::nullopt}}));
}

}  // namespace
}  // namespace kgpu::mig
