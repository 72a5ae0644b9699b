// The device plugin's settings table: every setting of NVIDIA's `flags:` section (and kgpu's
// own flat settings) declared once, with its type, default, config-file key, flag spellings,
// environment variables and help text. config.h generates Config's fields and Overrides' from it;
// config.cpp reads the file's `flags:` / `flags.plugin:` keys, the environment, applies the layers
// and describes the result from it; cli/device_plugin.cpp's add_setting_flags registers the flags
// of kgpu device-plugin, kgpu labels and kgpu mps-control-daemon from it, as NVIDIA's
// api/config/v1 Flags serve its plugin, GFD and MPS daemon. Adding a setting is one line here
// plus its use.
//
// Columns of KGPU_DEVICE_PLUGIN_OPTIONS(X):
//   X(field, Codec, default, keys, flags, env, help, shown, takers, gfd_env)
//   field    the member of Config (a value) and of Overrides / OptionText (optional)
//   Codec    how text (a flag, a variable) and the file's value are read: option::Bool, Text, ...
//   default  Config's default
//   keys     comma list: the config-file key (dotted, under flags.) and older spellings of it; a
//            name without "flags." is not read from the file and only names the setting in
//            describe() (flag- and environment-only settings, as NVIDIA has them)
//   flags    comma list of flag spellings (CLI11's), "" for none
//   env      comma list of variables; the first one set (non-empty) wins, as NVIDIA's urfave/cli
//   help     the flag's help; " (default X)" and " [env ...]" are added from the columns above
//   shown    how describe() shows it: nullptr for the value itself, or a function of the Config
//            (a derived default such as the device root)
//   takers   the subcommands that take the flag: plugin (kgpu device-plugin), gfd (kgpu labels,
//            gpu-feature-discovery's), mps (kgpu mps-control-daemon); every one reads the file key
//   gfd_env  gpu-feature-discovery's variables for it (GFD_MIG_STRATEGY before MIG_STRATEGY)
//
// Precedence is flag > env > file > default (config.h).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "deviceplugin/values.h"
#include "mps/mps.h"

