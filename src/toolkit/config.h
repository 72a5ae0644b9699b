// The container runtime's configuration (`kgpu container-runtime`, docs/container-runtime.md):
// a flat TOML file, default /etc/kgpu/container-runtime.toml, or the file named by env
// KGPU_RUNTIME_CONFIG (DESIGN.md "Fixed interfaces"), or the file `kgpu runtime install` wrote
// and recorded next to the binary it installed (containerd passes the runtime neither an env
// variable nor a flag, so `install --runtime-config FILE` would otherwise write a file the runtime
// never reads). The two accept-* keys keep the names and the meaning of NVIDIA's
// /etc/nvidia-container-runtime/config.toml.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace kgpu::toolkit {

inline constexpr std::string_view kDefaultConfigPath = "/etc/kgpu/container-runtime.toml";
inline constexpr std::string_view kConfigEnv = "KGPU_RUNTIME_CONFIG";
// The file `kgpu runtime install` writes next to the installed binary (<install-dir>/…): one line,
// the host path of the config it wrote. Only root can write there (the install directory is
// root's, like the binary containerd runs).
inline constexpr std::string_view kConfigRecordName = "container-runtime-config.path";

struct RuntimeConfig {
    // The OCI runtime that does the work: an absolute path, or names searched in PATH in order.
    std::vector<std::string> low_level_runtime = {"runc", "crun"};
    std::string driver_root = "/";   // host path of the driver's files (GPU Operator: /run/nvidia/driver)
    std::string dev_root;            // root under which dev/nvidia* are found; "" = the driver root
    std::string nvml_library;        // explicit libnvidia-ml path; "" = searched under the driver root
    std::string proc_root = "/proc"; // the host's /proc (MIG capability minors)
    std::string log_file;            // appended to; "" = none (errors still reach runc's --log file)
    std::string log_level = "info";  // debug, info, warn, error
    // NVIDIA's security settings, with NVIDIA's defaults (drop-in); `kgpu runtime install` writes
    // the secure pair (false, true).
    bool accept_envvar_when_unprivileged = true;
    bool accept_volume_mounts = false;
    // CDI device requests in annotations whose key starts with one of these.
    std::vector<std::string> annotation_prefixes = {"cdi.k8s.io/"};
    // The CDI kind kgpu resolves in memory; other kinds are left to containerd's CDI support.
    std::string default_kind = "nvidia.com/gpu";
    // The createContainer hooks' binary (a host path). "" = nvidia-cdi-hook next to this binary
    // when present (the layout `kgpu runtime install` makes), else this binary itself.
    std::string hook_path;
    // The host's ldconfig the update-ldcache hook runs ("@" prefix: a host path, as NVIDIA spells it).
    std::string ldconfig_path = "@/sbin/ldconfig";
    // Skip every NVIDIA_REQUIRE_* check (as if each container set NVIDIA_DISABLE_REQUIRE=true).
    bool disable_require = false;
    // Where the node's inventory is kept between creates (toolkit/inventory_cache.h), a host path
    // only root writes; "" = ask NVML on every create.
    std::string inventory_cache = "/run/kgpu/container-runtime/inventory.json";

    std::string source;  // the file read, or "" for built-in defaults
};

// Parses the file's text; `source` names it in messages. Errors (Code::parse / invalid_argument):
// not TOML ("<source>:<line>:<col>: ..."), an unknown key or a value of the wrong type or range
// ("<source>:<line>: key '<k>': expected ...").
Result<RuntimeConfig> parse_config(std::string_view text, std::string_view source);

// Which file the runtime reads, and what chose it (for the runtime's log).
struct ConfigSource {
    std::string path;       // the config file
    std::string chosen_by;  // "KGPU_RUNTIME_CONFIG", "<install-dir>/<kConfigRecordName>" or "the default path"
    std::string record;     // the install's record when it chose the file, else ""
    // Whether a missing file is an error: one the environment or the install's record names
    // must exist; only the default path may be absent (then NVIDIA's defaults apply).
    bool required = false;
};

// In order: the file named by KGPU_RUNTIME_CONFIG (`env_value`, when non-empty); the file named by
// <install_dir>/kConfigRecordName when that exists (`install_dir`: the directory of the running
// binary; "" = none); kDefaultConfigPath. Errors: the record exists but is not a regular file,
// cannot be read, or does not hold one absolute path (invalid_argument naming it).
Result<ConfigSource> config_source(std::string_view env_value, const std::string& install_dir);

// Reads the chosen file: absent and not required = the built-in defaults (source ""). Errors:
// not_found for an absent required file (the message names it and what named it); those of
// files::read_regular (a FIFO or a directory is refused, never waited on) and parse_config.
Result<RuntimeConfig> load_config(const ConfigSource& source);

// load_config(config_source(env_value, "")): KGPU_RUNTIME_CONFIG, else the default path.
Result<RuntimeConfig> load_config(std::string_view env_value);

// The config as TOML (every key, with a comment each), for `kgpu runtime install`.
std::string render_config(const RuntimeConfig& config);

}  // namespace kgpu::toolkit
