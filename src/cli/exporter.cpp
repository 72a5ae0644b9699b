#include "cli/exporter.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <ranges>

#include <fmt/ranges.h>

#include "common/files.h"
#include "common/log.h"
#include "exporter/counters.h"

#include "exporter/catalogue.h"
#include "exporter/exporter.h"

namespace kgpu::cli {

namespace {

using exporter::ExporterOptions;

// The numeric flags: a whole number from 1 to `max`, in the unit the typed option's getter and
// setter convert (dcgm-exporter's --collect-interval is milliseconds, the HTTP timeouts seconds).
struct NumberFlag {
    const char* names;
    const char* env;  // nullptr: none
    const char* help;
    long max;
    const char* what;  // "expected <what> between 1 and <max>"
    long (*get)(const ExporterOptions&);
    void (*set)(ExporterOptions&, long);
};

constexpr NumberFlag kNumberFlags[] = {
    {"-c,--collect-interval", "DCGM_EXPORTER_INTERVAL", "Collection interval in milliseconds", 24L * 3600 * 1000,
     "a number of milliseconds", [](const ExporterOptions& o) -> long { return o.collector.interval.count(); },
     [](ExporterOptions& o, long v) { o.collector.interval = std::chrono::milliseconds(v); }},
    {"--http-idle-timeout", nullptr, "Seconds before an idle HTTP connection is closed", 3600, "a number of seconds",
     [](const ExporterOptions& o) -> long {
         return std::chrono::duration_cast<std::chrono::seconds>(o.http.idle_timeout).count();
     },
     [](ExporterOptions& o, long v) { o.http.idle_timeout = std::chrono::seconds(v); }},
    {"--http-request-timeout", nullptr,
     "Seconds a client has to send a whole request head (from its first byte), and to take the answer", 3600,
     "a number of seconds",
     [](const ExporterOptions& o) -> long {
         return std::chrono::duration_cast<std::chrono::seconds>(o.http.request_timeout).count();
     },
     [](ExporterOptions& o, long v) { o.http.request_timeout = std::chrono::seconds(v); }},
    {"--http-max-connections", nullptr,
     "Open HTTP connections; at the limit the oldest idle or slowest one makes room for a new one", 1000000, "a number",
     [](const ExporterOptions& o) -> long { return o.http.connection_limit; },
     [](ExporterOptions& o, long v) { o.http.connection_limit = static_cast<unsigned>(v); }},
    {"--http-max-connections-per-client", nullptr,
     "Open HTTP connections per client address (IPv6: per /64); beyond it the client's own oldest closes", 1000000,
     "a number", [](const ExporterOptions& o) -> long { return o.http.peer_connection_limit; },
     [](ExporterOptions& o, long v) { o.http.peer_connection_limit = static_cast<unsigned>(v); }},
    {"--max-pods-per-gpu", "KGPU_EXPORTER_MAX_PODS_PER_GPU",
     "With --kubernetes: containers that get series per GPU; more are counted in kgpu_exporter_pods_over_limit",
     100000, "a number", [](const ExporterOptions& o) -> long { return o.collector.pod_resources.max_pods_per_gpu; },
     [](ExporterOptions& o, long v) { o.collector.pod_resources.max_pods_per_gpu = static_cast<unsigned>(v); }},
};

// "--collect-interval" of "-c,--collect-interval".
std::string_view long_name(std::string_view names) {
    const auto at = names.find("--");
    return names.substr(at, names.find(',', at) - at);
}

// dcgm-exporter's flags kgpu ignores (KGPU_EXPORTER_IGNORED_FLAGS): text options show their
// default in the help, switches do not.
std::string ignored_help(const char* help) { return std::string("dcgm-exporter's; ignored with a warning: ") + help; }
void add_ignored_flag(CLI::App& cmd, const char* names, const char* env, const char* help, std::string& value) {
    cmd.add_option(names, value, ignored_help(help))->envname(env)->capture_default_str();
}
void add_ignored_flag(CLI::App& cmd, const char* names, const char* env, const char* help, bool& value) {
    cmd.add_flag(names, value, ignored_help(help))->envname(env);
}
void add_ignored_flags(CLI::App& cmd, ExporterFlags& f) {
#define KGPU_EXPORTER_ADD(member, type, default_value, names, env, help, ...) \
    add_ignored_flag(cmd, names, env, help, f.member);
    KGPU_EXPORTER_IGNORED_FLAGS(KGPU_EXPORTER_ADD)
#undef KGPU_EXPORTER_ADD
}

// The flags that name a GPU's pod (dcgm-exporter's --kubernetes family, with its env vars).
void add_kubernetes_flags(CLI::App& cmd, ExporterFlags& f) {
    exporter::CollectorOptions& c = f.options.collector;
    cmd.add_flag("-k,--kubernetes", c.kubernetes, "Add pod, namespace and container labels (PodResources + CRI)")
        ->envname("DCGM_EXPORTER_KUBERNETES");
    cmd.add_option("--pod-resources-kubelet-socket", c.pod_resources.socket, "The kubelet's PodResources socket")
        ->envname("DCGM_POD_RESOURCES_KUBELET_SOCKET")
        ->capture_default_str();
    cmd.add_option("--container-runtime-endpoint", c.cri_endpoint,
                   "CRI socket that names the pod of a container ID")
        ->envname("CONTAINER_RUNTIME_ENDPOINT")
        ->capture_default_str();
    cmd.add_option("--resource-name,--nvidia-resource-names", c.pod_resources.extra_resources,
                   "Extra resource names whose devices are GPUs (repeat or comma list), e.g. nvidia.com/a100")
        ->envname("NVIDIA_RESOURCE_NAMES")
        ->delimiter(',');
    cmd.add_option("--kubernetes-gpu-id-type", f.kubernetes_gpu_id_type,
                   "Accepted for dcgm-exporter compatibility (uid or device-name); kgpu resolves both")
        ->envname("DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE");
    cmd.add_flag("--kubernetes-virtual-gpus", c.kubernetes_virtual_gpus,
                 "With --kubernetes: a shared GPU gets one series per pod (with vgpu), and per-pod GPU_UTIL and "
                 "FB_USED from its processes")
        ->envname("KUBERNETES_VIRTUAL_GPUS");
    cmd.add_flag("--kubernetes-enable-pod-uid", c.kubernetes_pod_uid,
                 "With --kubernetes: add the pod_uid label (from the CRI runtime)")
        ->envname("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID");
    cmd.add_flag("--kubernetes-enable-pod-labels", c.kubernetes_pod_labels,
                 "With --kubernetes: add the pod's labels (from the CRI runtime's pod sandbox)")
        ->envname("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS");
    cmd.add_option("--kubernetes-pod-label-allowlist-regex", c.pod_label_allowlist,
                   "With --kubernetes-enable-pod-labels: only pod labels whose name one of these regexes (RE2, "
                   "unanchored; repeat or comma list) matches; none: every label")
        ->envname("DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX")
        ->delimiter(',');
}

// The numeric flags, from their table (text checked by run_exporter; defaults from exporter/).
void add_number_flags(CLI::App& cmd, ExporterFlags& f) {
    const exporter::ExporterOptions defaults;
    f.numbers.resize(std::size(kNumberFlags));
    for (size_t i = 0; i < std::size(kNumberFlags); ++i) {
        const NumberFlag& n = kNumberFlags[i];
        f.numbers[i] = std::to_string(n.get(defaults));
        auto* opt = cmd.add_option(n.names, f.numbers[i], n.help)->capture_default_str();
        if (n.env) opt->envname(n.env);
    }
}

}  // namespace

CLI::App* add_exporter_command(CLI::App& app, ExporterFlags& f) {
    auto* cmd = app.add_subcommand("exporter", "Serve GPU metrics for Prometheus (dcgm-exporter names, pod labels)");
    exporter::CollectorOptions& c = f.options.collector;
    cmd->add_option("-a,--address", f.options.http.address, "Listen address: host:port, :port or [ipv6]:port; port 0 picks one")
        ->envname("DCGM_EXPORTER_LISTEN")
        ->capture_default_str();
    cmd->add_flag("-n,--no-hostname", f.no_hostname, "Leave the Hostname label out")->envname("DCGM_EXPORTER_NO_HOSTNAME");
    cmd->add_option("--hostname-label", c.hostname_label,
                    "Name of the host label: Hostname (dcgm-exporter 3.x) or hostname (newer)")
        ->envname("KGPU_EXPORTER_HOSTNAME_LABEL")
        ->capture_default_str();
    cmd->add_option("--proc-root", c.proc_root, "Where the host's /proc is (for GPU processes' cgroups)")
        ->envname("KGPU_PROC_ROOT")
        ->capture_default_str();
    cmd->add_option("--mps-root", c.mps_root,
                    "Where kgpu mps-control-daemon keeps the MPS daemons' status (kgpu_mps_* metrics; \"\": none)")
        ->envname("MPS_ROOT")
        ->capture_default_str();
    cmd->add_option("--kube-api-status-dir", c.kube_api_status_dir,
                    "Where kgpu device-plugin, labels and config-manager keep their Kubernetes API counts "
                    "(--kube-api-status-file; kgpu_kube_api_*, kgpu_node_events_total; \"\": none)")
        ->envname("KGPU_KUBE_API_STATUS_DIR")
        ->capture_default_str();
    cmd->add_option("-f,--collectors", f.collectors,
                    "dcgm-exporter's counters CSV (field, type, help per line): serve only the DCGM fields it lists")
        ->envname("DCGM_EXPORTER_COLLECTORS");
    cmd->add_option("-m,--configmap-data", f.configmap_data,
                    "dcgm-exporter's NAMESPACE:NAME of a ConfigMap with the counters: not read by kgpu (mount the "
                    "ConfigMap and use -f); 'none' for none")
        ->envname("DCGM_EXPORTER_CONFIGMAP_DATA")
        ->capture_default_str();
    cmd->add_flag("--replace-blanks-in-model-name,--rbmn", c.replace_blanks_in_model_name,
                  "Replace the blanks in the modelName label with '-' (NVIDIA-H100-80GB-HBM3)")
        ->envname("DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME");
    cmd->add_option("--web-config-file", f.options.http.web_config_file,
                    "TLS and basic auth: a web config file in Prometheus exporter-toolkit format (as dcgm-exporter)")
        ->envname("DCGM_EXPORTER_WEB_CONFIG_FILE");
    cmd->add_option("--ready-file", f.options.ready_file,
                    "kgpu's own: once serving, write the address bound (host:port, the port picked for port 0) "
                    "to this file; removed on exit")
        ->envname("KGPU_EXPORTER_READY_FILE");
    // dcgm-exporter's other flags (pkg/cmd/app.go of 4.5.3-4.8.2), with its aliases and env vars.
    cmd->add_option("-d,--devices", f.devices,
                    "GPUs to serve: f (all), g (all), g:0,2-3 (these GPU indices) or i (all); MIG GPUs keep "
                    "their instances' series")
        ->envname("DCGM_EXPORTER_DEVICES_STR")
        ->capture_default_str();
    cmd->add_flag("--debug", f.debug, "Log at debug level (as --log-level debug)")->envname("DCGM_EXPORTER_DEBUG");
    cmd->add_option("--log-format", f.log_format, "Log lines as text or json (one JSON object a line: time, level, msg)")
        ->envname("DCGM_EXPORTER_LOG_FORMAT")
        ->capture_default_str();
    cmd->add_flag("-o,--use-old-namespace", f.use_old_namespace,
                  "Name the DCGM series' UUID label `uuid`, as dcgm-exporter's 1.x namespace did")
        ->envname("DCGM_EXPORTER_USE_OLD_NAMESPACE");
    add_kubernetes_flags(*cmd, f);
    add_number_flags(*cmd, f);
    add_ignored_flags(*cmd, f);
    cmd->add_flag("--print-metrics-markdown", f.print_metrics_markdown, "Print docs/metrics.md and exit")
        ->group("");
    cmd->add_flag("--print-default-counters", f.print_default_counters,
                  "Print dcgm-exporter's default counters as a counters CSV (what -f "
                  "/etc/dcgm-exporter/default-counters.csv serves where that file is missing) and exit");
    add_nvml_options(*cmd, f.nvml);
    return cmd;
}

namespace {

bool parse_positive(std::string_view text, long max, long& out) {
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return !text.empty() && ec == std::errc() && p == text.data() + text.size() && out > 0 && out <= max;
}

int usage(std::string_view flag, std::string_view message) {
    std::cerr << "kgpu exporter: " << flag << ": " << message << "\n";
    return 2;
}

// A whole decimal number (dcgm-exporter's int flags): "-5" and "300000", not "5m" or "1e3".
bool parse_int(std::string_view text, long& out) {
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return !text.empty() && ec == std::errc() && p == text.data() + text.size();
}

// dcgm-exporter's device selection (its parseDeviceOptions): f, or g / i with an optional list of
// indices and inclusive ranges ("g:0,2-4"). nullopt ids: every device of the kind.
struct DeviceSelection {
    char kind = 'f';
    std::optional<std::vector<unsigned>> ids;
};
Result<DeviceSelection> parse_devices(std::string_view text) {
    DeviceSelection sel;
    const auto colon = text.find(':');
    const std::string_view letter = text.substr(0, colon);
    if (letter != "f" && letter != "g" && letter != "i")
        return fail(Code::invalid_argument, "expected f, g[:ids] or i[:ids] (ids like 0,2-4), got '{}'", text);
    sel.kind = letter[0];
    if (colon == std::string_view::npos) return sel;
    if (sel.kind == 'f') return fail(Code::invalid_argument, "no ids can follow f, got '{}'", text);
    const std::string_view list = text.substr(colon + 1);
    if (list.find(':') != std::string_view::npos)
        return fail(Code::invalid_argument, "only one ':<ids>' is allowed, got '{}'", text);
    auto number = [](std::string_view t, unsigned& out) {
        auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
        return !t.empty() && ec == std::errc() && p == t.data() + t.size() && out < 4096;
    };
    sel.ids.emplace();
    for (const auto part : std::views::split(list, ',')) {
        const std::string_view item(part.begin(), part.end());
        const auto dash = item.find('-');
        unsigned first = 0, last = 0;
        if (dash == std::string_view::npos ? !number(item, first) || !number(item, last = first)
                                           : !number(item.substr(0, dash), first) || !number(item.substr(dash + 1), last))
            return fail(Code::invalid_argument, "expected an index (0) or a range (2-4) in '{}', got '{}'", text, item);
        for (unsigned i = first; i <= last; ++i) sel.ids->push_back(i);
    }
    return sel;
}

std::string host_name() {
    if (const char* n = std::getenv("NODE_NAME"); n && *n) return n;  // the DaemonSet's downward API
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0) return "";
    return buf;
}

// The --collectors file as a selection; warns once about fields kgpu does not serve. dcgm-exporter's
// own default path, where it does not exist (outside dcgm-exporter's image), serves kgpu's copy of
// dcgm-exporter's default counters.
Result<exporter::CounterSelection> read_collectors(const std::string& path) {
    std::error_code ec;
    if (path == exporter::kDcgmExporterDefaultCountersPath && !std::filesystem::exists(path, ec) && !ec) {
        log::warn("exporter: {} does not exist (a file of dcgm-exporter's image): serving kgpu's built-in copy of "
                  "dcgm-exporter's default counters (`kgpu exporter --print-default-counters` prints them)",
                  path);
        auto lines = exporter::parse_counters_csv(exporter::default_counters_csv(), "(built-in default counters)");
        if (!lines) return std::unexpected(lines.error());  // a test keeps it parseable
        return exporter::select_counters(*lines);
    }
    const auto st = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(st))
        return fail(Code::not_found, "cannot read {}: {}", path, ec ? ec.message() : "no such file");
    if (!std::filesystem::is_regular_file(st)) return fail(Code::invalid_argument, "{} is not a regular file", path);
    if (std::filesystem::file_size(path, ec) > 1024 * 1024)
        return fail(Code::invalid_argument, "{} is larger than 1 MiB: not a counters CSV", path);
    auto text = files::read(path);
    if (!text) return std::unexpected(text.error());
    auto lines = exporter::parse_counters_csv(*text, path);
    if (!lines) return std::unexpected(lines.error());
    auto sel = exporter::select_counters(*lines);
    if (!sel.unknown.empty())
        log::warn("exporter: {} lists {} field(s) kgpu does not serve, left out: {}", path, sel.unknown.size(),
                  fmt::join(sel.unknown, ", "));
    if (!sel.retyped.empty())
        log::warn("exporter: {}: {} listed as histogram or summary; a single value is served with its own type "
                  "(gauge or counter)",
                  path, fmt::join(sel.retyped, ", "));
    const auto served = std::ranges::count_if(exporter::catalogue(), [&](const exporter::MetricDef& m) {
        return m.name.starts_with("DCGM_") && sel.enabled(m.id);
    });
    log::info("exporter: serving {} DCGM field(s) from {}", served, path);
    return sel;
}

