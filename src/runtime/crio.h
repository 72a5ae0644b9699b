// Adds the NVIDIA runtime to CRI-O's config as nvidia-ctk v1.20 does (pkg/config/engine/crio):
// [crio.runtime.runtimes.<name>] is a copy of the template runtime (CRI-O's default_runtime
// unless it is an nvidia* runtime, else runc, else crun) with runtime_path set and
// runtime_type = "oci"; --set-as-default sets [crio.runtime] default_runtime, and without it a
// default_runtime naming this runtime is removed. CRI-O turns CDI on by itself (1.23+), so
// there is no CDI switch. Written, by default, as a drop-in CRI-O reads on its own
// (/etc/crio/crio.conf.d/99-nvidia.toml) holding only these settings.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "runtime/containerd.h"

namespace kgpu::runtime {

struct CrioOptions {
    std::string runtime_name = "nvidia";
    std::string runtime_path = "/usr/bin/nvidia-container-runtime";
    bool set_as_default = false;
};

// The drop-in's content for the template runtimes of `source` (the main config, or the output of
// `crio status config`; empty text = no config). Errors: parse; invalid_argument for a runtime
// path that is not absolute or a crio.runtime that is not a table.
Result<std::string> crio_drop_in(const SourceText& source, const CrioOptions& options);

// In place: `text` (the content of `source`) edited line by line to the same settings (the
// template read from `from` when given). Errors: as crio_drop_in; invalid_argument when the
// layout cannot be edited line by line.
Result<Edited> configure_crio(std::string_view text, std::string_view source, const CrioOptions& options,
                              const std::optional<SourceText>& from = std::nullopt);

}  // namespace kgpu::runtime
