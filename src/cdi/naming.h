// CDI device names: the one place that decides what a GPU or MIG device is called in a CDI spec.
// `kgpu cdi generate` names the spec's devices with it, and the device plugin's `cdi-annotations`
// and `cdi-cri` strategies name the devices they hand to the kubelet with it (under their own
// kind, kDevicePluginKind, in the spec the plugin writes), so names and specs always agree (a
// name the runtime cannot find in a spec fails the container start).
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

// The kind `kgpu cdi generate` writes by default (--vendor nvidia.com --class gpu), as
// `nvidia-ctk cdi generate` and NVIDIA's nvidia-cdi-refresh service do: the node-wide spec.
inline constexpr std::string_view kDefaultKind = "nvidia.com/gpu";

// The vendor of the specs the device plugin writes for its CDI strategies, NVIDIA's plugin's
// (v0.17-v0.20, plugin-manager.go cdi.WithVendor): its own names, "k8s.device-plugin.nvidia.com/
// gpu=<index|UUID>" for GPUs and MIG devices, "…/imex-channel=<id>", "…/gdrcopy=all" and so on.
// Names of the node-wide kind (nvidia.com/gpu) would collide with the spec `cdi generate` writes
// into the same directory, and the CDI cache drops a name two specs of one directory define (CDI
// pkg/cdi cache.go): no device the plugin hands out would resolve.
inline constexpr std::string_view kDevicePluginVendor = "k8s.device-plugin.nvidia.com";
inline constexpr std::string_view kDevicePluginKind = "k8s.device-plugin.nvidia.com/gpu";

// The file name CDI's GenerateNameForSpec gives a spec of `kind` ("<vendor>-<class>"), with the
// ".json" NVIDIA's plugin saves its specs with: "k8s.device-plugin.nvidia.com/gpu" ->
// "k8s.device-plugin.nvidia.com-gpu.json". The same name as NVIDIA's plugin, so either plugin
// replaces the other's spec instead of defining the same names in a second file.
std::string spec_file_name(std::string_view kind);

// The spec device name for a device plugin device ID: a GPU UUID or index, a MIG UUID or
// "i:j", optionally with a replica suffix "::n" (time-slicing), which is dropped. The name uses
// `s` (the first strategy the spec was generated with). Errors: not_found when the ID names no
// device of `node`.
Result<std::string> name_for_device_id(const inventory::Node& node, std::string_view device_id, NameStrategy s);

// Kind from vendor and class ("nvidia.com" + "gpu"). Errors: invalid_argument when either part
// breaks CDI's rules (vendor: a DNS-like name; class: letters, digits, '-', '_', '.').
Result<std::string> make_kind(std::string_view vendor, std::string_view device_class);

}  // namespace kgpu::cdi
