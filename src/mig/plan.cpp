#include "mig/plan.h"

#include <algorithm>

#include <fmt/format.h>

namespace kgpu::mig {

namespace {

unsigned mask(unsigned start, unsigned size) { return ((1u << size) - 1u) << start; }

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

    // First keep what is there and wanted, then nothing.
    for (bool keepCurrent : {true, false}) {
        Plan out;
        std::map<std::string, unsigned> left = wanted;
        unsigned used = 0;
        for (const Placed& c : current) {
            const Profile* p = profile(c.profile);
            if (keepCurrent && p && left[c.profile] > 0) {
                --left[c.profile];
                out.keep.push_back(c);
                used |= mask(c.start, p->size);
            } else {
                out.destroy.push_back(c);
            }
        }
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
