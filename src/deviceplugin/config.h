// Device plugin configuration: NVIDIA's flags, environment variables and `version: v1` config
// file (facts/device-plugin-anchor.md), plus kgpu's own settings and its `health:` block.
//
// Precedence is flag > env > file > default: the CLI loads the file (or starts from Config{}),
// reads the environment with from_env(), fills an Overrides from its flags, and calls resolve().
//
// Config file (YAML or JSON). Every key of NVIDIA's `version: v1` schema up to v0.20 is accepted
// (a drop-in config map keeps working); mistyped values are errors
// "<file>:<line>: key '<dotted.key>': <what was expected>". Unknown keys (a typo such as
// `failOnInitErorr`) are ignored, as NVIDIA's parser ignores them: a config that ran for years
// must not crash-loop after a migration. They are collected in Config::unknown_keys: a process
// that serves warns once per key (file:line and the key), `--check-config` and `kgpu doctor`
// report them as errors. A missing `version` means v1, as in NVIDIA's plugin; a key whose value
// is null is treated as not set.
//
//   version: v1
//   flags:
//     migStrategy: none                      # none | single | mixed
//     failOnInitError: true
//     nvidiaDriverRoot: /
//     nvidiaDevRoot: /                       # default: the driver root
//     mpsRoot: /run/nvidia/mps               # host directory for MPS (sharing.mps; default as NVIDIA's chart)
//     gdrcopyEnabled: false                  # NVIDIA_GDRCOPY=enabled (+ CDI nvidia.com/gdrcopy=all)
//     gdsEnabled: false                      # NVIDIA_GDS=enabled (+ CDI nvidia.com/gds=all)
//     mofedEnabled: false                    # NVIDIA_MOFED=enabled (+ CDI nvidia.com/mofed=all)
//     useNodeFeatureAPI: false               # gpu-feature-discovery only: warned, ignored here
//     deviceDiscoveryStrategy: auto          # auto | nvml | tegra (kgpu always uses NVML: tegra warned)
//     devicePluginPath: /var/lib/kubelet/device-plugins   # kgpu
//     kubeletSocket: ""                      # kgpu; default <devicePluginPath>/kubelet.sock
//     nvmlLibrary: ""                        # kgpu; default libnvidia-ml.so.1 under the driver root
//     cdiSpecDir: /var/run/cdi               # kgpu; where the plugin writes its CDI specs
//     procRoot: /proc                        # kgpu; the host's /proc (MIG capability files)
//     applyResourceNaming: false             # kgpu; true: apply resources.gpus / resources.mig and
//                                            #   sharing's rename / devices (alias applyResourcePatterns)
//     plugin:
//       passDeviceSpecs: false
//       deviceListStrategy: envvar           # a string or a list: envvar, volume-mounts,
//                                            #   cdi-annotations, cdi-cri
//       deviceIDStrategy: uuid               # uuid | index
//       cdiAnnotationPrefix: cdi.k8s.io/
//       nvidiaCTKPath: /usr/bin/nvidia-ctk   # the hook binary named in the CDI spec
//       containerDriverRoot: /driver-root    # warned: kgpu reads the driver root at its host path
//       sharedDevicesAllocationPolicy: distributed   # distributed | packed (replicas, MIG)
//     gfd:                                   # gpu-feature-discovery's settings (kgpu labels)
//       oneshot: false
//       noTimestamp: false
//       sleepInterval: 60s
//       outputFile: /etc/kubernetes/node-feature-discovery/features.d/gfd
//       machineTypeFile: /sys/class/dmi/id/product_name
//   health:                                  # kgpu
//     disabled: false                        # true: no health checks at all
//     ignoredXids: [13, 31, 43, 45, 68, 109] # replaces the default ignore list
//     recoverableXids: [92, 94]              # Unhealthy, Healthy again after recoveryPeriod
//     resetXids: [48, 62, 63, 64, 74, 79, 95, 119, 120, 140, 143]   # Unhealthy until a GPU reset
//     recoveryPeriod: 5m                     # <n>s | <n>m | <n>h, combinations like 1m30s; >= 1s
//   resources:                               # ignored with a warning, as NVIDIA v0.14-v0.20 do,
//     gpus: [{pattern: "*", name: gpu}]      #   unless flags.applyResourceNaming (or
//     mig:  [{pattern: "1g.*", name: mig-small}]  #   --apply-resource-naming) is true
//   sharing:
//     timeSlicing:                           # or mps: (same keys; parsed and validated, served
//                                            #   from issue #18)
//       renameByDefault: false               # true: a shared resource is served as <name>.shared
//       failRequestsGreaterThanOne: false    # true: Allocate refuses more than one replica
//                                            #   (always true for mps, as NVIDIA: false is
//                                            #   ignored with a warning)
//       resources:
//         - name: nvidia.com/gpu             # a resource the node serves ("gpu" = "nvidia.com/gpu")
//           rename: ""                       # new name for the shared devices  } ignored with a warning,
//           devices: all                     # all | <count> | [<index>, ...]   } as NVIDIA v0.14-v0.20,
//                                            #   unless applyResourceNaming (disable_resource_naming)
//           replicas: 4                      # >= 2
//   imex:
//     channelIDs: [0]                        # [] or [0]: /dev/nvidia-caps-imex-channels/channel0
//     required: false                        # true: a missing channel is an error at start
//
// resolve() first drops, unless apply_resource_naming, what NVIDIA v0.14-v0.20 drop
// (DisableResourceNamingInConfig): a rename other than the default and a devices subset, with
// one warning each; renameByDefault stays.
// Checks that need the resolved settings (resolve()): a MIG resource name (nvidia.com/mig-...)
// in sharing.timeSlicing under migStrategy none or single matches no device: the entry is
// dropped with a warning, as NVIDIA's plugin skips resources that match no device (device_map.go)
// and serves nvidia.com/gpu unshared; a MIG device ("i:j", "MIG-...") in a devices list needs a
// strategy that serves MIG devices; a subset of
// devices (`devices` other than all) needs a new name (rename or renameByDefault), so shared and
// whole devices never hide under one name; MPS refuses MIG (migStrategy mixed, MIG resources or
// devices) and needs a non-empty mpsRoot; timeSlicing and mps are not combined.
// Checks that need the node (build_resources): unknown devices, a device listed twice, a count
// larger than what the resource has.
//
// resolve() also adds to Config::warnings one line per setting the device plugin accepts but
// does not use, saying why (flags.gfd, useNodeFeatureAPI, deviceDiscoveryStrategy tegra,
// containerDriverRoot, resources, sharing rename / devices without applyResourceNaming).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/duration.h"
#include "common/error.h"
#include "common/unknown_key.h"
#include "deviceplugin/options.h"
#include "deviceplugin/values.h"

