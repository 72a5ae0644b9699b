#include "cli/install.h"

#include <iostream>

namespace kgpu::cli {

void add_install_command(CLI::App& runtime_cmd, InstallCliOptions& o) {
    auto& i = o.install;
    i.runtime.accept_envvar_when_unprivileged = false;  // the secure pair (docs/container-runtime.md)
    i.runtime.accept_volume_mounts = true;
    i.runtime.log_file = "/var/log/kgpu-container-runtime.log";
    auto* c = runtime_cmd.add_subcommand(
        "install", "Install kgpu on the host: binary and links, the container runtime's config, containerd's nvidia runtime "
                   "pointing at kgpu's, a containerd restart when that changed, /dev/char links");
    c->add_option("--host-root", i.host_root, "Where the host's / is (in the DaemonSet's init container: its mount)")
        ->capture_default_str();
    c->add_option("--install-dir", i.install_dir, "Host directory for kgpu, kgpu-container-runtime and nvidia-cdi-hook")
        ->capture_default_str();
    c->add_option("--runtime-config", i.runtime_config_path, "Host path of the container runtime's config file")
        ->capture_default_str();
    c->add_option("--config", i.containerd_config, "containerd's config file (host path)")->capture_default_str();
    c->add_option("--drop-in", i.drop_in, "Write the runtime to this file instead and add it to the config's imports");
    c->add_option("--nvidia-runtime-name", i.runtime_name, "Name of the containerd runtime")->capture_default_str();
    c->add_flag("--set-as-default", i.set_as_default, "Make it containerd's default runtime");
    c->add_flag("--enable-cdi,--cdi.enabled", i.enable_cdi, "Enable CDI in containerd's CRI plugin");
    c->add_option("--restart-mode", o.restart_mode,
                  "How containerd is restarted when its config changed: signal (SIGHUP to the process serving --socket; "
                  "systemd starts it again), systemd (RestartUnit over the host's D-Bus socket), none")
        ->check(CLI::IsMember({"signal", "systemd", "none"}))
        ->capture_default_str();
    c->add_option("--socket", i.containerd_socket, "containerd's socket (host path), for --restart-mode signal")
        ->capture_default_str();
    c->add_option("--dbus-socket", i.dbus_socket, "The host's D-Bus system bus socket, for --restart-mode systemd")
        ->capture_default_str();
    c->add_option("--containerd-unit", i.containerd_unit, "containerd's systemd unit")->capture_default_str();
    c->add_option("--restart-timeout", o.restart_timeout_s,
                  "Seconds to wait after a restart for containerd to serve --socket again (0: do not wait)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    c->add_option("--nvidia-driver-root,--driver-root", i.runtime.driver_root, "The driver root the runtime uses (host path)")
        ->envname("NVIDIA_DRIVER_ROOT")
        ->capture_default_str();
    c->add_option("--nvidia-dev-root,--dev-root", i.runtime.dev_root, "Root of /dev/nvidia* for the runtime (default: the driver root)")
        ->envname("NVIDIA_DEV_ROOT");
    c->add_option("--nvml-library", i.runtime.nvml_library, "libnvidia-ml.so.1 for the runtime (default: searched under the driver root)");
    c->add_option("--runtime-log-file", i.runtime.log_file, "The runtime's log file (host path; \"\" = none)")->capture_default_str();
    c->add_option("--accept-nvidia-visible-devices-envvar-when-unprivileged", i.runtime.accept_envvar_when_unprivileged,
                  "Honour NVIDIA_VISIBLE_DEVICES in unprivileged containers (NVIDIA's default true lets any pod take every GPU)")
        ->capture_default_str();
    c->add_option("--accept-nvidia-visible-devices-as-volume-mounts", i.runtime.accept_volume_mounts,
                  "Honour the device plugin's volume-mounts device list")
        ->capture_default_str();
    c->add_flag("--no-dev-char-links", o.no_dev_char_links, "Do not create /dev/char links for the NVIDIA device nodes");
    c->add_flag("--no-verify", o.no_verify, "Do not run the installed binary inside --host-root to check it runs there");
}

void add_kgpu_runtime_flag(CLI::App& runtime_cmd, std::string& runtime_path) {
    auto* configure = runtime_cmd.get_subcommand("configure");
    configure->add_flag_callback(
        "--kgpu-runtime", [&runtime_path] { runtime_path = "/usr/local/kgpu/kgpu-container-runtime"; },
        "Point the runtime at kgpu's (/usr/local/kgpu/kgpu-container-runtime, from `kgpu runtime install`) instead of "
        "NVIDIA's nvidia-container-runtime");
}

int run_install(InstallCliOptions& o) {
    auto& i = o.install;
    i.restart = o.restart_mode == "none" ? toolkit::RestartMode::none
                : o.restart_mode == "systemd" ? toolkit::RestartMode::systemd
                                              : toolkit::RestartMode::signal;
    i.dev_char_links = !o.no_dev_char_links;
    i.verify = !o.no_verify;
    i.restart_timeout = std::chrono::milliseconds(static_cast<long long>(o.restart_timeout_s * 1000));
    // Each line as its step is done (flushed): the DaemonSet's init container restarts containerd,
    // and a container's output reaches its log only while containerd runs.
    i.progress = [](const std::string& line) { std::cout << "kgpu runtime install: " << line << std::endl; };
    if (i.runtime.driver_root.empty() || i.runtime.driver_root.front() != '/') {
        std::cerr << "kgpu runtime install: --nvidia-driver-root '" << i.runtime.driver_root << "': expected an absolute path\n";
        return 2;
    }
    auto r = toolkit::install(i);
    if (!r) {
        std::cerr << "kgpu runtime install: " << r.error().message << "\n";
        return r.error().code == Code::invalid_argument ? 2 : 1;
    }
    return 0;
}

}  // namespace kgpu::cli
