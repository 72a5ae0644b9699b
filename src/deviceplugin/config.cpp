// The device plugin's configuration after the file (config_file.cpp): environment overrides, the
// merge of file, environment and flags, the checks on the result, and describe().
#include "deviceplugin/config.h"

#include <algorithm>
#include <initializer_list>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cdi/spec.h"
#include "common/files.h"
#include "common/strings.h"

namespace kgpu::deviceplugin {

std::string_view to_string(XidClass c) {
    switch (c) {
        case XidClass::ignored: return "ignored";
        case XidClass::recoverable: return "recoverable";
        case XidClass::reset: return "reset";
    }
    return "reset";
}

XidClass HealthConfig::classify(unsigned xid) const {
    if (disabled || ignored_xids.contains(xid)) return XidClass::ignored;
    if (recoverable_xids.contains(xid)) return XidClass::recoverable;
    return XidClass::reset;
}

std::string Config::dev_root() const { return nvidia_dev_root.empty() ? nvidia_driver_root : nvidia_dev_root; }

std::string Config::kubelet_socket_path() const {
    if (!kubelet_socket.empty()) return kubelet_socket;
    std::string dir = device_plugin_path;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    return dir == "/" ? "/kubelet.sock" : dir + "/kubelet.sock";
}

bool Config::uses(DeviceListStrategy s) const {
    return std::find(device_list_strategy.begin(), device_list_strategy.end(), s) != device_list_strategy.end();
}

bool Config::all_cdi() const {
    return !device_list_strategy.empty() && std::ranges::all_of(device_list_strategy, [](DeviceListStrategy s) {
        return s == DeviceListStrategy::cdi_annotations || s == DeviceListStrategy::cdi_cri;
    });
}

bool Config::passes_device_specs() const { return pass_device_specs && !all_cdi(); }

// ---- The environment (NVIDIA's variables) -----------------------------------------------------

Result<Overrides> from_env(const std::function<const char*(const char*)>& getenv) {
    Overrides o;
    auto get = [&](const char* name) -> std::optional<std::string> {
        const char* v = getenv(name);
        if (v == nullptr || *v == '\0') return std::nullopt;
        return std::string(v);
    };
    auto wrap = [](const char* name, const Error& e) {
        return std::unexpected(Error::make(Code::invalid_argument, "environment variable {}: {}", name, e.message));
    };
    Status status;
    for_each_option([&](const OptionNames& names, auto codec, auto, auto override_field, auto...) {
        using Codec = decltype(codec);
        if (!status || names.env.empty()) return;
        for (std::string_view name : strings::split(names.env, ',')) {
            const std::string var(name);
            auto v = get(var.c_str());
            if (!v) continue;
            auto r = Codec::parse(Codec::trim ? strings::trim(*v) : std::string_view(*v));
            if (!r) {
                status = wrap(var.c_str(), r.error());
                return;
            }
            o.*override_field = std::move(*r);
            return;  // the first variable set wins
        }
    });
    if (!status) return std::unexpected(status.error());
    if (auto v = get("IMEX_CHANNEL_IDS")) {
        auto r = parse_imex_channel_ids(strings::trim(*v));
        if (!r) return wrap("IMEX_CHANNEL_IDS", r.error());
        o.imex_channel_ids = *r;
    }
    if (auto v = get("IMEX_REQUIRED")) {
        auto r = parse_bool(strings::trim(*v));
        if (!r) return wrap("IMEX_REQUIRED", r.error());
        o.imex_required = *r;
    }
    if (auto v = get("CONFIG_FILE")) o.config_file = *v;

    if (auto v = get("DP_DISABLE_HEALTHCHECKS")) {
        const std::string t = strings::lower(strings::trim(*v));
        bool all = false;
        std::string xids;
        for (std::string_view item : strings::split(t, ',')) {
            item = strings::trim(item);
            if (item == "all" || item == "xids") all = true;
            else xids += std::string(item) + ",";
        }
        if (all) o.health_disabled = true;
        auto set = parse_xid_list(xids);
        if (!set) return wrap("DP_DISABLE_HEALTHCHECKS", set.error());
        if (!set->empty()) o.ignore_xids = std::move(*set);
    }
    if (auto v = get("DP_ENABLE_HEALTHCHECKS")) {
        const std::string t = strings::lower(strings::trim(*v));
        std::string xids;
        for (std::string_view item : strings::split(t, ',')) {
            item = strings::trim(item);
            if (item == "all" || item == "xids") o.enable_all_xids = true;
            else xids += std::string(item) + ",";
        }
        auto set = parse_xid_list(xids);
        if (!set) return wrap("DP_ENABLE_HEALTHCHECKS", set.error());
        if (!set->empty()) o.enable_xids = std::move(*set);
    }
    return o;
}

namespace {

void apply(Config& c, const Overrides& o) {
    for_each_option([&](const OptionNames&, auto, auto field, auto override_field, auto...) {
        if (o.*override_field) c.*field = *(o.*override_field);
    });
    if (o.imex_channel_ids) c.imex.channel_ids = *o.imex_channel_ids;
    if (o.imex_required) c.imex.required = *o.imex_required;
    if (o.health_disabled) c.health.disabled = *o.health_disabled;
    if (o.ignore_xids) c.health.ignored_xids.insert(o.ignore_xids->begin(), o.ignore_xids->end());
    if (o.enable_all_xids && *o.enable_all_xids) c.health.ignored_xids.clear();
    if (o.enable_xids)
        for (unsigned x : *o.enable_xids) c.health.ignored_xids.erase(x);
    if (o.health_recovery_period) c.health.recovery_period = *o.health_recovery_period;
}

// A sharing entry names a MIG device: "i:j" or a MIG UUID.
bool is_mig_device_ref(std::string_view id) {
    if (id.starts_with("MIG-")) return true;
    const auto colon = id.find(':');
    return colon != std::string_view::npos && colon > 0 && id.find("::") == std::string_view::npos;
}

// The checks of sharing.timeSlicing / sharing.mps that need the resolved settings (see config.h).
Status check_replicated(const Config& c, const ReplicatedResources& rr, std::string_view kind) {
    const bool mps = kind == "mps";
    auto where = [&](size_t i, int line, std::string_view key) {
        return fmt::format("{}:{}: key 'sharing.{}.resources[{}]{}'", c.config_file.empty() ? "config" : c.config_file,
                           line, kind, i, key);
    };
    std::set<std::string> renames;
    for (size_t i = 0; i < rr.resources.size(); ++i) {
        const ReplicatedResource& r = rr.resources[i];
        const bool mig_name = r.name.starts_with("nvidia.com/mig-");
        // NVIDIA: "sharing using MPS is not supported for MIG devices".
        if (mps && mig_name)
            return fail(Code::parse, "{}: {} is a MIG resource; MPS sharing is not supported for MIG devices (share "
                        "whole GPUs, or use timeSlicing)",
                        where(i, r.line, ".name"), r.name);
        if (r.unserved) continue;  // skip_unserved_mig_resources() warned
        for (size_t k = 0; k < r.device_ids.size(); ++k) {
            const int line = k < r.device_lines.size() ? r.device_lines[k] : r.line;
            if (mps && is_mig_device_ref(r.device_ids[k]))
                return fail(Code::parse, "{}: '{}' is a MIG device; MPS sharing is not supported for MIG devices",
                            where(i, line, ".devices"), r.device_ids[k]);
            if (c.mig_strategy == MigStrategy::none && is_mig_device_ref(r.device_ids[k]))
                return fail(Code::parse,
                            "{}: '{}' is a MIG device, but migStrategy none serves whole GPUs only (use single or "
                            "mixed to serve MIG devices)",
                            where(i, line, ".devices"), r.device_ids[k]);
        }
        const std::string target = !r.rename.empty() ? r.rename : rr.rename_by_default ? r.name + ".shared" : r.name;
        if (!r.all_devices && target == r.name)
            return fail(Code::parse,
                        "{}: a subset of {} is shared without a new name; set rename (or renameByDefault: true) so "
                        "shared and whole devices are served under different names",
                        where(i, r.devices_line ? r.devices_line : r.line, ".devices"), r.name);
        if (auto st = validate_resource_name(target); !st)
            return fail(Code::parse, "{}: {}", where(i, r.line, ".name"), st.error().message);
        if (target != r.name && !renames.insert(target).second)
            return fail(Code::parse, "{}: {} is the new name of two entries; each shared resource needs its own name",
                        where(i, r.line, ".rename"), target);
    }
    return {};
}

// What NVIDIA v0.14-v0.20 do to sharing.<kind> before using it (api/config/v1 replicas.go
// disableResoureRenaming, from DisableResourceNamingInConfig): a `rename` other than the default
// (none, or <name>.shared under renameByDefault) is dropped, and so is a `devices` subset (every
// device is shared). renameByDefault itself is honoured. One warning per setting dropped, naming
// the file, line and key, and what is served instead.
void disable_resource_naming(Config& c, std::optional<ReplicatedResources>& rr, std::string_view kind) {
    if (!rr) return;
    const std::string file = c.config_file.empty() ? "config" : c.config_file;
    const std::string how = "as NVIDIA's plugin v0.14-v0.20 ignore it; set flags.applyResourceNaming (or "
                            "--apply-resource-naming) to apply it";
    for (size_t i = 0; i < rr->resources.size(); ++i) {
        ReplicatedResource& r = rr->resources[i];
        const std::string served = rr->rename_by_default ? r.name + ".shared" : r.name;
        // NVIDIA warns for any rename without renameByDefault (even one equal to the name).
        if (!r.rename.empty() && (!rr->rename_by_default || r.rename != served)) {
            c.warnings.push_back(fmt::format("{}:{}: key 'sharing.{}.resources[{}].rename': {} is ignored, {}; the "
                                             "shared devices are served as {}",
                                             file, r.rename_line ? r.rename_line : r.line, kind, i, r.rename, how,
                                             served));
        }
        r.rename.clear();
        if (!r.all_devices) {
            const std::string devices = r.device_count ? std::to_string(*r.device_count)
                                                       : fmt::format("[{}]", fmt::join(r.device_ids, ", "));
            c.warnings.push_back(fmt::format("{}:{}: key 'sharing.{}.resources[{}].devices': {} is ignored, {}; "
                                             "every device of {} is shared",
                                             file, r.devices_line ? r.devices_line : r.line, kind, i, devices, how,
                                             r.name));
            r.all_devices = true;
            r.device_count.reset();
            r.device_ids.clear();
            r.device_lines.clear();
        }
    }
}

// A MIG resource name in sharing.timeSlicing under migStrategy none or single names no resource
// the plugin serves (whole GPUs, or MIG devices, are nvidia.com/gpu then): NVIDIA's plugin skips
// a resource that matches no device (rm/device_map.go updateDeviceMapWithReplicas) and serves
// nvidia.com/gpu unshared, so a config written for mixed keeps working after a strategy change.
// kgpu does the same, with one warning per entry. (sharing.mps refuses MIG names: check_replicated.)
void skip_unserved_mig_resources(Config& c) {
    if (!c.sharing.time_slicing || c.mig_strategy == MigStrategy::mixed) return;
    const std::string file = c.config_file.empty() ? "config" : c.config_file;
    auto& list = c.sharing.time_slicing->resources;
    for (size_t i = 0; i < list.size(); ++i) {
        ReplicatedResource& r = list[i];
        if (!r.name.starts_with("nvidia.com/mig-")) continue;
        r.unserved = true;
        c.warnings.push_back(fmt::format(
            "{}:{}: key 'sharing.timeSlicing.resources[{}].name': {} is a MIG resource, served only with migStrategy "
            "mixed (the strategy is {}: {} are served as nvidia.com/gpu); this entry is skipped and nothing is shared "
            "for it, as NVIDIA's plugin skips a resource that matches no device",
            file, r.line, i, r.name, to_string(c.mig_strategy),
            c.mig_strategy == MigStrategy::none ? "whole GPUs" : "MIG devices"));
    }
}

Status check_sharing(const Config& c) {
    const std::string file = c.config_file.empty() ? "config" : c.config_file;
    if (c.sharing.time_slicing && c.sharing.mps)
        return fail(Code::parse,
                    "{}:{}: key 'sharing.mps': timeSlicing and mps are both set; a node shares its devices one way "
                    "(NVIDIA's plugin would silently use mps only)",
                    file, c.sharing.mps->line);
    if (c.sharing.mps) {
        // NVIDIA's validateFlags.
        if (c.mig_strategy == MigStrategy::mixed)
            return fail(Code::parse, "{}:{}: key 'sharing.mps': MPS sharing is not supported with migStrategy mixed",
                        file, c.sharing.mps->line);
        if (c.mps_root.empty())
            return fail(Code::parse,
                        "{}:{}: key 'sharing.mps': MPS sharing needs flags.mpsRoot (or --mps-root / MPS_ROOT), the "
                        "host directory for the MPS pipes and shared memory (default /run/nvidia/mps), not empty",
                        file, c.sharing.mps->line);
        if (auto st = check_replicated(c, *c.sharing.mps, "mps"); !st) return st;
    }
    if (c.sharing.time_slicing)
        if (auto st = check_replicated(c, *c.sharing.time_slicing, "timeSlicing"); !st) return st;
    return {};
}

// One line per setting the device plugin accepts but does not use, and why.
void add_warnings(Config& c) {
    auto warn = [&](std::string line) {
        if (std::find(c.warnings.begin(), c.warnings.end(), line) == c.warnings.end()) c.warnings.push_back(std::move(line));
    };
    if (c.gfd)
        warn("flags.gfd is gpu-feature-discovery's (kgpu labels reads it); the device plugin ignores it");
    if (c.use_node_feature_api)
        warn("flags.useNodeFeatureAPI is gpu-feature-discovery's (NodeFeature objects); the device plugin ignores "
             "it, and kgpu labels writes the NFD feature file");
    if (c.device_discovery_strategy == "tegra")
        warn("flags.deviceDiscoveryStrategy tegra is ignored: kgpu discovers devices through NVML only");
    if (!c.container_driver_root.empty() && c.container_driver_root != c.nvidia_driver_root)
        warn(fmt::format("flags.plugin.containerDriverRoot '{}' is ignored: kgpu reads the driver where "
                         "flags.nvidiaDriverRoot ('{}') says, so mount the host's driver root at that same path in "
                         "the container (deploy/ does)",
                         c.container_driver_root, c.nvidia_driver_root));
    for (const auto& h : c.cdi_disabled_hooks)
        if (h != "all" && h != cdi::kChmod && std::ranges::find(cdi::kDefaultHooks, h) == cdi::kDefaultHooks.end())
            warn(fmt::format("CDI hook '{}' (--cdi-disable-hooks) is not a hook kgpu writes ({}, or all): nothing is "
                             "left out for it",
                             h, fmt::join(cdi::kDefaultHooks, ", ")));
    for (const auto& f : c.cdi_feature_flags)
        warn(fmt::format("CDI feature flag '{}' is ignored: kgpu's CDI spec generation has no feature flags", f));
    if (!c.apply_resource_naming && (!c.resources.gpus.empty() || !c.resources.mig.empty()))
        warn("resources.gpus / resources.mig are ignored, as NVIDIA's plugin v0.14-v0.20 ignore them; set "
             "flags.applyResourceNaming (or --apply-resource-naming) to serve devices under those names");
}

}  // namespace

Result<Config> resolve(Config base, const Overrides& env, const Overrides& flags) {
    apply(base, env);
    apply(base, flags);
    Config& c = base;
    if (c.device_list_strategy.empty()) return fail(Code::invalid_argument, "device list strategy: empty list");
    if (c.cdi_annotation_prefix.empty() || c.cdi_annotation_prefix.back() != '/')
        return fail(Code::invalid_argument, "cdi annotation prefix '{}': expected a prefix ending in '/' (e.g. cdi.k8s.io/)",
                    c.cdi_annotation_prefix);
    if (c.nvidia_driver_root.empty()) return fail(Code::invalid_argument, "nvidia driver root: empty path");
    if (c.device_plugin_path.empty()) return fail(Code::invalid_argument, "device plugin path: empty path");
    if (c.health.recovery_period < std::chrono::seconds(1))
        return fail(Code::invalid_argument, "health recovery period {}: expected at least 1s",
                    format_duration(std::chrono::duration_cast<std::chrono::seconds>(c.health.recovery_period)));
    if (c.proc_root.empty()) return fail(Code::invalid_argument, "proc root: empty path");
    if (!c.apply_resource_naming) {
        disable_resource_naming(c, c.sharing.time_slicing, "timeSlicing");
        disable_resource_naming(c, c.sharing.mps, "mps");
    }
    skip_unserved_mig_resources(c);
    if (auto st = check_sharing(c); !st) return std::unexpected(st.error());
    if (auto st = validate_imex_channel_ids(c.imex.channel_ids); !st) return std::unexpected(st.error());
    if (!c.nvidia_ctk_path.empty() && c.nvidia_ctk_path.front() != '/')
        return fail(Code::invalid_argument, "nvidia CDI hook path '{}': expected an absolute path", c.nvidia_ctk_path);
    add_warnings(c);
    return base;
}

std::string describe(const Config& c) {
    std::string out;
    auto line = [&](std::string_view key, const auto& value) { out += fmt::format("{}: {}\n", key, value); };
    line("configFile", c.config_file.empty() ? "(none)" : c.config_file);
    for_each_option([&](const OptionNames& names, auto, auto field, auto, auto, auto show) {
        const std::string_view key = names.keys.substr(0, names.keys.find(','));
        if constexpr (std::is_same_v<decltype(show), std::nullptr_t>) line(key, option::shown(c.*field));
        else line(key, show(c));
    });
    line("health.disabled", c.health.disabled);
    line("health.ignoredXids", fmt::format("[{}]", fmt::join(c.health.ignored_xids, ",")));
    line("health.recoverableXids", fmt::format("[{}]", fmt::join(c.health.recoverable_xids, ",")));
    line("health.resetXids", fmt::format("[{}]", fmt::join(c.health.reset_xids, ",")));
    line("health.recoveryPeriod",
         format_duration(std::chrono::duration_cast<std::chrono::seconds>(c.health.recovery_period)));
    // Patterns, not counts: "resources.gpus: 0" read like a device count.
    auto patterns = [&](const std::vector<ResourcePattern>& list) -> std::string {
        if (list.empty()) return "(none)";
        std::vector<std::string> parts;
        for (const auto& p : list) parts.push_back(fmt::format("\"{}\" -> {}", p.pattern, p.name));
        return fmt::format("{}{}", fmt::join(parts, ", "),
                           c.apply_resource_naming ? "" : " (ignored: applyResourceNaming is false)");
    };
    line("resources.gpus", patterns(c.resources.gpus));
    line("resources.mig", patterns(c.resources.mig));
    auto replicated = [&](std::string_view kind, const std::optional<ReplicatedResources>& rr) {
        const std::string key = fmt::format("sharing.{}", kind);
        if (!rr) {
            line(key, "off");
            return;
        }
        line(key + ".renameByDefault", rr->rename_by_default);
        line(key + ".failRequestsGreaterThanOne", rr->fail_requests_greater_than_one);
        for (size_t i = 0; i < rr->resources.size(); ++i) {
            const ReplicatedResource& r = rr->resources[i];
            std::string devices = r.all_devices    ? std::string("all")
                                  : r.device_count ? std::to_string(*r.device_count)
                                                   : fmt::format("[{}]", fmt::join(r.device_ids, ","));
            line(fmt::format("{}.resources[{}]", key, i),
                 fmt::format("name={} rename={} devices={} replicas={}{}", r.name, r.rename.empty() ? "-" : r.rename,
                             devices, r.replicas,
                             r.unserved ? " (skipped: a MIG resource without migStrategy mixed)" : ""));
        }
    };
    replicated("timeSlicing", c.sharing.time_slicing);
    replicated("mps", c.sharing.mps);
    line("imex.channelIDs", fmt::format("[{}]", fmt::join(c.imex.channel_ids, ",")));
    line("imex.required", c.imex.required);
    return out;
}

}  // namespace kgpu::deviceplugin