namespace kgpu::deviceplugin {

struct Config;

namespace option {

// Each codec: `type` (the value), parse(text) for flags and variables (errors name neither: the
// caller adds which flag or variable it was), `list` (a flag that may repeat and takes commas),
// `trim` (blanks around a variable's value are dropped before parse).
template <class T, Result<T> (*Parse)(std::string_view)>
struct Parsed {
    using type = T;
    static constexpr bool list = false, trim = true;
    static Result<T> parse(std::string_view text) { return Parse(text); }
};
using Bool = Parsed<bool, &parse_bool>;
using Mig = Parsed<MigStrategy, &parse_mig_strategy>;
using DeviceId = Parsed<DeviceIdStrategy, &parse_device_id_strategy>;
using SharedPolicy = Parsed<SharedAllocationPolicy, &parse_shared_allocation_policy>;
using Discovery = Parsed<std::string, &parse_device_discovery_strategy>;

// A string taken as written (paths, prefixes).
struct Text {
    using type = std::string;
    static constexpr bool list = false, trim = false;
    static Result<std::string> parse(std::string_view text) { return std::string(text); }
};
// A path that must be absolute (or empty: the default).
struct AbsolutePath {
    using type = std::string;
    static constexpr bool list = false, trim = false;
    static Result<std::string> parse(std::string_view text);
};
// A boolean that stays unset unless given (settings kgpu only warns about).
struct MaybeBool {
    using type = std::optional<bool>;
    static constexpr bool list = false, trim = true;
    static Result<std::optional<bool>> parse(std::string_view text);
};
// A comma list of device list strategies; the file also takes a YAML list.
struct DeviceLists {
    using type = std::vector<DeviceListStrategy>;
    static constexpr bool list = true, trim = true;
    static Result<type> parse(std::string_view csv) { return parse_device_list_strategies(csv); }
};
// A comma list of words, blanks trimmed, empty items dropped.
struct Words {
    using type = std::vector<std::string>;
    static constexpr bool list = true, trim = false;
    static Result<type> parse(std::string_view csv);
};

// What a flag holds before it is parsed: the last value, or every value of a list flag.
template <class Codec>
using text_t = std::conditional_t<Codec::list, std::vector<std::string>, std::optional<std::string>>;

// How describe() and the flags' help show a value: "true", "none", "envvar,cdi-cri", "[a,b]";
// an empty string is "(none)", an unset optional "(not set)".
std::string shown(bool v);
std::string shown(const std::string& v);
std::string shown(const std::optional<bool>& v);
std::string shown(const std::vector<std::string>& v);
std::string shown(const std::vector<DeviceListStrategy>& v);
template <class Enum>
    requires std::is_enum_v<Enum>
std::string shown(Enum v) {
    return std::string(to_string(v));
}

// describe()'s derived defaults.
std::string shown_dev_root(const Config& c);
std::string shown_kubelet_socket(const Config& c);
std::string shown_nvml_library(const Config& c);
std::string shown_cdi_hook_path(const Config& c);
std::string shown_mps_root(const Config& c);

}  // namespace option

// clang-format off
#define KGPU_DEVICE_PLUGIN_OPTIONS(X) \
    X(mig_strategy, option::Mig, MigStrategy::none, "flags.migStrategy", "--mig-strategy", "MIG_STRATEGY", \
      "none, single or mixed", nullptr, "plugin,gfd,mps", "GFD_MIG_STRATEGY,MIG_STRATEGY") \
    X(fail_on_init_error, option::Bool, true, "flags.failOnInitError", "--fail-on-init-error", "FAIL_ON_INIT_ERROR", \
      "Exit when NVML cannot start (true) or keep running without GPUs and retry (false)", nullptr, "plugin,gfd", "GFD_FAIL_ON_INIT_ERROR,FAIL_ON_INIT_ERROR") \
    X(nvidia_driver_root, option::Text, "/", "flags.nvidiaDriverRoot", "--nvidia-driver-root,--driver-root", \
      "NVIDIA_DRIVER_ROOT", "Root of the driver installation", nullptr, "plugin", "") \
    X(nvidia_dev_root, option::Text, "", "flags.nvidiaDevRoot", "--nvidia-dev-root,--dev-root", "NVIDIA_DEV_ROOT", \
      "Root under which /dev/nvidia* are found (default: the driver root)", &option::shown_dev_root, "plugin", "") \
    X(pass_device_specs, option::Bool, false, "flags.plugin.passDeviceSpecs", "--pass-device-specs", \
      "PASS_DEVICE_SPECS", "Return DeviceSpecs in Allocate", nullptr, "plugin", "") \
    X(device_list_strategy, option::DeviceLists, {DeviceListStrategy::envvar}, "flags.plugin.deviceListStrategy", \
      "--device-list-strategy", "DEVICE_LIST_STRATEGY", \
      "envvar, volume-mounts, cdi-annotations, cdi-cri (several: comma list or repeat)", nullptr, "plugin", "") \
    X(device_id_strategy, option::DeviceId, DeviceIdStrategy::uuid, "flags.plugin.deviceIDStrategy", \
      "--device-id-strategy", "DEVICE_ID_STRATEGY", "uuid or index", nullptr, "plugin", "") \
    X(cdi_annotation_prefix, option::Text, "cdi.k8s.io/", "flags.plugin.cdiAnnotationPrefix", \
      "--cdi-annotation-prefix", "CDI_ANNOTATION_PREFIX", "Prefix of the CDI annotations (cdi-annotations)", nullptr, "plugin", "") \
    X(shared_allocation_policy, option::SharedPolicy, SharedAllocationPolicy::distributed, \
      "flags.plugin.sharedDevicesAllocationPolicy", "--shared-devices-allocation-policy", \
      "SHARED_DEVICES_ALLOCATION_POLICY", \
      "How preferred allocation picks time-sliced replicas: distributed (spread over GPUs) or packed (fill one GPU " \
      "first)", nullptr, "plugin", "") \
    X(nvidia_ctk_path, option::AbsolutePath, "", "flags.plugin.nvidiaCTKPath", \
      "--nvidia-cdi-hook-path,--nvidia-ctk-path", "NVIDIA_CDI_HOOK_PATH,NVIDIA_CTK_PATH", \
      "Hook binary named in the CDI specs the plugin writes (default /usr/bin/nvidia-cdi-hook)", \
      &option::shown_cdi_hook_path, "plugin", "") \
    X(container_driver_root, option::Text, "", "flags.plugin.containerDriverRoot", \
      "--driver-root-ctr-path,--container-driver-root", "DRIVER_ROOT_CTR_PATH,CONTAINER_DRIVER_ROOT", \
      "Accepted for NVIDIA compatibility; kgpu reads the driver at --nvidia-driver-root (a warning says so when " \
      "this differs)", nullptr, "plugin,gfd", "DRIVER_ROOT_CTR_PATH,CONTAINER_DRIVER_ROOT") \
    X(mps_root, option::Text, std::string(mps::kDefaultRoot), "flags.mpsRoot", "--mps-root", "MPS_ROOT", \
      "Host directory for MPS pipes and shared memory (sharing.mps)", &option::shown_mps_root, "plugin", "") \
    X(gdrcopy_enabled, option::Bool, false, "flags.gdrcopyEnabled", "--gdrcopy-enabled", "GDRCOPY_ENABLED", \
      "Start containers that get a device with GDRCopy support", nullptr, "plugin", "") \
    X(gds_enabled, option::Bool, false, "flags.gdsEnabled", "--gds-enabled", "GDS_ENABLED", \
      "Start containers that get a device with GPUDirect Storage support", nullptr, "plugin", "") \
    X(mofed_enabled, option::Bool, false, "flags.mofedEnabled", "--mofed-enabled", "MOFED_ENABLED", \
      "Start containers that get a device with MOFED (InfiniBand) support", nullptr, "plugin", "") \
    X(use_node_feature_api, option::MaybeBool, std::nullopt, "flags.useNodeFeatureAPI", "--use-node-feature-api", "", \
      "gpu-feature-discovery's NodeFeature API: accepted, kgpu writes the feature file (true logs a warning)", nullptr, "gfd", "GFD_USE_NODE_FEATURE_API,USE_NODE_FEATURE_API") \
    X(device_discovery_strategy, option::Discovery, "auto", "flags.deviceDiscoveryStrategy", \
      "--device-discovery-strategy", "DEVICE_DISCOVERY_STRATEGY", \
      "auto, nvml or tegra; kgpu always discovers through NVML (tegra: a warning; kgpu labels refuses it)", nullptr, "plugin,gfd", "DEVICE_DISCOVERY_STRATEGY") \
    X(device_plugin_path, option::Text, "/var/lib/kubelet/device-plugins", "flags.devicePluginPath", \
      "--device-plugin-path", "", "Kubelet device-plugin directory", nullptr, "plugin", "") \
    X(kubelet_socket, option::Text, "", "flags.kubeletSocket", "--kubelet-socket", "KUBELET_SOCKET", \
      "Kubelet registration socket (default: <device-plugin-path>/kubelet.sock)", &option::shown_kubelet_socket, "plugin", "") \
    X(nvml_library, option::Text, "", "flags.nvmlLibrary", "--nvml-library", "KGPU_NVML_LIBRARY", \
      "Path of libnvidia-ml.so.1 (default: searched under the driver root)", &option::shown_nvml_library, "plugin", "") \
    X(cdi_spec_dir, option::Text, "/var/run/cdi", "flags.cdiSpecDir", "--cdi-spec-dir", "", \
      "Where the CDI spec is written", nullptr, "plugin", "") \
    X(proc_root, option::Text, "/proc", "flags.procRoot", "--proc-root", "KGPU_PROC_ROOT", \
      "Where the host's /proc is, for the MIG capability files passed with --pass-device-specs", nullptr, "plugin", "") \
    X(apply_resource_naming, option::Bool, false, "flags.applyResourceNaming,flags.applyResourcePatterns", \
      "--apply-resource-naming,--apply-resource-patterns", "KGPU_APPLY_RESOURCE_NAMING,KGPU_APPLY_RESOURCE_PATTERNS", \
      "Apply kgpu's resource naming extensions, which NVIDIA v0.14-v0.20 ignore with a warning: the config file's " \
      "resources.gpus / resources.mig names, and sharing's per-resource rename and devices subsets", nullptr, "plugin", "") \
    X(cdi_feature_flags, option::Words, {}, "cdiFeatureFlags", "--cdi-feature-flags", "CDI_FEATURE_FLAGS", \
      "Feature flags for CDI spec generation (NVIDIA v0.20's nvcdi flags); accepted and ignored with a warning: " \
      "kgpu's CDI generation has none", nullptr, "plugin", "") \
    X(cdi_disabled_hooks, option::Words, {}, "cdiDisableHooks", "--cdi-disable-hooks", "CDI_DISABLE_HOOKS", \
      "Hooks to leave out of the CDI spec the plugin writes (create-symlinks, enable-cuda-compat, update-ldcache, " \
      "disable-device-node-modification, update-application-profile), or all", nullptr, "plugin", "")
// clang-format on

// gpu-feature-discovery's own settings (the config file's `flags.gfd:` section, which the device
// plugin ignores), declared once: config.h generates GfdFlags from it, config_file.cpp reads the
// section's keys, cli/labels*.cpp registers kgpu labels' flags (a bool flag alone means true) and
// resolves each as flag > variable > file > default. Adding one is a line here plus its use. The
// order is GFD's (its Flags.GFD struct).
//
// Columns of KGPU_GFD_OPTIONS(X):
//   X(field, type, key, flags, env, help)
//   field    the member of GfdFlags (optional), LabelsOptions (the text given) and LabelsSettings
//   type     the file's value: bool, std::string, or std::chrono::seconds (a Go duration)
//   key      its key under flags.gfd
//   flags    kgpu labels' flag spellings (CLI11's), the first one named in errors
//   env      GFD's variable for it
//   help     the flag's help; " [env ...]" is added from `env`
// clang-format off
#define KGPU_GFD_OPTIONS(X) \
    X(oneshot, bool, "oneshot", "--oneshot", "GFD_ONESHOT", "Label once and exit (the bare flag means true)") \
    X(no_timestamp, bool, "noTimestamp", "--no-timestamp", "GFD_NO_TIMESTAMP", \
      "Leave out nvidia.com/gfd.timestamp (the bare flag means true)") \
    X(sleep_interval, std::chrono::seconds, "sleepInterval", "--sleep-interval", "GFD_SLEEP_INTERVAL", \
      "Time between two labelings: 60s, 1m30s, 5m, or 'infinite' to label once and wait (default 60s)") \
    X(output_file, std::string, "outputFile", "--output-file,--output,-o", "GFD_OUTPUT_FILE", \
      "The NFD feature file, replaced atomically ('-' or '': stdout) " \
      "(default /etc/kubernetes/node-feature-discovery/features.d/kgpu)") \
    X(machine_type_file, std::string, "machineTypeFile", "--machine-type-file", "GFD_MACHINE_TYPE_FILE", \
      "File with the DMI product name for nvidia.com/gpu.machine (default <sysfs-root>/class/dmi/id/product_name)")
// clang-format on

// The spellings of one setting (the table's string columns).
struct OptionNames {
    std::string_view field, keys, flags, env, help, takers, gfd_env;
    bool taken_by(std::string_view subcommand) const;
};

// The text of each table setting as the command line gave it (parsed by parse_option_text).
struct OptionText {
#define KGPU_OPTION_TEXT(field, Codec, ...) option::text_t<Codec> field;
    KGPU_DEVICE_PLUGIN_OPTIONS(KGPU_OPTION_TEXT)
#undef KGPU_OPTION_TEXT
};

}  // namespace kgpu::deviceplugin
