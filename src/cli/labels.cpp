#include "cli/labels.h"

#include "cli/device_plugin.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <set>

#include "common/duration.h"
#include "common/files.h"
#include "common/log.h"
#include "common/process.h"
#include "common/strings.h"
#include "deviceplugin/config.h"
#include "inventory/discovery.h"
#include "inventory/pci.h"
#include "inventory/vgpu.h"
#include "kube/api_stats.h"
#include "kube/node_labels.h"
#include "kube/node_watch.h"

namespace kgpu::cli {

namespace dp = kgpu::deviceplugin;

void add_labels_command(CLI::App& app, LabelsOptions& opts) {
    auto* cmd = app.add_subcommand("labels", "Write gpu-feature-discovery compatible node labels as an NFD feature file");
    add_nvml_options(*cmd, opts.nvml);
    cmd->add_option("--output-file,--output,-o", opts.output_file,
                    "The NFD feature file, replaced atomically ('-' or '': stdout) "
                    "(default /etc/kubernetes/node-feature-discovery/features.d/kgpu) [env GFD_OUTPUT_FILE]");
    cmd->add_option("--oneshot", opts.oneshot, "Label once and exit (the bare flag means true) [env GFD_ONESHOT]")
        ->expected(0, 1)
        ->default_str("true")
        ->option_text("[=BOOL]");
    cmd->add_option("--no-timestamp", opts.no_timestamp,
                    "Leave out nvidia.com/gfd.timestamp (the bare flag means true) [env GFD_NO_TIMESTAMP]")
        ->expected(0, 1)
        ->default_str("true")
        ->option_text("[=BOOL]");
    cmd->add_option("--sleep-interval", opts.sleep_interval,
                    "Time between two labelings: 60s, 1m30s, 5m, or 'infinite' to label once and wait "
                    "(default 60s) [env GFD_SLEEP_INTERVAL]");
    cmd->add_option("--machine-type-file", opts.machine_type_file,
                    "File with the DMI product name for nvidia.com/gpu.machine "
                    "(default <sysfs-root>/class/dmi/id/product_name) [env GFD_MACHINE_TYPE_FILE]");
    // GFD's settings of the device plugin's config (--mig-strategy, --fail-on-init-error,
    // --use-node-feature-api, --device-discovery-strategy, --driver-root-ctr-path): the settings table's.
    add_setting_flags(*cmd, opts.options, "gfd");
    cmd->add_option("--config-file", opts.config_file,
                    "The device plugin's config file (MIG strategy, sharing, GFD's flags) [env GFD_CONFIG_FILE, CONFIG_FILE]");
    cmd->add_option("--write-node-labels", opts.write_node_labels,
                    "Patch the labels onto this node's Node object through the API server (for clusters without "
                    "NFD); labels kgpu set earlier that no longer apply are removed, others are never touched. The "
                    "feature file is then written only when --output-file is given [env KGPU_WRITE_NODE_LABELS]")
        ->expected(0, 1)
        ->default_str("true")
        ->option_text("[=BOOL]");
    cmd->add_option("--config-file-srcdir", opts.config_file_srcdir,
                    "A directory of named config files (a ConfigMap mounted): each pass uses the one the node label "
                    "--node-label names, as the device plugin does (needs --node-name; replaces --config-file) "
                    "[env CONFIG_FILE_SRCDIR]");
    cmd->add_option("--default-config", opts.default_config,
                    "With --config-file-srcdir: the config used when the node has no label [env DEFAULT_CONFIG]");
    cmd->add_option("--node-label", opts.node_label,
                    "With --config-file-srcdir: the node label that names the config (default "
                    "nvidia.com/device-plugin.config) [env NODE_LABEL]");
    cmd->add_option("--fallback-strategies", opts.fallback_strategies,
                    "With --config-file-srcdir: named, single, empty, in order (default named,single) [env "
                    "FALLBACK_STRATEGIES]");
    cmd->add_option("--kubeconfig", opts.kubeconfig,
                    "With --write-node-labels: the kubeconfig to use (default $KUBECONFIG, else the pod's service "
                    "account); otherwise accepted for GFD compatibility and unused");
    cmd->add_option("--kube-api-status-file", opts.kube_api_status_file, kube::kStatusFileHelp);
    cmd->add_option("--kube-api-qps", opts.kube_api_qps,
                    "The API client's requests per second (default 5; with --write-node-labels or --config-file-srcdir) "
                    "[env KUBE_API_QPS]");
    cmd->add_option("--kube-api-burst", opts.kube_api_burst,
                    "The API client's burst (default 10; with --write-node-labels or --config-file-srcdir) [env "
                    "KUBE_API_BURST]");
    cmd->add_option("--namespace", opts.namespace_, "Accepted for GFD compatibility (NodeFeature objects; unused)");
    cmd->add_option("--node-name", opts.node_name,
                    "With --write-node-labels: this node's name [env NODE_NAME]; otherwise accepted for GFD "
                    "compatibility and unused");
    cmd->add_option("--pod-name", opts.pod_name, "Accepted for GFD compatibility (NodeFeature objects; unused)");
    cmd->add_option("--sysfs-root", opts.sysfs_root, "Where the host's /sys is (PCI class and config space, NUMA, DMI)")
        ->capture_default_str();
}

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
Setting setting(const std::optional<std::string>& flag, const char* flag_name,
                const std::function<const char*(const char*)>& getenv, std::initializer_list<const char*> envs) {
    if (flag) return {flag, flag_name};
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
        s.oneshot = b.oneshot;
        s.no_timestamp = b.no_timestamp;
        s.output_file = b.output_file;
        s.machine_type_file = b.machine_type_file;
        s.sleep_interval = b.sleep_interval;
    }
    auto open = [&](const char* name) { return !s.given.contains(name); };
    if (cfg.file_keys.contains("flags.failOnInitError") && open("fail_on_init_error"))
        s.fail_on_init_error = cfg.fail_on_init_error;
    if (cfg.use_node_feature_api && open("use_node_feature_api")) s.use_node_feature_api = *cfg.use_node_feature_api;
    if (!cfg.gfd) return;
    const dp::GfdFlags& g = *cfg.gfd;
    if (g.oneshot && open("oneshot")) s.oneshot = *g.oneshot;
    if (g.no_timestamp && open("no_timestamp")) s.no_timestamp = *g.no_timestamp;
    if (g.output_file && open("output_file")) s.output_file = *g.output_file;
    if (g.machine_type_file && open("machine_type_file")) s.machine_type_file = *g.machine_type_file;
    if (g.sleep_interval && open("sleep_interval")) {
        if (g.sleep_interval->count() > 0) s.sleep_interval = std::chrono::milliseconds(*g.sleep_interval);
        else log::warn("labels: {}: flags.gfd.sleepInterval 0s is ignored: expected a positive duration", cfg.config_file);
    }
}

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
        o.mig_strategy = *labels::parse_mig_strategy(dp::to_string(cfg->mig_strategy));
    }
    if (s.mig_strategy) o.mig_strategy = *s.mig_strategy;
    return o;
}