// --devices and DCGM's numeric and level flags, checked; `opts` gets the GPU selection.
std::optional<int> apply_device_flags(const ExporterFlags& f, exporter::ExporterOptions& opts) {
    auto devices = parse_devices(f.devices);
    if (!devices) return usage("--devices", devices.error().message);
    if (devices->kind == 'i' && devices->ids)
        return usage("--devices", fmt::format("'{}': kgpu cannot select MIG instances by DCGM's GPU instance entity ids; "
                                              "use f, g, g:<GPU indices> or i",
                                              f.devices));
    if (devices->kind == 'g' && devices->ids) opts.collector.gpu_indices = devices->ids;
    if (f.devices != "f" && !devices->ids)
        log::info("exporter: --devices {}: serving every GPU and, on MIG GPUs, their instances too (as f)", f.devices);
    for (const auto& [flag, value] : {std::pair{"--cpu-devices", &f.cpu_devices}, {"--switch-devices", &f.switch_devices}})
        if (auto d = parse_devices(*value); !d) return usage(flag, d.error().message);
    long number = 0;
    for (const auto& [flag, value] : {std::pair{"--xid-count-window-size", &f.xid_count_window_size},
                                      {"--clock-events-count-window-size", &f.clock_events_count_window_size},
                                      {"--dump-retention", &f.dump_retention}})
        if (!parse_int(*value, number))
            return usage(flag, fmt::format("expected a whole number, got '{}'", *value));
    static constexpr std::string_view dcgm_levels[] = {"NONE", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "VERB"};
    if (std::ranges::find(dcgm_levels, f.dcgm_log_level) == std::end(dcgm_levels))
        return usage("--dcgm-log-level",
                     fmt::format("expected NONE, FATAL, ERROR, WARN, INFO, DEBUG or VERB, got '{}'", f.dcgm_log_level));
    return std::nullopt;
}

