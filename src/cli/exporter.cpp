#include "cli/exporter.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <fmt/ranges.h>

#include "common/files.h"
#include "common/log.h"
#include "exporter/counters.h"

#include "exporter/catalogue.h"
#include "exporter/exporter.h"

namespace kgpu::cli {

CLI::App* add_exporter_command(CLI::App& app, ExporterFlags& f) {
    auto* cmd = app.add_subcommand("exporter", "Serve GPU metrics for Prometheus (dcgm-exporter names, pod labels)");
    cmd->add_option("-a,--address", f.address, "Listen address: host:port, :port or [ipv6]:port; port 0 picks one")
        ->envname("DCGM_EXPORTER_LISTEN")
        ->capture_default_str();
    cmd->add_option("-c,--collect-interval", f.collect_interval, "Collection interval in milliseconds")
        ->envname("DCGM_EXPORTER_INTERVAL")
        ->capture_default_str();
    cmd->add_flag("-k,--kubernetes", f.kubernetes, "Add pod, namespace and container labels (PodResources + CRI)")
        ->envname("DCGM_EXPORTER_KUBERNETES");
    cmd->add_option("--pod-resources-kubelet-socket", f.pod_resources_socket, "The kubelet's PodResources socket")
        ->envname("DCGM_POD_RESOURCES_KUBELET_SOCKET")
        ->capture_default_str();
    cmd->add_flag("-n,--no-hostname", f.no_hostname, "Leave the Hostname label out")->envname("DCGM_EXPORTER_NO_HOSTNAME");
    cmd->add_option("--hostname-label", f.hostname_label,
                    "Name of the host label: Hostname (dcgm-exporter 3.x) or hostname (newer)")
        ->envname("KGPU_EXPORTER_HOSTNAME_LABEL")
        ->capture_default_str();
    cmd->add_option("--proc-root", f.proc_root, "Where the host's /proc is (for GPU processes' cgroups)")
        ->envname("KGPU_PROC_ROOT")
        ->capture_default_str();
    cmd->add_option("--mps-root", f.mps_root,
                    "Where kgpu mps-control-daemon keeps the MPS daemons' status (kgpu_mps_* metrics; \"\": none)")
        ->envname("MPS_ROOT")
        ->capture_default_str();
    cmd->add_option("--container-runtime-endpoint", f.container_runtime_endpoint,
                    "CRI socket that names the pod of a container ID")
        ->envname("CONTAINER_RUNTIME_ENDPOINT")
        ->capture_default_str();
    cmd->add_option("--resource-name,--nvidia-resource-names", f.resource_names,
                    "Extra resource names whose devices are GPUs (repeat or comma list), e.g. nvidia.com/a100")
        ->envname("NVIDIA_RESOURCE_NAMES")
        ->delimiter(',');
    cmd->add_option("--kubernetes-gpu-id-type", f.kubernetes_gpu_id_type,
                    "Accepted for dcgm-exporter compatibility (uid or device-name); kgpu resolves both")
        ->envname("DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE");
    cmd->add_option("-f,--collectors", f.collectors,
                    "dcgm-exporter's counters CSV (field, type, help per line): serve only the DCGM fields it lists")
        ->envname("DCGM_EXPORTER_COLLECTORS");
    cmd->add_option("-m,--configmap-data", f.configmap_data,
                    "dcgm-exporter's NAMESPACE:NAME of a ConfigMap with the counters: not read by kgpu (mount the "
                    "ConfigMap and use -f); 'none' for none")
        ->envname("DCGM_EXPORTER_CONFIGMAP_DATA")
        ->capture_default_str();
    cmd->add_flag("--replace-blanks-in-model-name,--rbmn", f.replace_blanks_in_model_name,
                  "Replace the blanks in the modelName label with '-' (NVIDIA-H100-80GB-HBM3)")
        ->envname("DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME");
    cmd->add_flag("--kubernetes-virtual-gpus", f.kubernetes_virtual_gpus,
                  "With --kubernetes: a shared GPU gets one series per pod (with vgpu), and per-pod GPU_UTIL and "
                  "FB_USED from its processes")
        ->envname("KUBERNETES_VIRTUAL_GPUS");
    cmd->add_flag("--kubernetes-enable-pod-uid", f.kubernetes_enable_pod_uid,
                  "With --kubernetes: add the pod_uid label (from the CRI runtime)")
        ->envname("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID");
    cmd->add_flag("--kubernetes-enable-pod-labels", f.kubernetes_enable_pod_labels,
                  "With --kubernetes: add the pod's labels (from the CRI runtime's pod sandbox)")
        ->envname("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS");
    cmd->add_option("--http-idle-timeout", f.http_idle_timeout, "Seconds before an idle HTTP connection is closed")
        ->capture_default_str();
    cmd->add_option("--http-request-timeout", f.http_request_timeout,
                    "Seconds a client has to send a whole request head (from its first byte), and to take the answer")
        ->capture_default_str();
    cmd->add_option("--http-max-connections", f.http_max_connections,
                    "Open HTTP connections; at the limit the oldest idle or slowest one makes room for a new one")
        ->capture_default_str();
    cmd->add_option("--http-max-connections-per-client", f.http_max_connections_per_client,
                    "Open HTTP connections per client address (IPv6: per /64); beyond it the client's own oldest closes")
        ->capture_default_str();
    cmd->add_option("--web-config-file", f.web_config_file,
                    "TLS and basic auth: a web config file in Prometheus exporter-toolkit format (as dcgm-exporter)")
        ->envname("DCGM_EXPORTER_WEB_CONFIG_FILE");
    cmd->add_option("--max-pods-per-gpu", f.max_pods_per_gpu,
                    "With --kubernetes: containers that get series per GPU; more are counted in "
                    "kgpu_exporter_pods_over_limit")
        ->envname("KGPU_EXPORTER_MAX_PODS_PER_GPU")
        ->capture_default_str();
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
    exporter::ExporterOptions opts;
    if (auto a = exporter::parse_listen_address(f.address); !a) return usage("--address", a.error().message);
    opts.http.address = f.address;

    long interval = 0;
    if (!parse_positive(f.collect_interval, 24L * 3600 * 1000, interval))
        return usage("--collect-interval",
                     fmt::format("expected a number of milliseconds between 1 and 86400000, got '{}'", f.collect_interval));
    opts.collector.interval = std::chrono::milliseconds(interval);

    long idle = 0;
    if (!parse_positive(f.http_idle_timeout, 3600, idle))
        return usage("--http-idle-timeout",
                     fmt::format("expected a number of seconds between 1 and 3600, got '{}'", f.http_idle_timeout));
    opts.http.idle_timeout = std::chrono::seconds(idle);
    long request = 0;
    if (!parse_positive(f.http_request_timeout, 3600, request))
        return usage("--http-request-timeout",
                     fmt::format("expected a number of seconds between 1 and 3600, got '{}'", f.http_request_timeout));
    opts.http.request_timeout = std::chrono::seconds(request);
    long conns = 0, per_client = 0;
    if (!parse_positive(f.http_max_connections, 1000000, conns))
        return usage("--http-max-connections",
                     fmt::format("expected a number between 1 and 1000000, got '{}'", f.http_max_connections));
    if (!parse_positive(f.http_max_connections_per_client, 1000000, per_client))
        return usage("--http-max-connections-per-client",
                     fmt::format("expected a number between 1 and 1000000, got '{}'", f.http_max_connections_per_client));
    opts.http.connection_limit = static_cast<unsigned>(conns);
    opts.http.peer_connection_limit = static_cast<unsigned>(per_client);
    opts.http.web_config_file = f.web_config_file;
    if (!f.web_config_file.empty()) {
        if (auto s = exporter::check_web_config(f.web_config_file); !s) return usage("--web-config-file", s.error().message);
    }
    long pods = 0;
    if (!parse_positive(f.max_pods_per_gpu, 100000, pods))
        return usage("--max-pods-per-gpu", fmt::format("expected a number between 1 and 100000, got '{}'", f.max_pods_per_gpu));
    opts.collector.pod_resources.max_pods_per_gpu = static_cast<unsigned>(pods);

    if (f.hostname_label != "Hostname" && f.hostname_label != "hostname")
        return usage("--hostname-label", fmt::format("expected Hostname or hostname, got '{}'", f.hostname_label));
    opts.collector.hostname_label = f.hostname_label;
    if (!f.no_hostname) opts.collector.hostname = host_name();

    if (!f.kubernetes_gpu_id_type.empty() && f.kubernetes_gpu_id_type != "uid" &&
        f.kubernetes_gpu_id_type != "device-name")
        return usage("--kubernetes-gpu-id-type",
                     fmt::format("expected uid or device-name, got '{}'", f.kubernetes_gpu_id_type));
    if (f.pod_resources_socket.empty()) return usage("--pod-resources-kubelet-socket", "expected a socket path");
    if (f.proc_root.empty()) return usage("--proc-root", "expected a directory");
    if (f.container_runtime_endpoint.empty()) return usage("--container-runtime-endpoint", "expected a socket");
    for (const auto& r : f.resource_names)
        if (r.find('/') == std::string::npos)
            return usage("--resource-name", fmt::format("expected a resource name like nvidia.com/a100, got '{}'", r));

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
    if (!f.kubernetes && (f.kubernetes_virtual_gpus || f.kubernetes_enable_pod_uid || f.kubernetes_enable_pod_labels))
        log::warn("exporter: --kubernetes-virtual-gpus, --kubernetes-enable-pod-uid and --kubernetes-enable-pod-labels "
                  "have no effect without --kubernetes");
    opts.collector.replace_blanks_in_model_name = f.replace_blanks_in_model_name;
    opts.collector.kubernetes_virtual_gpus = f.kubernetes_virtual_gpus;
    opts.collector.kubernetes_pod_uid = f.kubernetes_enable_pod_uid;
    opts.collector.kubernetes_pod_labels = f.kubernetes_enable_pod_labels;
    opts.collector.kubernetes = f.kubernetes;
    opts.collector.pod_resources.socket = f.pod_resources_socket;
    opts.collector.pod_resources.extra_resources = f.resource_names;
    opts.collector.proc_root = f.proc_root;
    opts.collector.mps_root = f.mps_root;
    opts.collector.cri_endpoint = f.container_runtime_endpoint;
    return exporter::run_exporter(opts, [&] { return open_nvml(f.nvml); });
}

}  // namespace kgpu::cli
