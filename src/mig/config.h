// mig-parted's configuration file (`nvidia-mig-parted -f FILE -c NAME`, the GPU Operator's
// default-mig-parted-config): named MIG layouts, each a list of entries that select GPUs by PCI
// device id and index and say whether MIG is on and which instances each GPU gets.
//
//   version: v1
//   mig-configs:
//     all-1g.10gb:
//       - device-filter: ["0x20B210DE", "0x233010DE"]   # optional; string or list
//         devices: all                                  # or [0, 1, ...]
//         mig-enabled: true
//         mig-devices: {"1g.10gb": 7}                   # required ({} allowed) when enabled
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace kgpu::mig {

struct Entry {
    std::vector<std::string> device_filter;  // "0x20B210DE" (device id, vendor), optionally ":0x<subsystem>"
    std::optional<std::vector<unsigned>> devices;  // nullopt: all
    bool mig_enabled = false;
    std::map<std::string, unsigned> mig_devices;  // profile -> count
};

struct Config {
    std::map<std::string, std::vector<Entry>> configs;
};

// Parses the file's text; errors name `source`, the key and what was expected, in mig-parted's
// words where it has them ("missing required field: devices").
Result<Config> parse_config(const std::string& text, const std::string& source);

// The entries of `name`; with an empty name the file's only config. Errors as mig-parted's
// ("selected mig-config not present: NAME", "... when more than one config available").
Result<std::vector<Entry>> select(const Config& config, const std::string& name);

// Whether entry `e` applies to GPU `index` with PCI ids `device_id` (0xDDDDVVVV) and `subsystem_id`.
bool matches(const Entry& e, unsigned index, unsigned device_id, unsigned subsystem_id);

// Whether `name` is a MIG profile name mig-parted accepts: [<C>c.]<G>g.<GB>gb[+attr[,attr]|-me].
bool valid_profile_name(const std::string& name);

}  // namespace kgpu::mig
