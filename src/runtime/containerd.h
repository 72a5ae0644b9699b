// Adds the NVIDIA runtime (and optionally CDI, and the default runtime) to a containerd config,
// for config versions 1, 2 and 3 (facts/container-runtime-and-cdi.md). The text is edited line by
// line so comments and unrelated settings survive; toml++ parses it only to validate and to
// locate tables and keys. Every result is parsed again and checked before it is returned.
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"

namespace kgpu::runtime {

struct ContainerdOptions {
    std::string runtime_name = "nvidia";
    std::string runtime_path = "/usr/bin/nvidia-container-runtime";
    bool set_as_default = false;
    bool enable_cdi = false;
};

struct Edited {
    std::string text;
    int version = 2;
    bool changed = false;
};

// Edits `text` (the content of `source`, used in messages; empty text = a new file, written as
// version 2). Idempotent: a configured text comes back unchanged. The new runtime's options copy
// the scalar options of the existing `runc` runtime (SystemdCgroup, ...) and set BinaryName.
// Errors: parse, naming source:line:column, when `text` is not TOML; invalid_argument for an
// unknown config version or a layout that cannot be edited in place (inline tables, a key
// spanning lines), suggesting --drop-in.
Result<Edited> configure(std::string_view text, std::string_view source, const ContainerdOptions& options);

struct DropIn {
    Edited main;              // `text` with `drop_in_path` added to `imports`
    std::string drop_in;      // the drop-in's whole content
};

// The drop-in variant: the runtime goes into a separate file imported by the main config.
// containerd before 2.1 replaces a whole plugin table from an import instead of merging it, so
// the drop-in carries a copy of the main config's complete CRI plugin table plus the edits.
// Errors: as configure(); `imports` present but not a one-line array.
Result<DropIn> configure_drop_in(std::string_view text, std::string_view source, const std::string& drop_in_path,
                                 const ContainerdOptions& options);

}  // namespace kgpu::runtime