// One row of KGPU_EXPORTER_IGNORED_FLAGS as its warning sees it.
struct IgnoredFlag {
    std::string_view warning;
    bool changed;  // not at dcgm-exporter's default
    std::string_view value;
    bool shows;
    std::string_view why;
};
std::string_view shown_value(const std::string& value) { return value; }
std::string_view shown_value(bool) { return {}; }

// dcgm-exporter's flags for DCGM itself or for what kgpu does not serve: one warning each (each
// group of rows naming the same flag: one) when not at dcgm-exporter's default (a default value
// changes nothing there either).
void warn_ignored_flags(const ExporterFlags& f) {
    const ExporterFlags defaults;
    const IgnoredFlag rows[] = {
#define KGPU_EXPORTER_ROW(member, type, default_value, names, env, help, warning, shows, why) \
    {warning, f.member != defaults.member, shown_value(f.member), shows, why},
        KGPU_EXPORTER_IGNORED_FLAGS(KGPU_EXPORTER_ROW)
#undef KGPU_EXPORTER_ROW
    };
    for (size_t first = 0, end = 0; first < std::size(rows); first = end) {
        bool changed = false;
        std::string_view value;
        for (end = first; end < std::size(rows) && rows[end].warning == rows[first].warning; ++end) {
            changed = changed || rows[end].changed;
            if (rows[end].shows && value.empty()) value = rows[end].value;
        }
        if (changed)
            log::warn("exporter: {}{}{}: ignored: {}", rows[first].warning, value.empty() ? "" : " ", value,
                      rows[first].why);
    }
}