namespace kgpu::deviceplugin {


// How the health checker treats an XID (facts/diagnostics.md "Recovery classes").
enum class XidClass {
    ignored,      // application-caused: the device stays Healthy
    recoverable,  // Unhealthy, Healthy again after recovery_period of clean probes
    reset,        // Unhealthy until the GPU was reset (probes clean, nothing pending)
};
std::string_view to_string(XidClass c);

struct HealthConfig {
    // Everything off (DP_DISABLE_HEALTHCHECKS=all or =xids, or health.disabled: true): devices
    // only turn Unhealthy when the GPU is lost.
    bool disabled = false;
    std::set<unsigned> ignored_xids{13, 31, 43, 45, 68, 109};
    std::set<unsigned> recoverable_xids{92, 94};
    std::set<unsigned> reset_xids{48, 62, 63, 64, 74, 79, 95, 119, 120, 140, 143};
    std::chrono::milliseconds recovery_period{std::chrono::seconds(300)};  // whole seconds from a config

    // ignored when health is disabled or the XID is in ignored_xids; recoverable when in
    // recoverable_xids; reset otherwise (an XID nobody classified is treated as the anchor does,
    // as critical, and conservatively needs a reset).
    XidClass classify(unsigned xid) const;
};

// `resources:` — names for GPUs (pattern on the product name, e.g. "*A100*") and MIG devices
// (pattern on the profile, e.g. "1g.*"); '*' is the only wildcard, the whole string must match.
// Applied only with Config::apply_resource_naming (see resources.h).
struct ResourcePattern {
    std::string pattern;
    std::string name;
};
struct ResourceNaming {
    std::vector<ResourcePattern> gpus;
    std::vector<ResourcePattern> mig;
};

// `sharing.timeSlicing:`. Line numbers (1-based, 0 when unknown) let checks that run after
// parsing (resolve, build_resources) point at the file.
struct ReplicatedResource {
    std::string name;                     // qualified: "nvidia.com/gpu"
    std::string rename;                   // qualified; empty: none
    bool all_devices = true;              // devices: all (or absent)
    std::optional<unsigned> device_count; // devices: <n>
    std::vector<std::string> device_ids;  // devices: [0, "1:0", "GPU-..."]
    unsigned replicas = 2;
    int line = 0;                         // of the list item
    int devices_line = 0;                 // of `devices:`
    int rename_line = 0;                  // of `rename:`
    std::vector<int> device_lines;        // one per device_ids entry
    // Set by resolve(): the entry matches no resource the MIG strategy serves (a MIG resource name
    // without migStrategy mixed); it was warned about and build_resources() skips it.
    bool unserved = false;
};
// `sharing.timeSlicing` or `sharing.mps`: which devices are replicated, and how.
struct ReplicatedResources {
    bool rename_by_default = false;
    // Allocate refuses requests for more than one replica. Default false for time-slicing; always
    // true for MPS (NVIDIA's NewConfig forces it, and its ValidateRequest ignores the setting for
    // MPS): a `false` there is ignored with a warning. fail_requests_set says whether the file set it.
    bool fail_requests_greater_than_one = false;
    bool fail_requests_set = false;
    std::vector<ReplicatedResource> resources;
    int line = 0;  // of `timeSlicing:` / `mps:`
};
using TimeSlicing = ReplicatedResources;
struct Sharing {
    std::optional<ReplicatedResources> time_slicing;
    // Parsed and validated with NVIDIA's rules; served as MPS replicas (resources.h, mps.h).
    std::optional<ReplicatedResources> mps;
};

// `imex:` — IMEX channels handed to every container that gets a device.
struct Imex {
    std::vector<unsigned> channel_ids;  // [] or [0] (NVIDIA's rule)
    bool required = false;              // a missing channel fails the start instead of a warning
};

// `flags.gfd:` — gpu-feature-discovery's settings. The device plugin does not use them (a
// warning says so); `kgpu labels` reads them from the same shared file.
// Its fields: KGPU_GFD_OPTIONS (options.h).
struct GfdFlags {
#define KGPU_GFD_FIELD(field, type, ...) std::optional<type> field;
    KGPU_GFD_OPTIONS(KGPU_GFD_FIELD)
#undef KGPU_GFD_FIELD
};

// A key the config file has that the schema does not know; ignored (see the top).
using UnknownKey = yaml::UnknownKey;
// "<file>:<line>: key '<key>': unknown key (expected one of: ...)": the error --check-config and
// kgpu doctor report.
std::string unknown_key_error(const UnknownKey& k);
// The warning of a process that serves: the same, and that the key is ignored.
std::string unknown_key_warning(const UnknownKey& k);

struct Config {
    // NVIDIA's `flags:` settings and kgpu's flat ones (deviceplugin/options.h).
#define KGPU_CONFIG_FIELD(field, Codec, dflt, ...) typename Codec::type field = dflt;
    KGPU_DEVICE_PLUGIN_OPTIONS(KGPU_CONFIG_FIELD)
#undef KGPU_CONFIG_FIELD
    std::optional<GfdFlags> gfd;                   // set when the file has flags.gfd
    Imex imex;
    HealthConfig health;
    ResourceNaming resources;
    Sharing sharing;

