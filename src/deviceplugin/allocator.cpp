#include "deviceplugin/allocator.h"

#include <algorithm>
#include <map>
#include <optional>

namespace kgpu::deviceplugin {

int pair_score(const inventory::Link& link) {
    if (link.nvlinks > 0) return 100 * static_cast<int>(link.nvlinks);
    switch (link.pcie) {
        case inventory::PcieLevel::internal: return 60;
        case inventory::PcieLevel::single: return 50;
        case inventory::PcieLevel::multiple: return 40;
        case inventory::PcieLevel::hostbridge: return 30;
        case inventory::PcieLevel::node: return 20;
        case inventory::PcieLevel::system: return 10;
        case inventory::PcieLevel::unknown: return 0;
    }
    return 0;
}

Allocator::Allocator(const Resource& resource, const inventory::Topology& topology, SharedAllocationPolicy policy) {
    const size_t n = resource.devices.size();
    if (resource.shared())
        mode_ = policy == SharedAllocationPolicy::packed ? Mode::packed : Mode::distributed;
    else if (resource.has_mig())
        mode_ = Mode::distributed;
    if (mode_ != Mode::topology) {
        // Devices are in GPU / MIG / replica order (build_resources): dense ids per group.
        std::map<std::string, int> ids;
        for (const Device& d : resource.devices) {
            const std::string key = resource.shared() ? d.physical_id : std::to_string(d.gpu_index);
            auto [it, added] = ids.emplace(key, static_cast<int>(ids.size()));
            if (added) group_size_.push_back(0);
            group_.push_back(it->second);
            ++group_size_[static_cast<size_t>(it->second)];
        }
    }
    ids_.reserve(n);
    gpu_index_.reserve(n);
    numa_group_.reserve(n);
    std::map<std::optional<int>, int> groups;
    for (size_t i = 0; i < n; ++i) {
        const Device& d = resource.devices[i];
        ids_.push_back(d.id);
        gpu_index_.push_back(d.gpu_index);
        by_id_.emplace(d.id, i);
        auto [it, added] = groups.emplace(d.numa, static_cast<int>(groups.size()));
        numa_group_.push_back(it->second);
    }
    numa_groups_ = static_cast<int>(groups.size());
    // Pair scores by GPU index (small: GPUs x GPUs), and, for the topology search only, by
    // position: a replica or MIG resource has hundreds of devices, and n x n matrices of them
    // would cost memory for nothing (384 replicas: 1.2 MB).
    gpus_ = topology.size();
    gpu_w_.assign(gpus_ * gpus_, 0);
    std::vector<int> gpu_nv(gpus_ * gpus_, 0);
    for (size_t a = 0; a < gpus_; ++a)
        for (size_t b = a + 1; b < gpus_; ++b) {
            const inventory::Link& l = topology.at(static_cast<unsigned>(a), static_cast<unsigned>(b));
            gpu_w_[a * gpus_ + b] = gpu_w_[b * gpus_ + a] = pair_score(l);
            gpu_nv[a * gpus_ + b] = gpu_nv[b * gpus_ + a] = 100 * static_cast<int>(l.nvlinks);
        }
    if (mode_ != Mode::topology) return;
    w_.assign(n * n, 0);
    nv_.assign(n * n, 0);
    for (size_t i = 0; i < n; ++i) {
        for (size_t j = i + 1; j < n; ++j) {
            const size_t a = gpu_index_[i], b = gpu_index_[j];
            if (a == b || a >= gpus_ || b >= gpus_) continue;
            w_[i * n + j] = w_[j * n + i] = gpu_w_[a * gpus_ + b];
            nv_[i * n + j] = nv_[j * n + i] = gpu_nv[a * gpus_ + b];
        }
    }
}

int Allocator::pair(size_t i, size_t j) const {
    const size_t a = gpu_index_[i], b = gpu_index_[j];
    if (a == b || a >= gpus_ || b >= gpus_) return 0;
    return gpu_w_[a * gpus_ + b];
}

Result<std::vector<size_t>> Allocator::positions(const std::vector<std::string>& ids, const char* list) const {
    std::vector<size_t> out;
    out.reserve(ids.size());
    std::vector<bool> seen(ids_.size(), false);
    for (const std::string& id : ids) {
        auto it = by_id_.find(id);
        if (it == by_id_.end()) return fail(Code::invalid_argument, "unknown device ID '{}' in {}", id, list);
        if (seen[it->second]) return fail(Code::invalid_argument, "duplicate device ID '{}' in {}", id, list);
        seen[it->second] = true;
        out.push_back(it->second);
    }
    return out;
}

Result<std::int64_t> Allocator::score(const std::vector<std::string>& ids) const {
    auto pos = positions(ids, "the set");
    if (!pos) return std::unexpected(pos.error());
    std::int64_t s = 0;
    for (size_t i = 0; i < pos->size(); ++i)
        for (size_t j = i + 1; j < pos->size(); ++j) s += pair((*pos)[i], (*pos)[j]);
    return s;
}

Result<int> Allocator::numa_nodes(const std::vector<std::string>& ids) const {
    auto pos = positions(ids, "the set");
    if (!pos) return std::unexpected(pos.error());
    std::vector<bool> used(static_cast<size_t>(numa_groups_), false);
    int distinct = 0;
    for (size_t p : *pos)
        if (!used[static_cast<size_t>(numa_group_[p])]) used[static_cast<size_t>(numa_group_[p])] = true, ++distinct;
    return distinct;
}

namespace {

// The branch and bound over the candidates (available minus must_include), in GPU index order.
// Everything is indexed by candidate position 0..m-1.
struct Search {
    int m = 0;                 // candidates
    int r = 0;                 // how many to choose
    std::vector<std::int64_t> w;  // m x m
    // Per candidate: the other candidates by descending score (ties: ascending position).
    std::vector<std::vector<std::pair<std::int64_t, int>>> neighbours;
    std::vector<std::int64_t> gain;  // per candidate: sum of scores towards the chosen set
    std::vector<int> group;          // per candidate: NUMA group
    std::vector<int> group_count;    // per group: members in the chosen set (must_include included)
    int distinct = 0;                // distinct NUMA groups in the chosen set
    std::vector<int> chosen;
    std::vector<std::int64_t> buf;

