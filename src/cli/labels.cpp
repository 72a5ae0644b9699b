#include "cli/labels.h"

#include "cli/device_plugin.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
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
    // GFD's own settings (KGPU_GFD_OPTIONS); a bool flag alone means true.
    auto gfd_flag = [&](std::optional<std::string>& value, const char* flags, const char* env, const char* help,
                        bool boolean) {
        auto* o = cmd->add_option(flags, value, fmt::format("{} [env {}]", help, env));
        if (boolean) o->expected(0, 1)->default_str("true")->option_text("[=BOOL]");
    };
#define KGPU_GFD_FLAG(field, type, key, flags, env, help) \
    gfd_flag(opts.field, flags, env, help, std::is_same_v<type, bool>);
    KGPU_GFD_OPTIONS(KGPU_GFD_FLAG)
#undef KGPU_GFD_FLAG
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

namespace {

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
    return i ? format_duration(*i) : "infinite";
}

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

// The API server's client, read once (an in-cluster token is re-read by each request): needed to
// patch the node's labels (no client is an error) and to read its config label (a warning).
Status connect_api(const LabelsSettings& s, std::optional<kube::Client>& api) {
    if (s.write_node_labels) {
        auto config = kube::resolve_config(s.kubeconfig);
        if (!config) return std::unexpected(config.error().context("--write-node-labels"));
        log::info("labels: patching node {}'s labels through {} ({})", s.node_name, config->server, config->source);
        api.emplace(std::move(*config), std::chrono::seconds(10), s.kube_limit);
    } else if (!s.config_source.srcdir.empty()) {
        auto config = s.node_name.empty() ? Result<kube::ApiConfig>(fail(Code::not_found, "no node name (NODE_NAME or --node-name)"))
                                          : kube::resolve_config(s.kubeconfig);
        if (config) {
            log::info("labels: reading node {}'s label {} through {} ({})", s.node_name, s.config_source.node_label,
                      config->server, config->source);
            api.emplace(std::move(*config), std::chrono::seconds(10), s.kube_limit);
        } else {
            log::warn("labels: the node label {} is not read: {}; the default config and fallbacks decide",
                      s.config_source.node_label, config.error().message);
        }
    }
    return {};
}

// GFD removes its file when it stops (not with an infinite interval), so NFD drops the labels of a
// node nobody labels any more.
void remove_feature_file(const LabelsSettings& s) {
    if (!s.sleep_interval || !s.feature_file || s.output_file.empty() || s.output_file == "-") return;
    std::error_code ec;
    std::filesystem::remove(s.output_file, ec);
    if (ec) log::warn("labels: removing {}: {}", s.output_file, ec.message());
}

// Labels until a signal stops it (or once, with --oneshot). Exit code as run_labels's.
int label_until_stopped(const LabelsOptions& opts, LabelsSettings& s, Result<labels::Options>& options,
                        kube::Client* api, std::set<std::string>& said, bool& chosen, const sigset_t& mask) {
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
                follow_config_label(s, api, *options, said, chosen);
            Pass pass;
            auto st = label_once(opts, s, *options, timestamp, s.write_node_labels ? api : nullptr, pass);
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
            remove_feature_file(s);
            return 0;
        }
    }
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
    std::optional<kube::Client> api;
    if (auto st = connect_api(s, api); !st) {
        std::cerr << "kgpu labels: " << st.error().message << "\n";
        return 2;
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

    return label_until_stopped(opts, s, options, api ? &*api : nullptr, said, chosen, mask);
}

}  // namespace kgpu::cli
