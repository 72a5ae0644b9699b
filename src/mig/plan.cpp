#include "mig/plan.h"

#include <algorithm>
#include <bit>

#include <fmt/format.h>

namespace kgpu::mig {

namespace {

unsigned mask(unsigned start, unsigned size) {
    if (size >= 16 || start >= 16) return ~0u;  // no GPU has that many slices: overlaps everything
    return ((1u << size) - 1u) << start;
}

// Places `todo` (profiles, biggest first) into the slices not in `used`; appends to `out`.
bool place(const std::vector<const Profile*>& todo, size_t i, unsigned used, std::vector<Placed>& out) {
    if (i == todo.size()) return true;
    const Profile& p = *todo[i];
    for (unsigned s : p.starts) {
        // Equal profiles in ascending starts only: the same arrangement is not tried twice.
        if (i > 0 && todo[i - 1] == todo[i] && !out.empty() && s <= out.back().start) continue;
        if (used & mask(s, p.size)) continue;
        out.push_back({p.name, s, std::nullopt});
        if (place(todo, i + 1, used | mask(s, p.size), out)) return true;
        out.pop_back();
    }
    return false;
}

}  // namespace

std::map<std::string, unsigned> counts(const std::vector<Placed>& instances) {
    std::map<std::string, unsigned> out;
    for (const Placed& p : instances) ++out[p.profile];
    return out;
}

std::optional<Plan> plan(const std::vector<Profile>& profiles, const std::vector<Placed>& current,
                         const std::map<std::string, unsigned>& wanted, std::string* why) {
    auto profile = [&](const std::string& name) -> const Profile* {
        for (const Profile& p : profiles)
            if (p.name == name) return &p;
        return nullptr;
    };
    std::vector<const Profile*> all;
    for (const auto& [name, n] : wanted) {
        if (n == 0) continue;
        const Profile* p = profile(name);
        if (!p) {
            std::string have;
            for (const Profile& q : profiles) have += (have.empty() ? "" : ", ") + q.name;
            if (why) *why = fmt::format("profile {} is not one of this GPU's ({})", name, have);
            return std::nullopt;
        }
        if (n > p->max) {
            if (why) *why = fmt::format("{} x {}: this GPU takes at most {}", n, name, p->max);
            return std::nullopt;
        }
        all.insert(all.end(), n, p);
    }
    std::stable_sort(all.begin(), all.end(), [](const Profile* a, const Profile* b) { return a->size > b->size; });

    // Keep as many of the instances there as still fit with the rest: every subset of the wanted
    // ones, the biggest first (a GPU has at most 8 instances: at most 256 tries).
    std::vector<size_t> keepable;
    for (size_t i = 0; i < current.size(); ++i)
        if (profile(current[i].profile) && wanted.contains(current[i].profile)) keepable.push_back(i);
    if (keepable.size() > 10) keepable.resize(10);  // (no real GPU has more than 8 instances)
    std::vector<unsigned> subsets;
    for (unsigned m = 0; m < (1u << keepable.size()); ++m) subsets.push_back(m);
    std::stable_sort(subsets.begin(), subsets.end(),
                     [](unsigned a, unsigned b) { return std::popcount(a) > std::popcount(b); });
    for (unsigned subset : subsets) {
        Plan out;
        std::map<std::string, unsigned> left = wanted;
        unsigned used = 0;
        bool ok = true;
        std::vector<bool> kept(current.size(), false);
        for (size_t k = 0; k < keepable.size(); ++k)
            if (subset & (1u << k)) kept[keepable[k]] = true;
        for (size_t i = 0; i < current.size(); ++i) {
            const Placed& c = current[i];
            if (!kept[i]) {
                out.destroy.push_back(c);
                continue;
            }
            const Profile* p = profile(c.profile);
            const unsigned m = mask(c.start, p->size);
            if (left[c.profile] == 0 || (used & m)) {
                ok = false;  // more of it than wanted, or overlapping: not a subset worth keeping
                break;
            }
            --left[c.profile];
            out.keep.push_back(c);
            used |= m;
        }
        if (!ok) continue;
        std::vector<const Profile*> todo;
        for (const Profile* p : all)
            if (left[p->name] > 0) {
                --left[p->name];
                todo.push_back(p);
            }
        if (place(todo, 0, used, out.create)) return out;
    }
    if (why) {
        std::string mix;
        for (const auto& [name, n] : wanted)
            if (n) mix += (mix.empty() ? "" : ", ") + fmt::format("{} x {}", n, name);
        *why = "no arrangement of " + mix + " fits this GPU's placements";
    }
    return std::nullopt;
}

}  // namespace kgpu::mig