// GFD's machine type: the file's content without surrounding blanks; "unknown" when there is no
// file to read (a warning says why).
std::string machine_type(const std::string& path) {
    if (path.empty()) return "unknown";
    auto text = files::read_regular(path);
    if (!text) {
        log::warn("labels: machine type: {}; gpu.machine=unknown", text.error().message);
        return "unknown";
    }
    return std::string(strings::trim(*text));
}

// The one place the labels are written (stdout, or the file replaced atomically). A missing
// directory is created 0755 (GFD fails instead; features.d does not exist before NFD's first start,
// and a /run path not after a reboot). A file that cannot be written (the default is NFD's
// features.d, root's) says how to print them instead.
Status write_output(const std::string& path, const std::string& text) {
    if (path.empty() || path == "-") {
        std::cout << text << std::flush;
        return {};
    }
    auto st = files::create_directories(std::filesystem::path(path).parent_path(), 0755);
    if (st) st = files::write_atomic(path, text, 0644);
    if (!st)
        return fail(st.error().code, "{} (to print the labels instead, pass --output-file -{})", st.error().message,
                    ::geteuid() != 0 ? "; writing NFD's feature file needs root" : "");
    return {};
}

struct Pass {
    bool init_failed = false;  // NVML did not start
    std::vector<std::string> warnings;
};