    std::int64_t best_score = 0;
    int best_numa = 0;
    std::vector<int> best;
    bool best_from_dfs = false;  // best is the first leaf in DFS (= lexicographic) order with its key
    std::uint64_t nodes = 0;
    std::uint64_t budget = 4'000'000;

    std::int64_t at(int a, int b) const { return w[static_cast<size_t>(a) * static_cast<size_t>(m) + static_cast<size_t>(b)]; }

    void add(int c) {
        for (int d = 0; d < m; ++d) gain[static_cast<size_t>(d)] += at(c, d);
        if (group_count[static_cast<size_t>(group[static_cast<size_t>(c)])]++ == 0) ++distinct;
        chosen.push_back(c);
    }
    void remove(int c) {
        for (int d = 0; d < m; ++d) gain[static_cast<size_t>(d)] -= at(c, d);
        if (--group_count[static_cast<size_t>(group[static_cast<size_t>(c)])] == 0) --distinct;
        chosen.pop_back();
    }

    // Twice an upper bound on what choosing q more from [pos, m) can add: each candidate's gain
    // towards the chosen set plus half of its q-1 best links inside [pos, m), summed over the q
    // best candidates (every pair inside the new ones is counted once from each side).
    std::int64_t bound2(int pos, int q) {
        buf.clear();
        for (int c = pos; c < m; ++c) {
            std::int64_t v = 2 * gain[static_cast<size_t>(c)];
            int taken = 0;
            if (q > 1) {
                for (const auto& [s, d] : neighbours[static_cast<size_t>(c)]) {
                    if (d < pos) continue;
                    v += s;
                    if (++taken == q - 1) break;
                }
            }
            buf.push_back(v);
        }
        std::nth_element(buf.begin(), buf.begin() + (q - 1), buf.end(), std::greater<>());
        std::int64_t sum = 0;
        for (int i = 0; i < q; ++i) sum += buf[static_cast<size_t>(i)];
        return sum;
    }