// Listening: the address, the numbers of kNumberFlags, the ready file, the web config.
std::optional<int> apply_server_flags(const ExporterFlags& f, exporter::ExporterOptions& opts) {
    if (auto a = exporter::parse_listen_address(opts.http.address); !a) return usage("--address", a.error().message);
    for (size_t i = 0; i < std::size(kNumberFlags); ++i) {
        const NumberFlag& n = kNumberFlags[i];
        const std::string& text = i < f.numbers.size() ? f.numbers[i] : std::string();
        long value = 0;
        if (!parse_positive(text, n.max, value))
            return usage(long_name(n.names), fmt::format("expected {} between 1 and {}, got '{}'", n.what, n.max, text));
        n.set(opts, value);
    }
    if (!opts.ready_file.empty()) {
        const std::filesystem::path dir = std::filesystem::path(opts.ready_file).parent_path();
        std::error_code ec;
        if (opts.ready_file.ends_with('/') || !std::filesystem::is_directory(dir.empty() ? "." : dir, ec))
            return usage("--ready-file", fmt::format("expected a file in an existing directory, got '{}'", opts.ready_file));
    }
    if (!opts.http.web_config_file.empty()) {
        if (auto s = exporter::check_web_config(opts.http.web_config_file); !s)
            return usage("--web-config-file", s.error().message);
    }

    return std::nullopt;
}