// One labeling: NVML, discovery, labels, output. With fail_on_init_error false an NVML that does
// not start is a node without GPUs (GFD's null manager).
Status label_once(const LabelsOptions& opts, const LabelsSettings& s, const labels::Options& base,
                  std::optional<std::int64_t> timestamp, kube::Client* api, Pass& pass) {
    inventory::Node node;
    auto session = open_nvml(opts.nvml);
    if (!session) {
        pass.init_failed = true;
        if (s.fail_on_init_error) return std::unexpected(session.error());
        pass.warnings.push_back(fmt::format("NVML did not start ({}); labelling the node without device labels",
                                            session.error().message));
    } else {
        inventory::DiscoveryOptions dopts;
        dopts.sysfs_root = opts.sysfs_root;
        dopts.topology = false;
        auto found = inventory::discover(*session, dopts);
        if (!found) return std::unexpected(found.error());
        node = std::move(*found);
    }
    labels::Options lopts = base;
    lopts.timestamp = timestamp;
    // One scan of the PCI bus, whatever NVML says: GFD's vGPU labeler runs on every node (when the
    // scan fails it writes no vgpu label and logs why), and gpu.present follows the GPUs on the bus.
    auto functions = inventory::nvidia_pci_functions(opts.sysfs_root);
    if (functions) {
        lopts.pci_gpus.emplace();
        for (const auto& f : *functions)
            if (inventory::is_gpu_class(f.class_code)) lopts.pci_gpus->push_back(f.address);
        if (auto vgpu = inventory::find_vgpu_devices(*functions)) lopts.vgpu = std::move(*vgpu);
        else pass.warnings.push_back(fmt::format("vGPU scan: {}; no nvidia.com/vgpu labels", vgpu.error().message));
    } else {
        pass.warnings.push_back(fmt::format("PCI scan: {}; no nvidia.com/vgpu labels, and nvidia.com/gpu.present from NVML only",
                                            functions.error().message));
    }
    if (!node.gpus.empty()) lopts.machine = machine_type(s.machine_type_file);
    auto generated = labels::generate(node, lopts);
    if (!generated) return std::unexpected(generated.error());
    pass.warnings.insert(pass.warnings.end(), generated->warnings.begin(), generated->warnings.end());
    if (s.feature_file) {
        if (auto st = write_output(s.output_file, labels::to_feature_file(generated->labels)); !st) return st;
        if (!s.output_file.empty() && s.output_file != "-")
            log::info("labels: wrote {} labels to {}", generated->labels.size(), s.output_file);
    }
    if (api) {
        auto changed = kube::write_node_labels(*api, s.node_name, generated->labels);
        if (!changed) return fail(changed.error().code, "node {}: {}", s.node_name, changed.error().message);
        log::info("labels: node {}: {} labels, {} set or removed", s.node_name, generated->labels.size(), *changed);
    }
    return {};
}

// Waits up to `timeout` (forever when nullopt) for one of the blocked signals in `mask`.
// Returns the signal, or 0 when the time passed.
int wait_signal(const sigset_t& mask, std::optional<std::chrono::milliseconds> timeout) {
    using clock = std::chrono::steady_clock;
    const auto deadline = timeout ? clock::now() + *timeout : clock::time_point::max();
    for (;;) {
        int sig = -1;
        if (!timeout) {
            sig = sigwaitinfo(&mask, nullptr);
        } else {
            const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - clock::now());
            if (left.count() <= 0) return 0;
            timespec ts{static_cast<time_t>(left.count() / 1'000'000'000), static_cast<long>(left.count() % 1'000'000'000)};
            sig = sigtimedwait(&mask, nullptr, &ts);
            if (sig < 0 && errno == EAGAIN) return 0;
        }
        if (sig > 0) return sig;
        // EINTR: a signal outside the mask; wait for the rest of the time.
    }
}

std::string describe_interval(std::optional<std::chrono::milliseconds> i) {
    if (!i) return "infinite";
    if (i->count() % 1000 == 0) return format_duration(std::chrono::duration_cast<std::chrono::seconds>(*i));
    return fmt::format("{}ms", i->count());
}

}  // namespace

