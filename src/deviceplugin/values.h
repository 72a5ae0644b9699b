// The values of the device plugin's settings: the enums its flags, variables and config file
// name, their spellings, and the parsers every layer (flag, environment, file) shares.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/duration.h"
#include "common/error.h"
#include "inventory/mig_strategy.h"

namespace kgpu::deviceplugin {

// flags.migStrategy: the one enum the plugin, GFD and the MPS daemon share.
using inventory::MigStrategy;
using inventory::parse_mig_strategy;
using inventory::to_string;

enum class DeviceListStrategy { envvar, volume_mounts, cdi_annotations, cdi_cri };
enum class DeviceIdStrategy { uuid, index };
// How GetPreferredAllocation picks replicas of time-sliced devices: spread over as many physical
// devices as possible (distributed, the default) or fill the busiest one first (packed).
enum class SharedAllocationPolicy { distributed, packed };

// The spellings of the flags and the file: "none", "volume-mounts", "uuid", ...
std::string_view to_string(DeviceListStrategy s);
std::string_view to_string(DeviceIdStrategy s);
std::string_view to_string(SharedAllocationPolicy s);

// Parsers for flag, env and file values. Errors: invalid_argument "invalid <what> 'x' (expected
// a, b or c)"; callers add which flag, variable or key it was.
Result<DeviceIdStrategy> parse_device_id_strategy(std::string_view text);
Result<DeviceListStrategy> parse_device_list_strategy(std::string_view text);
Result<SharedAllocationPolicy> parse_shared_allocation_policy(std::string_view text);
// Whether `name` is a valid extended resource name "<domain>/<name>": the domain a DNS subdomain
// (lower-case letters, digits, '-' and '.', labels of 1..63, at most 253 in all) and the name
// at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter
// or digit. Errors: invalid_argument saying which rule the name breaks.
Status validate_resource_name(std::string_view name);
// NVIDIA's spelling rule for config names: "gpu" means "nvidia.com/gpu"; a name with a '/' is
// kept as written.
std::string qualify_resource_name(std::string_view name);
// A comma-separated list ("envvar,cdi-cri"); blanks around items are trimmed, duplicates dropped
// (first kept). Errors: an empty list or an unknown item.
Result<std::vector<DeviceListStrategy>> parse_device_list_strategies(std::string_view csv);
// Go's strconv.ParseBool spellings: 1 t T TRUE true True, 0 f F FALSE false False.
Result<bool> parse_bool(std::string_view text);
// The config file's durations (common/duration.h).
using ::kgpu::format_duration;
using ::kgpu::parse_duration;
// IMEX channel IDs as NVIDIA accepts them: [] or [0]. `csv` is a comma list ("0"); blanks
// trimmed, empty items skipped. Errors: invalid_argument naming the list.
Result<std::vector<unsigned>> parse_imex_channel_ids(std::string_view csv);
Status validate_imex_channel_ids(const std::vector<unsigned>& ids);
// deviceDiscoveryStrategy: auto, nvml or tegra. Errors: invalid_argument.
Result<std::string> parse_device_discovery_strategy(std::string_view text);
// A comma-separated list of XIDs ("48,79"); blanks trimmed, empty items skipped.
// Errors: a token that is not a decimal number in 1..65535.
Result<std::set<unsigned>> parse_xid_list(std::string_view csv);

}  // namespace kgpu::deviceplugin
