#include "cli/doctor.h"

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "common/files.h"
#include "common/json.h"
#include "doctor/grpc_probe.h"

namespace kgpu::cli {

CLI::App* add_doctor_command(CLI::App& app, DoctorCliOptions& opts) {
    auto* cmd = app.add_subcommand("doctor", "Check every layer a GPU crosses to reach a pod; each check gives evidence and a fix");
    opts.cmd = cmd;
    cmd->require_subcommand(0, 1);
    add_nvml_options(*cmd, opts.nvml);
    auto& c = opts.checks;
    cmd->add_flag("--json", opts.json, "Print JSON (schema: docs/doctor.md)");
    cmd->add_option("--root", c.root, "Where the host's / is (a container mount, or a fake host)")->capture_default_str();
    cmd->add_option("--kernel-log", c.kernel_log,
                    "Kernel log to scan for XIDs, a path on the host (default: /dev/kmsg, then /var/log/kern.log)");
    cmd->add_option("--containerd-config", c.containerd_config, "containerd's config, a path on the host")
        ->capture_default_str();
    cmd->add_option("--device-plugin-path", c.device_plugin_dir, "The kubelet's device-plugin directory, on the host")
        ->capture_default_str();
    cmd->add_option("--pod-resources-socket", c.pod_resources_socket, "The kubelet's PodResources socket, on the host")
        ->capture_default_str();
    cmd->add_option("--kubeconfig", c.kubeconfig,
                    "The kubeconfig kgpu's node features use, for the kube.api check (default $KUBECONFIG, else the "
                    "pod's service account; none: skipped)");
    cmd->add_option("--node-name", c.node_name, "This node's name, for the kube.api check [env NODE_NAME]")->envname("NODE_NAME");
    cmd->add_option("--config-file", c.config_file,
                    "The device plugin's config file, checked strictly (unknown keys are errors) [env CONFIG_FILE]")
        ->envname("CONFIG_FILE");

    auto* compat = cmd->add_subcommand("compat", "Would an image built for this CUDA run on this driver and GPU?");
    compat->add_option("--cuda", opts.compat.cuda, "The image's CUDA version, e.g. 12.4")->required();
    compat->add_option("--driver", opts.compat.driver, "The node's driver version, e.g. 550.54.15");
    auto* cc = compat->add_option("--compute-capability", opts.compat.compute_capability, "The GPU's compute capability, e.g. 7.0");
    auto* gpu = compat->add_option("--gpu", opts.compat.gpu, "The GPU's name, e.g. \"Tesla V100\"");
    cc->excludes(gpu);

    auto* pending = cmd->add_subcommand("pending", "Explain why a GPU pod is Pending, from `kubectl get -o json` output");
    pending->add_option("--pod", opts.pending.pod, "The pod (kubectl get pod <name> -o json)")->required()->check(CLI::ExistingFile);
    pending->add_option("--nodes", opts.pending.nodes, "The nodes (kubectl get nodes -o json)")->required()->check(CLI::ExistingFile);
    pending->add_option("--pods", opts.pending.pods, "Every pod (kubectl get pods -A -o json), to count what is in use")
        ->check(CLI::ExistingFile);
    pending->add_option("--quotas", opts.pending.quotas, "ResourceQuotas (kubectl get resourcequota -A -o json)")
        ->check(CLI::ExistingFile);
    pending->add_option("--events", opts.pending.events,
                        "Events (kubectl get events -n <namespace> -o json): the scheduler's own message is quoted")
        ->check(CLI::ExistingFile);
    pending->add_option("--node-name", opts.pending_node_name,
                        "The node this host is, whose kgpu device plugin names its Unhealthy GPUs (default $NODE_NAME, "
                        "else the host name)");
    pending->add_flag("--json", opts.pending_json, "Print JSON (schema: docs/doctor.md)");
    return cmd;
}

namespace {

// This host's node name: --node-name, $NODE_NAME (a DaemonSet's downward API), else the host
// name as the kubelet takes it by default (lower case).
std::string local_node_name(const DoctorCliOptions& opts) {
    if (!opts.pending_node_name.empty()) return opts.pending_node_name;
    if (const char* n = std::getenv("NODE_NAME"); n && *n) return n;
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) return {};
    std::string out = host;
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// The nvidia.com/gpu devices kgpu's device plugin on this host lists as not Healthy (doctor's
// own probe of its socket: a ListAndWatch stream closed after the first list), as this node's.
// None when no kgpu plugin serves here.
doctor::pending::UnhealthyDevices local_unhealthy(const DoctorCliOptions& opts) {
    const auto sock =
        files::under_root(opts.checks.root, std::filesystem::path(opts.checks.device_plugin_dir) / "kgpu-nvidia-com-gpu.sock");
    std::error_code ec;
    if (!std::filesystem::is_socket(sock, ec)) return {};
    const std::string node = local_node_name(opts);
    auto list = doctor::probe_device_list(sock);
    if (node.empty() || !list) return {};
    std::vector<std::string> ids;
    for (const auto& [id, health] : *list)
        if (health != "Healthy") ids.push_back(id);
    return {{node, ids}};
}

bool colour_wanted() {
    const char* no = std::getenv("NO_COLOR");
    return ::isatty(STDOUT_FILENO) && !(no && *no);
}

int run_checks(DoctorCliOptions& opts) {
    doctor::Options o = opts.checks;
    o.nvml_library = opts.nvml.nvml_library;
    // The driver root defaults to --root unless given explicitly.
    if (opts.cmd->get_option("--nvidia-driver-root")->count() > 0) o.driver_root = opts.nvml.driver_root;
    auto report = doctor::run(o);
    if (opts.json) {
        std::cout << kgpu::json::dump_text(doctor::to_json(report), 2) << "\n";
    } else {
        doctor::print_text(report, std::cout, colour_wanted());
    }
    return report.exit_code();
}

}  // namespace

int run_doctor(DoctorCliOptions& opts) {
    if (opts.cmd->got_subcommand("compat")) {
        auto a = inventory::compat::answer(opts.compat);
        auto& out = a.exit_code == 2 ? std::cerr : std::cout;
        for (const auto& l : a.lines) out << (a.exit_code == 2 ? "kgpu doctor compat: " : "") << l << "\n";
        return a.exit_code;
    }
    if (opts.cmd->got_subcommand("pending")) {
        auto r = doctor::pending::explain(opts.pending, local_unhealthy(opts));
        if (!r) {
            std::cerr << "kgpu doctor pending: " << r.error().message << "\n";
            return 2;
        }
        if (opts.pending_json)
            std::cout << kgpu::json::dump_text(doctor::pending::to_json(*r), 2) << "\n";
        else
            doctor::pending::print_text(*r, std::cout);
        return r->fits_somewhere() ? 0 : 1;
    }
    return run_checks(opts);
}

}  // namespace kgpu::cli
