// `kgpu labels`' settings: flags, GFD's environment variables and the config file's `flags`
// section resolved into LabelsSettings (labels.h). Labelling and its loop are in labels.cpp.
#include "cli/labels.h"

#include "cli/device_plugin.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>

#include "common/duration.h"
#include "common/files.h"
#include "common/log.h"
#include "common/strings.h"
#include "deviceplugin/config.h"
#include "inventory/vgpu.h"
#include "kube/api_stats.h"
#include "kube/node_labels.h"
#include "kube/node_watch.h"

namespace kgpu::cli {

namespace dp = kgpu::deviceplugin;

Result<std::optional<std::chrono::milliseconds>> parse_interval(std::string_view text) {
    const std::string_view original = text;
    auto bad = [&] {
        return fail(Code::invalid_argument,
                    "--sleep-interval '{}': expected a positive duration such as 60s, 1m30s, 5m or 'infinite'", original);
    };
    if (text == "infinite") return std::nullopt;
    // A bare number is seconds (kgpu's older spelling; Go wants a unit).
    std::uint64_t plain = 0;
    if (auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), plain);
        ec == std::errc() && p == text.data() + text.size()) {
        if (plain == 0 || plain > (std::uint64_t{1} << 40)) return bad();
        return std::chrono::milliseconds(plain * 1000);
    }
    // Go's time.ParseDuration: ([0-9]*(\.[0-9]*)?unit)+ with units ns us µs ms s m h.
    static constexpr std::pair<std::string_view, double> kUnits[] = {
        {"ns", 1e-6}, {"us", 1e-3}, {"\u00b5s", 1e-3}, {"\u03bcs", 1e-3}, {"ms", 1}, {"s", 1e3}, {"m", 6e4}, {"h", 3.6e6}};
    if (!text.empty() && text.front() == '+') text.remove_prefix(1);
    if (text.empty()) return bad();
    double total_ms = 0;
    while (!text.empty()) {
        size_t i = 0;
        double whole = 0, frac = 0, scale = 1;
        bool digits = false;
        while (i < text.size() && text[i] >= '0' && text[i] <= '9') whole = whole * 10 + (text[i++] - '0'), digits = true;
        if (i < text.size() && text[i] == '.') {
            ++i;
            while (i < text.size() && text[i] >= '0' && text[i] <= '9') frac = frac * 10 + (text[i++] - '0'), scale *= 10, digits = true;
        }
        if (!digits) return bad();
        text.remove_prefix(i);
        double unit = 0;
        size_t unit_len = 0;
        for (const auto& [name, ms] : kUnits)  // longest match: "ms" before "m"
            if (text.starts_with(name) && name.size() > unit_len) unit = ms, unit_len = name.size();
        if (unit_len == 0) return bad();
        text.remove_prefix(unit_len);
        total_ms += (whole + frac / scale) * unit;
        if (total_ms > 1e15) return bad();
    }
    const auto ms = static_cast<std::int64_t>(std::llround(total_ms));
    if (ms < 1) return bad();
    return std::chrono::milliseconds(ms);
}