// Whose GPU it is: the hostname label, Kubernetes attribution and its endpoints.
std::optional<int> apply_attribution_flags(const ExporterFlags& f, exporter::ExporterOptions& opts) {
    const exporter::CollectorOptions& c = f.options.collector;
    if (c.hostname_label != "Hostname" && c.hostname_label != "hostname")
        return usage("--hostname-label", fmt::format("expected Hostname or hostname, got '{}'", c.hostname_label));
    if (!f.no_hostname) opts.collector.hostname = host_name();

    if (!f.kubernetes_gpu_id_type.empty() && f.kubernetes_gpu_id_type != "uid" &&
        f.kubernetes_gpu_id_type != "device-name")
        return usage("--kubernetes-gpu-id-type",
                     fmt::format("expected uid or device-name, got '{}'", f.kubernetes_gpu_id_type));
    if (c.pod_resources.socket.empty()) return usage("--pod-resources-kubelet-socket", "expected a socket path");
    if (c.proc_root.empty()) return usage("--proc-root", "expected a directory");
    if (c.cri_endpoint.empty()) return usage("--container-runtime-endpoint", "expected a socket");
    for (const auto& r : c.pod_resources.extra_resources)
        if (r.find('/') == std::string::npos)
            return usage("--resource-name", fmt::format("expected a resource name like nvidia.com/a100, got '{}'", r));

    return std::nullopt;
}

