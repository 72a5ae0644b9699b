// The container runtime's inventory cache (`inventory-cache` in its config): every `create` of a
// GPU container needs the node's inventory, and asking NVML for it (load the library, init,
// enumerate) is most of kgpu's own time per container start — more on a real driver than on the
// simulator. The inventory is kept in a root-only file with a witness of what it was read from;
// a create whose witness is the same uses the file and never opens NVML. The witness is what
// changes on the node, without an NVML call, whenever the inventory could:
//  - the loaded kernel module (<proc>/driver/nvidia/version) and the boot (<proc>/sys/kernel/random/
//    boot_id): a driver upgrade, a reload, a reboot;
//  - the GPUs the driver bound (<proc>/driver/nvidia/gpus/<bus id>);
//  - the MIG instances that exist (<proc>/driver/nvidia/capabilities/gpu<N>/mig/gi<G>/ci<C>: the
//    driver adds and removes them as instances are created and destroyed);
//  - the device nodes (<dev>/dev/nvidia*, <dev>/dev/nvidia-caps/*: name and device number);
//  - the NVML library file that would be loaded (path, inode, size, modification and change
//    times), the config keys that choose it, and the cache's own format.
// Without <proc>/driver/nvidia/version (no loaded driver to witness) the cache is not used.
// An inventory with a lost or failing GPU is not kept: the next create asks NVML again.
// What no witness shows: a GPU that falls off the bus after the inventory was kept is still
// injected (as NVIDIA's runtime does from a prepared CDI spec); the device plugin stops
// advertising it, so the kubelet gives it to no new pod.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/error.h"
#include "inventory/node.h"
#include "toolkit/config.h"
#include "toolkit/runtime.h"

namespace kgpu::toolkit {

inline constexpr std::string_view kInventoryCacheSchema = "kgpu.runtime-inventory/v1";

// The witness for `config`'s node now, or nullopt when <proc_root>/driver/nvidia/version cannot be
// read (then the cache is not used).
std::optional<std::string> inventory_witness(const RuntimeConfig& config);

// What the cache file holds.
struct CachedInventory {
    std::string witness;
    inventory::Node node;                       // topology not kept (the runtime reads none)
    std::map<std::string, std::string> brands;  // GPU UUID -> NVML brand, lower case
};
// Errors (Code::invalid_argument): a string NVML gave is not UTF-8, which JSON cannot hold (the
// inventory is then not cached).
Result<std::string> to_cache_text(const CachedInventory& c);
// Errors (Code::parse): not the cache's JSON or not its schema; the message says what.
Result<CachedInventory> from_cache_text(std::string_view text);

// A NodeSource that answers from config.inventory_cache when the witness matches, else from
// `nvml` (and then keeps what NVML said, when it may be kept). Never fails where `nvml` would
// not: a cache that cannot be read or written only costs the NVML call.
std::unique_ptr<NodeSource> cached_node_source(const RuntimeConfig& config, std::unique_ptr<NodeSource> nvml);

}  // namespace kgpu::toolkit
