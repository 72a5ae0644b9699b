// What the container engines (containerd, CRI-O, Docker) share in `kgpu runtime configure`.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "runtime/containerd.h"
#include "runtime/toml_edit.h"

namespace kgpu::runtime {

// The config being edited and, when given, the one the templates are read from (`from`), parsed.
struct ParsedSources {
    toml::table doc;
    std::optional<toml::table> from;
    // Where the templates come from: `from` when given, else the config itself.
    const toml::table& templates() const { return from ? *from : doc; }
};
Result<ParsedSources> parse_sources(std::string_view text, std::string_view source, const std::optional<SourceText>& from);

// The runtimes whose settings the NVIDIA runtime copies, in order (nvidia-ctk's
// GetLowLevelRuntimes): the engine's default runtime unless it is empty or an nvidia* runtime
// (copying the NVIDIA runtime onto itself would lose the low-level runtime), then runc, crun.
inline std::vector<std::string> low_level_runtimes(std::string_view default_runtime) {
    std::vector<std::string> out;
    if (!default_runtime.empty() && !default_runtime.starts_with("nvidia")) out.emplace_back(default_runtime);
    out.emplace_back("runc");
    out.emplace_back("crun");
    return out;
}

// What an in-place edit the file's layout prevents (inline tables, tables made of dotted keys)
// adds to its error: the drop-in leaves that layout alone (the engine merges the imported file),
// so it works where the edit in place cannot.
inline constexpr std::string_view kDropInHint =
    "the drop-in works with this file as it is: `kgpu runtime configure --drop-in-config FILE` (the default for "
    "containerd config version 2 and 3, and for CRI-O) or `kgpu runtime install --drop-in FILE`";

}  // namespace kgpu::runtime
