// GPUs paused for a MIG change (issue #28 part 3): `kgpu mig-manager` lists, in a file on the
// node, the GPUs whose MIG layout it is about to change; the device plugin stops offering every
// device those GPUs back (their MIG devices and replicas included: Unhealthy in ListAndWatch, so
// the kubelet gives them to no new pod, while pods that hold them keep running) until the file no
// longer names them. On a node without the MIG manager an operator may write the file to drain
// a GPU by hand (where it runs, the file is the MIG manager's: it rewrites and removes it).
//
// The file: one GPU UUID per line ("GPU-..."); blank lines and text after '#' are ignored.
// Absent or empty: nothing paused.
#pragma once

#include <set>
#include <string>
#include <string_view>

#include "common/error.h"

namespace kgpu::deviceplugin {

// Where the device plugin (--mig-paused-gpus-file) and the MIG manager (--paused-gpus-file) meet
// by default: a host directory both pods mount.
inline constexpr const char* kDefaultPausedGpusFile = "/run/kgpu/mig-manager/paused-gpus";

// The GPU UUIDs the file's text names. Errors: parse, naming `source`, the line and what was
// expected (a GPU UUID, "GPU-" then hex digits and dashes).
Result<std::set<std::string>> parse_paused_gpus(std::string_view text, const std::string& source);

// The text that names `uuids`, with a comment saying who wrote it and why.
std::string paused_gpus_text(const std::set<std::string>& uuids, std::string_view why);

}  // namespace kgpu::deviceplugin