    // The file this came from (empty: none), the table keys it set ("flags.failOnInitError",
    // under their first spelling), and what loading it noticed but accepted.
    std::string config_file;
    std::set<std::string> file_keys;
    std::vector<std::string> warnings;
    // Keys of the file no schema version knows, in file order (not in `warnings`: whoever serves
    // warns about them, --check-config refuses them).
    std::vector<UnknownKey> unknown_keys;

    std::string dev_root() const;             // nvidia_dev_root, or nvidia_driver_root when empty
    std::string kubelet_socket_path() const;  // kubelet_socket, or <device_plugin_path>/kubelet.sock
    bool uses(DeviceListStrategy s) const;    // s is in device_list_strategy
    // Every device list strategy is a CDI one (cdi-annotations, cdi-cri).
    bool all_cdi() const;
    // Whether Allocate hands DeviceSpecs: passDeviceSpecs, unless every strategy is a CDI one.
    // NVIDIA v0.17-v0.20 return before DeviceSpecs then (the CDI spec gives the container its
    // device nodes), and the GPU Operator sets PASS_DEVICE_SPECS=true together with CDI
    // strategies, so kgpu follows v0.20: no DeviceSpecs and no missing-node refusal.
    bool passes_device_specs() const;
};

// Parses a config file's text; `source` names it in errors ("<source>:<line>: ..."). Errors:
// parse for YAML syntax, a wrong `version`, wrong types, invalid values (an error message also
// lists the unknown keys seen, a likely cause: `replica:` for `replicas:`). Unknown keys are not
// errors: Config::unknown_keys. The result has config_file = source.
Result<Config> parse_config(std::string_view yaml_text, std::string_view source);
// Reads and parses `path`. Errors: those of files::read (not_found, io) and parse_config.
Result<Config> load_config_file(const std::string& path);

// One optional value per setting; what is set wins over the layer below.
struct Overrides {
#define KGPU_OVERRIDE_FIELD(field, Codec, ...) std::optional<typename Codec::type> field;
    KGPU_DEVICE_PLUGIN_OPTIONS(KGPU_OVERRIDE_FIELD)
#undef KGPU_OVERRIDE_FIELD
    std::optional<std::vector<unsigned>> imex_channel_ids;
    std::optional<bool> imex_required;
    // Not applied by resolve(): the CLI uses it to pick the file to load (flag > env).
    std::optional<std::string> config_file;
    // Health, as NVIDIA's DP_DISABLE_HEALTHCHECKS / DP_ENABLE_HEALTHCHECKS:
    std::optional<bool> health_disabled;              // "all" or "xids": every check off
    std::optional<std::set<unsigned>> ignore_xids;    // added to the ignore list
    std::optional<bool> enable_all_xids;              // DP_ENABLE_HEALTHCHECKS=all: ignore list emptied
    std::optional<std::set<unsigned>> enable_xids;    // removed from the ignore list (wins over ignore_xids)
    std::optional<std::chrono::seconds> health_recovery_period;  // --health-recovery-period
};

// Calls f(names, Codec{}, &Config::field, &Overrides::field, &OptionText::field, shown) for each
// setting of options.h, in table order.
template <class F>
void for_each_option(F&& f) {
#define KGPU_VISIT_OPTION(field, Codec, dflt, keys, flags, env, help, shown, takers, gfd_env)                      \
    f(OptionNames{#field, keys, flags, env, help, takers, gfd_env}, Codec{}, &Config::field, &Overrides::field, \
      &OptionText::field, shown);
    KGPU_DEVICE_PLUGIN_OPTIONS(KGPU_VISIT_OPTION)
#undef KGPU_VISIT_OPTION
}

// The flag's help: the table's text, then, unless the text names its default, " (default X)" for
// a default worth showing (a boolean's says that the bare flag means true), and " [env A, B]".
// `taker` (plugin, gfd, mps) picks the variables named: gfd_env for gfd, env otherwise.
std::string option_help(const OptionNames& names, std::string_view shown_default, bool boolean,
                        std::string_view taker = "plugin");

// Every variable the table's settings are read from (env and gfd_env), in table order: what a
// process that sets everything by flag (kgpu demo) keeps from its children.
std::vector<std::string> option_variables();

// Parses the command line's text of each table setting into `out`. Errors: invalid_argument
// "<flag>: <reason>" naming the flag's first spelling.
Status parse_option_text(const OptionText& text, Overrides& out);

// The settings gpu-feature-discovery takes (takers "gfd"), as `kgpu labels` reads them: the flag's
// text, else the first of GFD's variables set (gfd_env). `sources`, when given, gets where each
// came from, by field ("--driver-root-ctr-path", "environment variable DRIVER_ROOT_CTR_PATH").
// Errors: invalid_argument naming the flag or the variable.
Result<Overrides> gfd_settings(const OptionText& text, const std::function<const char*(const char*)>& getenv,
                               std::map<std::string, std::string>* sources = nullptr);

// Reads every table setting's variables (options.h: MIG_STRATEGY, FAIL_ON_INIT_ERROR,
// NVIDIA_DRIVER_ROOT, ...; of several spellings the first set wins), CONFIG_FILE,
// IMEX_CHANNEL_IDS (comma list), IMEX_REQUIRED, DP_DISABLE_HEALTHCHECKS ("all", "xids", or XIDs to
// ignore in addition) and DP_ENABLE_HEALTHCHECKS ("all", or XIDs to stop ignoring; as in NVIDIA's
// plugin, "all" in DP_DISABLE_HEALTHCHECKS still wins).
// Unset or empty variables are not set.
// `getenv` is std::getenv in production, a map lookup in tests (may return nullptr).
// Errors: invalid_argument "environment variable NAME: <reason>".
Result<Overrides> from_env(const std::function<const char*(const char*)>& getenv);

// base (the file's Config, or Config{}) with env applied, then flags. Health overrides apply
// in this order per layer: disabled, ignore_xids added, enable_all_xids, enable_xids removed.
// Errors: invalid_argument when the result is inconsistent (empty device list strategy, an empty
// cdi annotation prefix or one not ending in '/', an empty driver root or device plugin path,
// a recovery period under 1s), and parse errors "<file>:<line>: ..." for sharing settings the
// resolved MIG strategy cannot serve or a device subset without a new name (see the top).
Result<Config> resolve(Config base, const Overrides& env, const Overrides& flags);

// "key: value" per line with the config file's key names (flags.migStrategy: none, ...,
// health.recoveryPeriod: 5m), for the "effective config" log at start.
// Equal configs describe equally; the plugin compares descriptions to see what a SIGHUP changed.
std::string describe(const Config& config);

}  // namespace kgpu::deviceplugin
