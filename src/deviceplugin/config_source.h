// Per-node configs by node label (issue #27 part 1), with NVIDIA config-manager's semantics and
// names: a directory of named config files (a ConfigMap mounted as one file per key,
// CONFIG_FILE_SRCDIR), the node label NODE_LABEL (default nvidia.com/device-plugin.config) naming
// one, DEFAULT_CONFIG when the label is absent, then FALLBACK_STRATEGIES in order: `named` (a
// config called "default"), `single` (the only config there is), `empty` (no config file: the
// built-in defaults). Unlike NVIDIA's config-manager, which exits when the label names a config
// that does not exist, kgpu warns and goes on as if the label were absent.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "common/error.h"

namespace kgpu::deviceplugin {

inline constexpr const char* kConfigLabel = "nvidia.com/device-plugin.config";
// The label kgpu sets to the name of the config it applied.
inline constexpr const char* kConfigStateLabel = "nvidia.com/device-plugin.config.state";

struct ConfigSource {
    std::string srcdir;                                  // empty: off
    std::string default_config;                          // DEFAULT_CONFIG
    std::string node_label = kConfigLabel;               // NODE_LABEL
    std::vector<std::string> fallbacks{"named", "single"};  // FALLBACK_STRATEGIES (NVIDIA's chart's value)
};

struct ConfigChoice {
    std::string name;  // "" for the empty config
    std::string path;  // srcdir/name, "" for the empty config
    std::string why;   // for the log: "node label nvidia.com/device-plugin.config=ts4", "fallback single", ...
    std::vector<std::string> warnings;
};

// The config names in `srcdir`: its regular files (and links to them), not hidden ones (a
// ConfigMap volume's ..data). Errors: not_found naming the directory.
Result<std::set<std::string>> config_names(const std::string& srcdir);

// The config for `label` (the node label's value, "" when absent) among `names`. Errors:
// invalid_argument when nothing applies (naming the label, the default and the fallbacks tried)
// or a fallback strategy is unknown.
Result<ConfigChoice> choose_config(const ConfigSource& source, const std::set<std::string>& names, const std::string& label);

// Checks FALLBACK_STRATEGIES' words (named, single, empty) before anything runs.
Status check_fallbacks(const std::vector<std::string>& fallbacks);

// Whether `value` can be a label value (63 characters at most, alphanumerics and -_. inside).
bool valid_label_value(const std::string& value);

}  // namespace kgpu::deviceplugin

namespace kgpu::deviceplugin {

// NVIDIA config-manager's sidecar steps (`kgpu config-manager`):
// points `dst` at `target` (a config file, or /dev/null for the empty config) with a symbolic
// link, replaced atomically (a new link renamed over it). Returns false when `dst` already
// resolves to the same file. Errors: io naming the path.
Result<bool> point_config_link(const std::string& dst, const std::string& target);

// The pids under `proc_root` whose command line's first word is `name`, or its base name is, or
// "<base name> <second word>" is (`kgpu device-plugin`), other than `self`.
std::vector<int> find_processes(const std::string& proc_root, const std::string& name, int self);

}  // namespace kgpu::deviceplugin