namespace {

// The first of `names` that is set and not empty.
std::optional<std::string> env_value(const std::function<const char*(const char*)>& getenv,
                                     std::initializer_list<const char*> names, const char** which) {
    for (const char* n : names) {
        const char* v = getenv(n);
        if (v && *v) {
            *which = n;
            return std::string(v);
        }
    }
    return std::nullopt;
}

// The flag's value, else the first environment variable's; `source` names where it came from.
struct Setting {
    std::optional<std::string> value;
    std::string source;
};
Setting setting(const std::optional<std::string>& flag, std::string_view flag_name,
                const std::function<const char*(const char*)>& getenv, std::initializer_list<const char*> envs) {
    if (flag) return {flag, std::string(flag_name)};
    const char* which = nullptr;
    auto v = env_value(getenv, envs, &which);
    if (v) return {v, fmt::format("environment variable {}", which)};
    return {};
}

Status set_bool(bool& out, const Setting& s) {
    if (!s.value) return {};
    auto b = dp::parse_bool(*s.value);
    if (!b) return fail(Code::invalid_argument, "{} '{}': expected true or false", s.source, *s.value);
    out = *b;
    return {};
}

// A GFD setting (KGPU_GFD_OPTIONS) from the text a flag or variable gave, of each type the
// settings have; nothing when neither gave one.
Status assign(bool& out, const Setting& s) { return set_bool(out, s); }
Status assign(std::string& out, const Setting& s) {
    if (s.value) out = *s.value;
    return {};
}
Status assign(std::optional<std::chrono::milliseconds>& out, const Setting& s) {
    if (!s.value) return {};
    auto i = parse_interval(*s.value);
    if (!i) return fail(Code::invalid_argument, "{}: {}", s.source, i.error().message);
    out = *i;
    return {};
}

// The same from the config file's flags.gfd value.
void from_file(bool& out, bool v, const dp::Config&) { out = v; }
void from_file(std::string& out, const std::string& v, const dp::Config&) { out = v; }
void from_file(std::optional<std::chrono::milliseconds>& out, std::chrono::seconds v, const dp::Config& cfg) {
    if (v.count() > 0) out = std::chrono::milliseconds(v);
    else log::warn("labels: {}: flags.gfd.sleepInterval 0s is ignored: expected a positive duration", cfg.config_file);
}

// A table row's flag as errors name it: its first spelling.
constexpr std::string_view first_flag(std::string_view flags) { return flags.substr(0, flags.find(',')); }

// Sharing as GFD reads it from the device plugin's config: the strategy of the section with a
// replicated resource, and each resource's replicas. A resource the plugin serves under another
// name gets no "-SHARED" product suffix: renameByDefault, or a per-resource rename only with the
// file's flags.applyResourceNaming (GFD v0.14-v0.20 drop such a rename, as the plugin does).
labels::Sharing sharing_of(const dp::Config& c) {
    labels::Sharing s;
    // GFD's ReplicatedResources(): the mps section when there is one, else timeSlicing.
    const dp::ReplicatedResources* rep = c.sharing.mps           ? &*c.sharing.mps
                                         : c.sharing.time_slicing ? &*c.sharing.time_slicing
                                                                  : nullptr;
    if (!rep) return s;
    for (const auto& r : rep->resources) {
        const bool renamed = rep->rename_by_default || (c.apply_resource_naming && !r.rename.empty());
        s.resources.emplace(r.name, labels::SharedResource{r.replicas, renamed});
        if (r.replicas > 1) s.strategy = c.sharing.mps ? "mps" : "time-slicing";
    }
    return s;
}

// GFD's settings in the config file's flags, for those no flag or variable gave; one the file
// does not set is what the flags and defaults made it (as GFD builds its config afresh at each
// load: a key removed before a SIGHUP no longer applies).
void apply_file_flags(LabelsSettings& s, const dp::Config& cfg) {
    if (s.without_file) {
        const LabelsSettings& b = *s.without_file;
        s.fail_on_init_error = b.fail_on_init_error;
        s.use_node_feature_api = b.use_node_feature_api;
#define KGPU_GFD_RESET(field, ...) s.field = b.field;
        KGPU_GFD_OPTIONS(KGPU_GFD_RESET)
#undef KGPU_GFD_RESET
    }
    auto open = [&](const char* name) { return !s.given.contains(name); };
    if (cfg.file_keys.contains("flags.failOnInitError") && open("fail_on_init_error"))
        s.fail_on_init_error = cfg.fail_on_init_error;
    if (cfg.use_node_feature_api && open("use_node_feature_api")) s.use_node_feature_api = *cfg.use_node_feature_api;
    if (!cfg.gfd) return;
    const dp::GfdFlags& g = *cfg.gfd;
#define KGPU_GFD_FROM_FILE(field, ...) \
    if (g.field && open(#field)) from_file(s.field, *g.field, cfg);
    KGPU_GFD_OPTIONS(KGPU_GFD_FROM_FILE)
#undef KGPU_GFD_FROM_FILE
}

}  // namespace

// The options the config file gives (MIG strategy, sharing), with the flag's or env's MIG
// strategy over the file's; the file's GFD flags go into `s` (apply_file_flags).
Result<labels::Options> load_label_options(LabelsSettings& s) {
    labels::Options o;
    if (!s.config_file.empty()) {
        auto cfg = dp::load_config_file(s.config_file);
        if (!cfg) return std::unexpected(cfg.error());
        apply_file_flags(s, *cfg);
        for (const auto& w : cfg->warnings) log::warn("labels: {}: {}", s.config_file, w);
        // Ignored as by GFD (NVIDIA's parser), once per load (start, SIGHUP).
        for (const auto& k : cfg->unknown_keys) log::warn("labels: {}", dp::unknown_key_warning(k));
        o.sharing = sharing_of(*cfg);
        o.mig_strategy = cfg->mig_strategy;
    }
    if (s.mig_strategy) o.mig_strategy = *s.mig_strategy;
    return o;
}

Result<LabelsSettings> resolve_labels_settings(const LabelsOptions& o,
                                               const std::function<const char*(const char*)>& getenv) {
    LabelsSettings s;
    // A flag or variable given: the config file's value for it does not apply (apply_file_flags).
    auto given = [&](const char* name, const Setting& v) {
        if (v.value) s.given.insert(name);
        return v;
    };
    // GFD's own settings: flag over variable (KGPU_GFD_OPTIONS).
    s.machine_type_file = (std::filesystem::path(o.sysfs_root) / "class/dmi/id/product_name").string();
#define KGPU_GFD_RESOLVE(field, type, key, flags, env, help) \
    if (auto st = assign(s.field, given(#field, setting(o.field, first_flag(flags), getenv, {env}))); !st) \
        return std::unexpected(st.error());
    KGPU_GFD_OPTIONS(KGPU_GFD_RESOLVE)
#undef KGPU_GFD_RESOLVE
    // The table's GFD settings: flag over GFD's variables.
    std::map<std::string, std::string> gfd_source;
    auto gfd = dp::gfd_settings(o.options, getenv, &gfd_source);
    if (!gfd) return std::unexpected(gfd.error());
    if (gfd->fail_on_init_error) {
        s.fail_on_init_error = *gfd->fail_on_init_error;
        s.given.insert("fail_on_init_error");
    }
    if (gfd->use_node_feature_api && *gfd->use_node_feature_api) {
        s.use_node_feature_api = **gfd->use_node_feature_api;
        s.given.insert("use_node_feature_api");
    }
    if (gfd->mig_strategy) s.mig_strategy = *gfd->mig_strategy;
    if (auto v = setting(o.config_file, "--config-file", getenv, {"GFD_CONFIG_FILE", "CONFIG_FILE"}); v.value)
        s.config_file = *v.value;
    if (gfd->device_discovery_strategy && *gfd->device_discovery_strategy != "auto" &&
        *gfd->device_discovery_strategy != "nvml")
        return fail(Code::invalid_argument,
                    "{} '{}': kgpu labels supports auto and nvml (not tegra or vfio)",
                    gfd_source["device_discovery_strategy"], *gfd->device_discovery_strategy);
    // GFD's Kubernetes client settings, checked like GFD checks them (a float, an integer): the
    // client's rate limit when kgpu talks to the API server (--write-node-labels, the config label).
    if (auto v = setting(o.kube_api_qps, "--kube-api-qps", getenv, {"KUBE_API_QPS"}); v.value) {
        double qps = 0;
        auto [end, ec] = std::from_chars(v.value->data(), v.value->data() + v.value->size(), qps);
        if (ec != std::errc{} || end != v.value->data() + v.value->size())
            return fail(Code::invalid_argument, "{} '{}': expected a number of queries per second", v.source, *v.value);
        s.kube_limit.qps = qps;
    }
    if (auto v = setting(o.kube_api_burst, "--kube-api-burst", getenv, {"KUBE_API_BURST"}); v.value) {
        long burst = 0;
        auto [end, ec] = std::from_chars(v.value->data(), v.value->data() + v.value->size(), burst);
        if (ec != std::errc{} || end != v.value->data() + v.value->size() || burst < 1 || burst > 100000)
            return fail(Code::invalid_argument, "{} '{}': expected an integer from 1", v.source, *v.value);
        s.kube_limit.burst = static_cast<int>(burst);
    }
    if (auto st = set_bool(s.write_node_labels, setting(o.write_node_labels, "--write-node-labels", getenv,
                                                        {"KGPU_WRITE_NODE_LABELS"}));
        !st)
        return std::unexpected(st.error());
    if (s.write_node_labels) {
        s.kubeconfig = o.kubeconfig;
        if (auto v = setting(o.node_name, "--node-name", getenv, {"NODE_NAME"}); v.value) s.node_name = *v.value;
        if (s.node_name.empty())
            return fail(Code::invalid_argument,
                        "--write-node-labels needs this node's name: --node-name or NODE_NAME (the downward API's "
                        "spec.nodeName)");
        if (!s.given.contains("output_file")) s.feature_file = false;  // neither --output-file nor GFD_OUTPUT_FILE
    }
    auto srcdir_setting = setting(o.config_file_srcdir, "--config-file-srcdir", getenv, {"CONFIG_FILE_SRCDIR"});
    // Flags over environment: a --config-file flag outside a directory only the environment gives
    // is the config (a command run by hand in the labels container).
    if (srcdir_setting.value && !o.config_file_srcdir && o.config_file &&
        std::filesystem::path(*o.config_file).lexically_normal().parent_path() !=
            std::filesystem::path(*srcdir_setting.value + "/").lexically_normal().parent_path()) {
        s.warnings.push_back(fmt::format("CONFIG_FILE_SRCDIR {} is not used: --config-file {} is given",
                                         *srcdir_setting.value, *o.config_file));
        srcdir_setting.value.reset();
    }
    if (auto v = srcdir_setting; v.value) {
        deviceplugin::ConfigSource& src = s.config_source;
        src.srcdir = *v.value;
        if (auto d = setting(o.default_config, "--default-config", getenv, {"DEFAULT_CONFIG"}); d.value) src.default_config = *d.value;
        if (auto l = setting(o.node_label, "--node-label", getenv, {"NODE_LABEL"}); l.value) src.node_label = *l.value;
        if (auto f = setting(o.fallback_strategies, "--fallback-strategies", getenv, {"FALLBACK_STRATEGIES"}); f.value) {
            src.fallbacks.clear();
            for (auto part : strings::split(*f.value, ','))
                if (!strings::trim(part).empty()) src.fallbacks.emplace_back(strings::trim(part));
        }
        if (src.node_label.empty())
            return fail(Code::invalid_argument, "--node-label/NODE_LABEL: expected a label key, got an empty one");
        if (auto st = deviceplugin::check_fallbacks(src.fallbacks); !st) return std::unexpected(st.error());
        // A config file inside the directory is its default (the manifests' config.yaml).
        const auto file = std::filesystem::path(s.config_file).lexically_normal();
        if (!s.config_file.empty() && src.default_config.empty() &&
            file.parent_path() == std::filesystem::path(src.srcdir + "/").lexically_normal().parent_path())
            src.default_config = file.filename().string();
        else if (!s.config_file.empty())
            s.warnings.push_back(fmt::format("--config-file/CONFIG_FILE {} is not used: the config comes from {} by the "
                                             "node label {}",
                                             s.config_file, src.srcdir, src.node_label));
        s.config_file.clear();
        s.kubeconfig = o.kubeconfig;
        if (auto n = setting(o.node_name, "--node-name", getenv, {"NODE_NAME"}); n.value) s.node_name = *n.value;
    }
    const bool uses_api = s.write_node_labels || !s.config_source.srcdir.empty();
    std::vector<std::string> unused;
    for (const auto& [value, name] : {std::pair{&o.kubeconfig, "--kubeconfig"}, {&o.kube_api_qps, "--kube-api-qps"},
                                      {&o.kube_api_burst, "--kube-api-burst"}, {&o.namespace_, "--namespace"},
                                      {&o.node_name, "--node-name"}, {&o.pod_name, "--pod-name"}})
        if (*value && !(uses_api && (value == &o.kubeconfig || value == &o.node_name || value == &o.kube_api_qps ||
                                     value == &o.kube_api_burst)))
            unused.emplace_back(name);
    if (!unused.empty())
        s.warnings.push_back(fmt::format("{} ignored: these set up GFD's NodeFeature API client; kgpu labels writes "
                                         "the feature file {}{}",
                                         fmt::join(unused, ", "), s.output_file,
                                         s.write_node_labels              ? " and patches the Node (--write-node-labels)"
                                         : s.config_source.srcdir.empty() ? " and talks to no API server"
                                                                          : " and reads only the Node's config label"));
    if (gfd->container_driver_root && *gfd->container_driver_root != o.nvml.driver_root)
        s.warnings.push_back(fmt::format("{} '{}' ignored: kgpu reads the driver at --nvidia-driver-root ('{}'), so "
                                         "mount the host's driver root at that same path in the container",
                                         gfd_source["container_driver_root"], *gfd->container_driver_root,
                                         o.nvml.driver_root));
    s.without_file = std::make_shared<const LabelsSettings>(s);
    return s;
}

}  // namespace kgpu::cli