    void leaf(std::int64_t score) {
        const bool better = score > best_score || (score == best_score && distinct < best_numa);
        const bool equal_first = score == best_score && distinct == best_numa && !best_from_dfs;
        if (better || equal_first) {
            best_score = score;
            best_numa = distinct;
            best = chosen;
            best_from_dfs = true;
        }
    }

    void dfs(int pos, std::int64_t score) {
        if (++nodes > budget) return;
        const int q = r - static_cast<int>(chosen.size());
        if (q == 0) return leaf(score);
        if (m - pos < q) return;
        const std::int64_t ub2 = 2 * score + bound2(pos, q);
        if (ub2 < 2 * best_score) return;
        if (ub2 == 2 * best_score && (distinct > best_numa || (distinct == best_numa && best_from_dfs))) return;
        // Include first: leaves come in lexicographic order of their ascending position lists.
        const std::int64_t with = score + gain[static_cast<size_t>(pos)];
        add(pos);
        dfs(pos + 1, with);
        remove(pos);
        if (m - (pos + 1) >= q) dfs(pos + 1, score);
    }

    // Best gain first; ties: fewer new NUMA groups, then the lowest position.
    void greedy(std::int64_t base_score) {
        std::vector<std::int64_t> g = gain;
        std::vector<int> counts = group_count;
        std::vector<bool> taken(static_cast<size_t>(m), false);
        std::vector<int> picked;
        std::int64_t score = base_score;
        int numa = distinct;
        for (int step = 0; step < r; ++step) {
            int pick = -1;
            for (int c = 0; c < m; ++c) {
                if (taken[static_cast<size_t>(c)]) continue;
                if (pick < 0) { pick = c; continue; }
                const auto uc = static_cast<size_t>(c), up = static_cast<size_t>(pick);
                const bool new_c = counts[static_cast<size_t>(group[uc])] == 0;
                const bool new_p = counts[static_cast<size_t>(group[up])] == 0;
                if (g[uc] > g[up] || (g[uc] == g[up] && !new_c && new_p)) pick = c;
            }
            const auto up = static_cast<size_t>(pick);
            taken[up] = true;
            picked.push_back(pick);
            score += g[up];
            if (counts[static_cast<size_t>(group[up])]++ == 0) ++numa;
            for (int d = 0; d < m; ++d) g[static_cast<size_t>(d)] += at(pick, d);
        }
        std::sort(picked.begin(), picked.end());
        best = std::move(picked);
        best_score = score;
        best_numa = numa;
        best_from_dfs = false;
    }
};

}  // namespace

Result<std::vector<std::string>> Allocator::prefer(const std::vector<std::string>& available,
                                                   const std::vector<std::string>& must_include, int size) const {
    if (size < 1) return fail(Code::invalid_argument, "allocation size {} is less than 1", size);
    auto avail = positions(available, "available");
    if (!avail) return std::unexpected(avail.error());
    auto must = positions(must_include, "must_include");
    if (!must) return std::unexpected(must.error());
    std::vector<bool> in_avail(ids_.size(), false), in_must(ids_.size(), false);
    for (size_t p : *avail) in_avail[p] = true;
    for (size_t i = 0; i < must->size(); ++i) {
        if (!in_avail[(*must)[i]])
            return fail(Code::invalid_argument, "must_include device ID '{}' is not in available", must_include[i]);
        in_must[(*must)[i]] = true;
    }
    if (must->size() > static_cast<size_t>(size))
        return fail(Code::invalid_argument, "must_include has {} device IDs, more than the allocation size {}",
                    must->size(), size);
    if (static_cast<size_t>(size) > avail->size())
        return fail(Code::invalid_argument, "allocation size {} is larger than the {} available device IDs", size,
                    avail->size());

    if (mode_ != Mode::topology) {
        std::vector<std::string> out;
        for (size_t p : spread(*avail, *must, size)) out.push_back(ids_[p]);
        return out;
    }

    const size_t n = ids_.size();
    auto by_index = [&](size_t a, size_t b) {
        return gpu_index_[a] != gpu_index_[b] ? gpu_index_[a] < gpu_index_[b] : a < b;
    };
    std::vector<size_t> cand;
    for (size_t p : *avail)
        if (!in_must[p]) cand.push_back(p);
    std::sort(cand.begin(), cand.end(), by_index);

    // The objective, lexicographic (see allocator.h): pair scores inside the set, then the NVLink
    // score from the set to available GPUs left out (links the choice breaks), then the sizes of
    // the NVLink islands the chosen GPUs come from. With `deg(p)` = p's NVLink score towards every
    // other available GPU, the links broken by a set S are sum(deg) - 2 * (NVLink inside S), so
    //   value(S) = W1 * score(S) - W2 * broken(S) - islands(S)
    //            = sum over pairs of (W1 * w + 2 * W2 * nv) - sum over members of (W2 * deg + island)
    // is one quadratic objective with non-negative pair weights and a per-GPU term: the branch
    // and bound below maximises it unchanged. W2 exceeds any island sum, W1 any W2 * broken +
    // islands; if that could overflow, the NVLink terms are dropped (W2 = 0, W1 = 1).
    const Weights wt = weights(*avail, size);
    auto wp = [&](size_t a, size_t b) { return wt.w1 * w_[a * n + b] + 2 * wt.w2 * nv_[a * n + b]; };

    Search s;
    s.m = static_cast<int>(cand.size());
    s.r = size - static_cast<int>(must->size());
    const size_t m = cand.size();
    s.w.resize(m * m);
    for (size_t a = 0; a < m; ++a)
        for (size_t b = 0; b < m; ++b) s.w[a * m + b] = a == b ? 0 : wp(cand[a], cand[b]);
    s.group.resize(m);
    for (size_t a = 0; a < m; ++a) s.group[a] = numa_group_[cand[a]];
    s.group_count.assign(static_cast<size_t>(numa_groups_), 0);
    s.gain.assign(m, 0);
    for (size_t a = 0; a < m; ++a) s.gain[a] = wt.linear[cand[a]];
    std::int64_t base = 0;
    for (size_t i = 0; i < must->size(); ++i) {
        const size_t p = (*must)[i];
        base += wt.linear[p];
        for (size_t j = i + 1; j < must->size(); ++j) base += wp(p, (*must)[j]);
        for (size_t a = 0; a < m; ++a) s.gain[a] += wp(p, cand[a]);
        if (s.group_count[static_cast<size_t>(numa_group_[p])]++ == 0) ++s.distinct;
    }
    if (s.r > 0) {
        s.neighbours.resize(m);
        for (size_t a = 0; a < m; ++a) {
            auto& list = s.neighbours[a];
            for (size_t b = 0; b < m; ++b)
                if (a != b) list.emplace_back(s.w[a * m + b], static_cast<int>(b));
            std::sort(list.begin(), list.end(), [](const auto& x, const auto& y) {
                return x.first != y.first ? x.first > y.first : x.second < y.second;
            });
        }
        s.buf.reserve(m);
        s.greedy(base);
        s.dfs(0, base);
    }

    std::vector<size_t> result(must->begin(), must->end());
    for (int c : s.best) result.push_back(cand[static_cast<size_t>(c)]);
    std::sort(result.begin(), result.end(), by_index);
    std::vector<std::string> out;
    out.reserve(result.size());
    for (size_t p : result) out.push_back(ids_[p]);
    return out;
}

Allocator::Weights Allocator::weights(const std::vector<size_t>& avail, int size) const {
    const size_t n = ids_.size();
    Weights wt;
    wt.linear.assign(n, 0);
    if (!island_aware_) return wt;
    // NVLink degree towards the other available GPUs, and island sizes (components of the NVLink
    // graph over the available GPUs).
    std::vector<std::int64_t> deg(n, 0);
    std::vector<int> island(n, 0);
    std::vector<bool> in(n, false);
    for (size_t p : avail) in[p] = true;
    std::int64_t total_deg = 0, max_w = 0;
    for (size_t p : avail)
        for (size_t q : avail) {
            deg[p] += nv_[p * n + q];
            max_w = std::max<std::int64_t>(max_w, w_[p * n + q]);
        }
    for (size_t p : avail) total_deg += deg[p];
    std::vector<int> comp(n, -1);
    std::vector<int> comp_size;
    for (size_t p : avail) {
        if (comp[p] >= 0) continue;
        const int c = static_cast<int>(comp_size.size());
        comp_size.push_back(0);
        std::vector<size_t> stack{p};
        comp[p] = c;
        while (!stack.empty()) {
            const size_t x = stack.back();
            stack.pop_back();
            ++comp_size.back();
            for (size_t y : avail)
                if (comp[y] < 0 && nv_[x * n + y] > 0) comp[y] = c, stack.push_back(y);
        }
    }
    for (size_t p : avail) island[p] = comp_size[static_cast<size_t>(comp[p])];
    const std::int64_t count = static_cast<std::int64_t>(avail.size());
    const std::int64_t w2 = count * count + 1;              // > any sum of island sizes
    const std::int64_t w1 = w2 * (total_deg + 1) + w2;      // > W2 * broken + islands
    const std::int64_t pairs = static_cast<std::int64_t>(size) * size;
    // Keep |value| well inside int64 (bound2 doubles it and sums `size` terms).
    const long double worst = static_cast<long double>(w1) * static_cast<long double>(max_w + 1) * pairs * 4 +
                              static_cast<long double>(w2) * static_cast<long double>(total_deg + 1) * 4;
    if (total_deg == 0 || worst > 1e17L) return wt;  // no NVLink among them, or too large: plain scores
    wt.w1 = w1;
    wt.w2 = w2;
    for (size_t p : avail) wt.linear[p] = -(w2 * deg[p] + island[p]);
    return wt;
}

std::vector<size_t> Allocator::spread(const std::vector<size_t>& avail, const std::vector<size_t>& must,
                                      int size) const {
    // used[g] = devices of g not available + those chosen.
    std::vector<int> used(group_size_.begin(), group_size_.end());
    std::vector<int> free_count(group_size_.size(), 0);
    std::vector<bool> candidate(ids_.size(), false);
    for (size_t p : avail) {
        --used[static_cast<size_t>(group_[p])];
        candidate[p] = true;
    }
    std::vector<size_t> chosen;
    for (size_t p : must) {
        ++used[static_cast<size_t>(group_[p])];
        candidate[p] = false;
        chosen.push_back(p);
    }
    for (size_t p = 0; p < ids_.size(); ++p)
        if (candidate[p]) ++free_count[static_cast<size_t>(group_[p])];
    const bool packed = mode_ == Mode::packed;
    for (int k = static_cast<int>(must.size()); k < size; ++k) {
        // The group to take from, then its first available device (positions are in order).
        int best = -1;
        for (size_t g = 0; g < group_size_.size(); ++g) {
            if (free_count[g] == 0) continue;
            if (best < 0) { best = static_cast<int>(g); continue; }
            const int u = used[g], b = used[static_cast<size_t>(best)];
            if (packed ? u > b : u < b) best = static_cast<int>(g);
        }
        if (best < 0) break;  // cannot happen: size <= available was checked
        for (size_t p = 0; p < ids_.size(); ++p) {
            if (candidate[p] && group_[p] == best) {
                candidate[p] = false;
                chosen.push_back(p);
                break;
            }
        }
        ++used[static_cast<size_t>(best)];
        --free_count[static_cast<size_t>(best)];
    }
    std::sort(chosen.begin(), chosen.end());
    return chosen;
}

Result<std::vector<std::string>> preferred_allocation(const Resource& resource, const inventory::Topology& topology,
                                                      const std::vector<std::string>& available,
                                                      const std::vector<std::string>& must_include, int size) {
    return Allocator(resource, topology).prefer(available, must_include, size);
}

}  // namespace kgpu::deviceplugin