Result<LabelsSettings> resolve_labels_settings(const LabelsOptions& o,
                                               const std::function<const char*(const char*)>& getenv) {
    LabelsSettings s;
    // A flag or variable given: the config file's value for it does not apply (apply_file_flags).
    auto given = [&](const char* name, const Setting& v) {
        if (v.value) s.given.insert(name);
        return v;
    };
    if (auto v = given("output_file", setting(o.output_file, "--output-file", getenv, {"GFD_OUTPUT_FILE"})); v.value)
        s.output_file = *v.value;
    if (auto st = set_bool(s.oneshot, given("oneshot", setting(o.oneshot, "--oneshot", getenv, {"GFD_ONESHOT"}))); !st)
        return std::unexpected(st.error());
    if (auto st = set_bool(s.no_timestamp, given("no_timestamp", setting(o.no_timestamp, "--no-timestamp", getenv, {"GFD_NO_TIMESTAMP"}))); !st)
        return std::unexpected(st.error());
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
    if (auto v = given("sleep_interval", setting(o.sleep_interval, "--sleep-interval", getenv, {"GFD_SLEEP_INTERVAL"})); v.value) {
        auto i = parse_interval(*v.value);
        if (!i) return fail(Code::invalid_argument, "{}: {}", v.source, i.error().message);
        s.sleep_interval = *i;
    }
    s.machine_type_file = (std::filesystem::path(o.sysfs_root) / "class/dmi/id/product_name").string();
    if (auto v = given("machine_type_file", setting(o.machine_type_file, "--machine-type-file", getenv, {"GFD_MACHINE_TYPE_FILE"})); v.value)
        s.machine_type_file = *v.value;
    if (gfd->mig_strategy) s.mig_strategy = *labels::parse_mig_strategy(dp::to_string(*gfd->mig_strategy));
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
        const char* env_output = getenv("GFD_OUTPUT_FILE");
        if (!o.output_file && !(env_output && *env_output)) s.feature_file = false;
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

namespace {

// With a config source: the config the node label names now (read through `api` when there is
// one), and the label options reloaded when it is another file than `s.config_file`. A failure
// keeps the running options (logged once per message).
void follow_config_label(LabelsSettings& s, kube::Client* api, labels::Options& options, std::set<std::string>& said,
                         bool& chosen) {
    const auto& src = s.config_source;
    std::string label;
    // One config (the manifests' config.yaml alone): no label can pick another, so the API
    // server is not asked (one GET per node per pass adds up on a large cluster).
    auto names = deviceplugin::config_names(src.srcdir);
    if (api && names && names->size() > 1) {
        if (auto value = kube::read_node_label(*api, s.node_name, src.node_label)) {
            label = *value;
        } else {
            const std::string why = value.error().message;
            if (said.insert(why).second)
                log::warn("labels: cannot read node {}'s label {}: {}; {}", s.node_name, src.node_label, why,
                          chosen ? "keeping the running config" : "choosing without it");
            if (chosen) return;
        }
    }
    Result<deviceplugin::ConfigChoice> choice = std::unexpected(Error{});
    if (names) choice = deviceplugin::choose_config(src, *names, label);
    else choice = std::unexpected(names.error());
    if (!choice) {
        if (said.insert(choice.error().message).second) log::error("labels: {}; keeping the running config", choice.error().message);
        return;
    }
    for (const auto& w : choice->warnings)
        if (said.insert(w).second) log::warn("labels: {}", w);
    if (chosen && choice->path == s.config_file) return;
    LabelsSettings next = s;
    next.config_file = choice->path;
    auto loaded = load_label_options(next);
    if (!loaded) {
        if (said.insert(loaded.error().message).second) log::error("labels: {}; keeping the running config", loaded.error().message);
        return;
    }
    log::info("labels: config '{}' ({})", choice->name, choice->why);
    chosen = true;
    s = std::move(next);  // the chosen file, and its GFD flags
    options = std::move(*loaded);
}

}  // namespace

int run_labels(const LabelsOptions& opts) {
    auto settings = resolve_labels_settings(opts, [](const char* n) { return std::getenv(n); });
    if (!settings) {
        std::cerr << "kgpu labels: " << settings.error().message << "\n";
        return 2;
    }
    LabelsSettings& s = *settings;
    auto options = load_label_options(s);
    if (!options) {
        std::cerr << "kgpu labels: " << options.error().message << "\n";
        return 2;
    }
    for (const auto& w : s.warnings) log::warn("labels: {}", w);
    if (s.use_node_feature_api)
        log::warn("labels: --use-node-feature-api: kgpu writes the NFD feature file {}; NFD's worker publishes it",
                  s.output_file);
    // With --oneshot only the flag counts, not the container's variable: a one-off
    // `kubectl exec ... kgpu labels --oneshot` must not replace the running labels' counts.
    if (!s.oneshot || opts.kube_api_status_file) kube::publish_status_file(opts.kube_api_status_file, "labels");
    // The API server's configuration is read once (an in-cluster token is re-read by each request).
    std::optional<kube::Client> api;
    if (s.write_node_labels) {
        auto config = kube::resolve_config(s.kubeconfig, [](const char* n) { return std::getenv(n); });
        if (!config) {
            std::cerr << "kgpu labels: --write-node-labels: " << config.error().message << "\n";
            return 2;
        }
        log::info("labels: patching node {}'s labels through {} ({})", s.node_name, config->server, config->source);
        api.emplace(std::move(*config), std::chrono::seconds(10), s.kube_limit);
    } else if (!s.config_source.srcdir.empty()) {
        auto config = s.node_name.empty() ? Result<kube::ApiConfig>(fail(Code::not_found, "no node name (NODE_NAME or --node-name)"))
                                          : kube::resolve_config(s.kubeconfig, [](const char* n) { return std::getenv(n); });
        if (config) {
            log::info("labels: reading node {}'s label {} through {} ({})", s.node_name, s.config_source.node_label,
                      config->server, config->source);
            api.emplace(std::move(*config), std::chrono::seconds(10), s.kube_limit);
        } else {
            log::warn("labels: the node label {} is not read: {}; the default config and fallbacks decide",
                      s.config_source.node_label, config.error().message);
        }
    }
    std::set<std::string> said;
    bool chosen = false;
    if (!s.config_source.srcdir.empty()) {
        follow_config_label(s, api ? &*api : nullptr, *options, said, chosen);
        if (!chosen) {
            std::cerr << "kgpu labels: no config could be chosen from " << s.config_source.srcdir << "\n";
            return 2;
        }
    }

    // In the loop SIGHUP reloads the config file and SIGTERM, SIGINT and SIGQUIT stop, as in GFD.
    // They are blocked before NVML starts any thread, so only sigtimedwait sees them.
    const sigset_t mask = s.oneshot ? process::signal_set({SIGHUP, SIGINT, SIGTERM, SIGQUIT})
                                    : process::block_signals({SIGHUP, SIGINT, SIGTERM, SIGQUIT});

    bool first = true;
    std::vector<std::string> last_warnings;
    for (;;) {
        // The timestamp is taken once per configuration (GFD's): the file's content only changes
        // when the node does.
        std::optional<std::int64_t> timestamp;
        if (!s.no_timestamp) timestamp = static_cast<std::int64_t>(std::time(nullptr));
        for (;;) {
            // Each pass labels with the config the node label names now (the plugin follows it live).
            if (!first && !s.config_source.srcdir.empty())
                follow_config_label(s, api ? &*api : nullptr, *options, said, chosen);
            Pass pass;
            auto st = label_once(opts, s, *options, timestamp, s.write_node_labels && api ? &*api : nullptr, pass);
            if (pass.warnings != last_warnings)
                for (const auto& w : pass.warnings) log::warn("labels: {}", w);
            last_warnings = pass.warnings;
            if (!st) {
                if (s.oneshot || (first && pass.init_failed)) {
                    std::cerr << "kgpu labels: " << st.error().message << "\n";
                    return 1;
                }
                log::error("labels: {} (the previous labels stay; retrying in {})", st.error().message,
                           describe_interval(s.sleep_interval));
            }
            first = false;
            if (s.oneshot) return 0;
            const int sig = wait_signal(mask, s.sleep_interval);
            if (sig == 0) continue;
            if (sig == SIGHUP) {
                log::info("labels: SIGHUP: reloading {}", s.config_file.empty() ? "the settings" : s.config_file);
                auto reloaded = load_label_options(s);
                if (reloaded) options = std::move(reloaded);
                else log::error("labels: SIGHUP: keeping the running configuration: {}", reloaded.error().message);
                break;
            }
            log::info("labels: {}: stopping", strsignal(sig));
            // GFD removes its file when it stops (not with an infinite interval), so NFD drops the
            // labels of a node nobody labels any more.
            if (s.sleep_interval && s.feature_file && !s.output_file.empty() && s.output_file != "-") {
                std::error_code ec;
                std::filesystem::remove(s.output_file, ec);
                if (ec) log::warn("labels: removing {}: {}", s.output_file, ec.message());
            }
            return 0;
        }
    }
}

}  // namespace kgpu::cli
