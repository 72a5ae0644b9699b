// Adds the NVIDIA runtime (and optionally CDI and the default runtime) to a containerd config,
// with the result nvidia-ctk v1.20 produces (pkg/config/engine/containerd), for config versions
// 1, 2 and 3 (facts/container-runtime-and-cdi.md):
//  - the runtime is a copy of a template runtime table: the one `default_runtime_name` names
//    (unless that name starts with "nvidia"), else `runc`, else `crun`, else a default table;
//    every key of it is kept (runtime_type, engine, root, privileged_without_host_devices, all
//    options such as SystemdCgroup), then options.BinaryName is set (and options.Runtime for
//    version 1), and runtime_type only when the copy has none;
//  - --set-as-default sets default_runtime_name; without it a default_runtime_name that names
//    this runtime is removed (as nvidia-ctk does);
//  - CDI: enable_cdi = true in the CRI plugin table.
// Two ways to write it: in place (the operator's text edited line by line, comments kept) or,
// the default since nvidia-ctk 1.17, a drop-in file imported by the main config (version 2 and
// 3 only: version 1 has no imports).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace kgpu::runtime {

struct ContainerdOptions {
    std::string runtime_name = "nvidia";
    std::string runtime_path = "/usr/bin/nvidia-container-runtime";
    bool set_as_default = false;
    bool enable_cdi = false;
    // Written as runtime_type when the copied runtime has none (nvidia-ctk's default).
    std::string runtime_type = "io.containerd.runc.v2";
    // containerd before 1.4: an empty config becomes version 1, and --set-as-default also writes
    // the deprecated [plugins.cri.containerd.default_runtime] table (nvidia-ctk's
    // WithUseLegacyConfig). Not a flag of `runtime configure`; the library keeps it so the
    // tests can replay nvidia-ctk's version 1 cases.
    bool use_legacy_config = false;
    // The version an empty or missing config is written as.
    int new_config_version = 2;
};

// Where the template runtime and the CRI plugin table are read from, when not from the config
// being edited (`--config-source command`: the output of `containerd config dump`).
struct SourceText {
    std::string text;
    std::string name;  // for messages
};

struct Edited {
    std::string text;
    int version = 2;
    bool changed = false;
};

// The CRI plugin's table name under `plugins` by config version: "cri" (1),
// "io.containerd.grpc.v1.cri" (2), "io.containerd.cri.v1.runtime" (3; nvidia-ctk's
// criRuntimePluginName).
std::string cri_plugin(int version);

// The config version of `text` (empty or no keys: options.new_config_version, or 1 with
// use_legacy_config; keys without `version`: 1). Errors: parse (source:line:column);
// invalid_argument for a `version` that is not an integer 1, 2 or 3.
Result<int> config_version(std::string_view text, std::string_view source, const ContainerdOptions& options);

// In place: `text` (the content of `source`; empty = a new file) edited so that, parsed, it is
// exactly what nvidia-ctk's AddRuntime (+ EnableCDI) makes of it; lines not involved are kept
// byte for byte. Idempotent. Errors: as config_version; invalid_argument when the runtime path
// is not absolute or the layout cannot be edited line by line (inline tables, values spanning
// lines, tables made of dotted keys): the message suggests the drop-in.
Result<Edited> configure(std::string_view text, std::string_view source, const ContainerdOptions& options,
                         const std::optional<SourceText>& from = std::nullopt);

struct DropIn {
    Edited main;             // `text` with the import pattern added to `imports` (when missing)
    std::string drop_in;     // the drop-in's whole content
    std::string import;      // the pattern imported: "<directory of the drop-in>/*.toml"
};

// The drop-in variant (nvidia-ctk's ConfigWithDropIn): the drop-in holds `version`, a copy of
// the source's whole CRI plugin table (containerd before 2.1 replaces a plugin table from an
// import instead of merging it) and the edits above; the main config gets
// "<drop-in dir>/*.toml" in `imports` (and `version` when it was empty). Errors: as
// configure(); invalid_argument for a version 1 config (no imports there: edit in place) and
// for `imports` that is not a list of strings.
Result<DropIn> configure_drop_in(std::string_view text, std::string_view source, const std::string& drop_in_path,
                                 const ContainerdOptions& options, const std::optional<SourceText>& from = std::nullopt);

// For checking a result with `containerd config dump` before it is written: `main_text` with
// its imports of the drop-in (the pattern or the file itself) pointed at `staged_drop_in`, and
// relative imports made absolute against `config_dir`. Comments are not kept (the text is only
// for the check). Errors: parse.
Result<std::string> staged_main_config(std::string_view main_text, std::string_view source, const std::string& config_dir,
                                       const std::string& drop_in_path, const std::string& staged_drop_in);

// Checks the output of `containerd config dump` (any config version: 1.x dumps version 2,
// 2.x version 3) for the runtime with its BinaryName, and default_runtime_name when
// set_as_default. Errors: parse; not_found naming what the dump lacks.
Status check_dump(std::string_view dump, const ContainerdOptions& options);

// (major, minor) from `containerd --version` ("containerd github.com/containerd/containerd
// 1.6.20~ds1 ...", "containerd containerd.io v2.0.2 ..."); nullopt when there is none.
std::optional<std::pair<int, int>> parse_containerd_version(std::string_view version_output);

}  // namespace kgpu::runtime