// Which counters: -f (--collectors), and dcgm-exporter's -m (--configmap-data).
std::optional<int> apply_counter_flags(const ExporterFlags& f, exporter::ExporterOptions& opts) {
    const exporter::CollectorOptions& c = f.options.collector;
    // dcgm-exporter's -m reads the counters from a ConfigMap through the API server (with the
    // pod's service account) and falls back to -f only when it is "none". kgpu reads files only
    // (docs/migration.md says why): the same ConfigMap mounted as a file does the same.
    if (f.configmap_data != "none") {
        const auto colon = f.configmap_data.find(':');
        if (colon == std::string::npos || colon == 0 || colon + 1 == f.configmap_data.size() ||
            f.configmap_data.find(':', colon + 1) != std::string::npos)
            return usage("--configmap-data",
                         fmt::format("expected NAMESPACE:NAME (or none), got '{}'", f.configmap_data));
        log::warn("exporter: --configmap-data {}: kgpu does not read ConfigMaps through the Kubernetes API; mount the "
                  "ConfigMap's `metrics` key as a file and pass it with -f (dcgm-exporter's Helm chart mounts "
                  "exporter-metrics-config-map at {}); serving {} instead",
                  f.configmap_data, exporter::kDcgmExporterDefaultCountersPath,
                  f.collectors.empty() ? std::string("every metric (no -f)") : "the counters of " + f.collectors);
    }
    if (!f.collectors.empty()) {
        auto sel = read_collectors(f.collectors);
        if (!sel) return usage("--collectors", sel.error().message);
        opts.collector.counters = std::move(*sel);
    }
    if (!c.pod_label_allowlist.empty() && !c.kubernetes_pod_labels)
        log::warn("exporter: --kubernetes-pod-label-allowlist-regex has no effect without --kubernetes-enable-pod-labels");
    if (!c.kubernetes && (c.kubernetes_virtual_gpus || c.kubernetes_pod_uid || c.kubernetes_pod_labels))
        log::warn("exporter: --kubernetes-virtual-gpus, --kubernetes-enable-pod-uid and --kubernetes-enable-pod-labels "
                  "have no effect without --kubernetes");
    if (f.use_old_namespace) opts.collector.uuid_label = "uuid";
    return std::nullopt;
}

}  // namespace

int run_exporter(const ExporterFlags& f) {
    if (f.print_metrics_markdown) {
        std::cout << exporter::metrics_markdown();
        return 0;
    }
    if (f.print_default_counters) {
        std::cout << exporter::default_counters_csv();
        return 0;
    }
    if (f.log_format != "text" && f.log_format != "json")
        return usage("--log-format", fmt::format("expected text or json, got '{}'", f.log_format));
    log::set_format(f.log_format == "json" ? log::Format::json : log::Format::text);
    if (f.debug) log::set_level(log::Level::debug);
    log::debug("exporter: debug output is enabled");

    exporter::ExporterOptions opts = f.options;
    if (auto code = apply_device_flags(f, opts)) return *code;
    warn_ignored_flags(f);
    if (auto code = apply_server_flags(f, opts)) return *code;
    if (auto code = apply_attribution_flags(f, opts)) return *code;
    if (auto code = apply_counter_flags(f, opts)) return *code;
    return exporter::run_exporter(opts, [&] { return open_nvml(f.nvml); });
}

}  // namespace kgpu::cli
