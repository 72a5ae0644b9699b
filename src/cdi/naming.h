// CDI device names: the one place that decides what a GPU or MIG device is called in a CDI spec.
// `kgpu cdi generate` names the spec's devices with it, and the device plugin's `cdi-annotations`
// and `cdi-cri` strategies name the devices they hand to the kubelet with it, so the two always
// agree (a name the runtime cannot find in the spec fails the container start).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "inventory/node.h"

namespace kgpu::cdi {

// index: "0" and "0:1" (MIG); uuid: "GPU-…" and "MIG-…"; type-index: "gpu0" and "mig0:1"
// (the spellings of nvidia-ctk's --device-name-strategy).
enum class NameStrategy { index, uuid, type_index };

std::string_view to_string(NameStrategy s);

// Parses a comma-separated list ("index,uuid"); duplicates are dropped, order kept.
// Errors: invalid_argument naming the bad token and the accepted values; an empty list.
Result<std::vector<NameStrategy>> parse_strategies(std::string_view csv);

std::string device_name(NameStrategy s, const inventory::Gpu& gpu);
std::string device_name(NameStrategy s, const inventory::Gpu& parent, const inventory::MigDevice& mig);

// "nvidia.com/gpu=GPU-…": the fully qualified name a container asks for.
std::string qualified_name(std::string_view kind, std::string_view name);

// The kind `kgpu cdi generate` writes by default (--vendor nvidia.com --class gpu), which the
// device plugin's CDI strategies name devices under.
inline constexpr std::string_view kDefaultKind = "nvidia.com/gpu";

// The spec device name for a device plugin device ID: a GPU UUID or index, a MIG UUID or
// "i:j", optionally with a replica suffix "::n" (time-slicing), which is dropped. The name uses
// `s` (the first strategy the spec was generated with). Errors: not_found when the ID names no
// device of `node`.
Result<std::string> name_for_device_id(const inventory::Node& node, std::string_view device_id, NameStrategy s);

// Kind from vendor and class ("nvidia.com" + "gpu"). Errors: invalid_argument when either part
// breaks CDI's rules (vendor: a DNS-like name; class: letters, digits, '-', '_', '.').
Result<std::string> make_kind(std::string_view vendor, std::string_view device_class);

}  // namespace kgpu::cdi
