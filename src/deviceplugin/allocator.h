// GetPreferredAllocation for whole GPUs: the set of `size` devices, containing must_include and
// drawn from available, with the highest sum of pair scores (facts/device-plugin-anchor.md).
//
// Pair score from the inventory topology: 100 per NVLink link when the GPUs share NVLink; else
// by their PCIe common ancestor: same board (internal) 60, single switch 50, multiple switches 40,
// host bridge 30, same NUMA node 20, across CPUs (system) 10, unknown 0.
//
// Among sets with the same score, NVLink islands are kept whole (issue #13; NVIDIA's plugin takes
// the lowest free GPUs, so single-GPU pods break the NVLink pairs a later 2-GPU pod needs):
//  1. the least NVLink score from the set to available GPUs left out (prefer GPUs whose NVLink
//     partners are already taken: they break no link a later request could use);
//  2. then the smallest NVLink islands (components of the NVLink graph over the available GPUs)
//     the GPUs come from, so big islands stay intact;
//  3. then NUMA locality (fewer distinct NUMA nodes; an unknown NUMA node counts as one more node
//     of its own);
//  4. then the lowest GPU indices (the lexicographically smallest ascending index list),
// so the answer is a pure function of the inputs. On pcie-nvlink-pairs with GPU 2 taken, a 1-GPU
// request gets GPU 3 (its partner is gone) and pair 0-1 stays whole; on NVSwitch systems every
// GPU links to every other, so 1 and 2 never differ and NUMA decides as before.
//
// The search is an exact branch and bound (include-first depth-first search in GPU index order,
// an upper bound from each remaining candidate's gain towards the chosen set plus half its best
// links among the remaining candidates, seeded with a greedy answer). It visits at most 2^n
// nodes, so it is exact for any request on up to 16 GPUs (and far beyond on real topologies); a
// node budget of 4 million caps pathological inputs above 20 devices, in which case the best set
// found so far (never worse than the greedy one) is returned.
//
// Replicas (time-slicing) and MIG devices are not scored by topology (as in NVIDIA's plugin):
// every device belongs to a group — its physical device for a replica, its parent GPU for a MIG
// device — and each pick takes an available device from the least used group (`distributed`,
// the default: replicas spread over as many GPUs as possible) or, for replicas under the
// `packed` policy, from the most used group that still has one (fills a GPU before the next).
// "Used" counts the group's devices that are not available (allocated elsewhere) plus those
// already chosen (must_include first). Ties: the lower GPU index, MIG index, replica number.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "deviceplugin/resources.h"
#include "inventory/node.h"

namespace kgpu::deviceplugin {

// The score of one pair of distinct GPUs (see above).
int pair_score(const inventory::Link& link);

class Allocator {
public:
    // Precomputes the pair-score matrix of `resource`'s devices from `topology` (indexed by
    // Device::gpu_index; a GPU outside the topology scores 0 with everyone). Copies what it needs:
    // neither argument has to outlive the Allocator.
    // `policy` applies to time-sliced resources only.
    Allocator(const Resource& resource, const inventory::Topology& topology,
              SharedAllocationPolicy policy = SharedAllocationPolicy::distributed);

    // The preferred IDs, ascending GPU index. Thread-safe (const, no shared mutable state).
    // Errors, all Code::invalid_argument with a reason naming the ID or the numbers:
    // size < 1; an ID in available or must_include that the resource does not have; a duplicate
    // ID in either list; a must_include ID not in available; more must_include IDs than size;
    // size larger than the number of available IDs.
    Result<std::vector<std::string>> prefer(const std::vector<std::string>& available,
                                            const std::vector<std::string>& must_include, int size) const;

    // Sum of the pair scores of a set of IDs (for logs and tests). Errors: unknown ID.
    Result<std::int64_t> score(const std::vector<std::string>& ids) const;

    // Number of distinct NUMA nodes of a set of IDs (an unknown node counts as one of its own).
    // Errors: unknown ID.
    Result<int> numa_nodes(const std::vector<std::string>& ids) const;

    size_t size() const { return ids_.size(); }

    // Turns the NVLink-island rules off (score, NUMA, index only: kgpu before issue #13), so
    // bench/ can measure what they gain.
    void set_island_aware(bool on) { island_aware_ = on; }

private:
    Result<std::vector<size_t>> positions(const std::vector<std::string>& ids, const char* list) const;
    std::vector<size_t> spread(const std::vector<size_t>& avail, const std::vector<size_t>& must, int size) const;

    // The weights that fold the island terms into the search's objective (allocator.cpp).
    struct Weights {
        std::int64_t w1 = 1, w2 = 0;
        std::vector<std::int64_t> linear;  // by position: -(W2 * NVLink degree + island size)
    };
    Weights weights(const std::vector<size_t>& avail, int size) const;

    enum class Mode { topology, distributed, packed };
    Mode mode_ = Mode::topology;
    std::vector<int> group_;              // by position, for the spread modes (dense group ids)
    std::vector<int> group_size_;         // by group

    std::vector<std::string> ids_;        // by position (the resource's device order)
    std::vector<unsigned> gpu_index_;     // by position
    std::vector<int> numa_group_;         // small dense ids, one per distinct NUMA value
    int numa_groups_ = 0;
    int pair(size_t i, size_t j) const;   // pair score of two positions (any mode)
    size_t gpus_ = 0;                     // GPUs in the topology
    std::vector<int> gpu_w_;              // gpus_ x gpus_ pair scores by GPU index
    // Topology mode only (whole GPUs): n x n by position, 0 on the diagonal.
    std::vector<int> w_;                  // pair scores
    std::vector<int> nv_;                 // the NVLink part of them (100 per link)
    bool island_aware_ = true;            // false: the plain score order (benchmarks compare)
    std::unordered_map<std::string, size_t> by_id_;
};

// One-shot convenience: Allocator(resource, topology).prefer(available, must_include, size).
Result<std::vector<std::string>> preferred_allocation(const Resource& resource, const inventory::Topology& topology,
                                                      const std::vector<std::string>& available,
                                                      const std::vector<std::string>& must_include, int size);

}  // namespace kgpu::deviceplugin
