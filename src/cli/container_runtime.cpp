#include "cli/container_runtime.h"

#include "toolkit/runtime.h"

#ifndef KGPU_VERSION
#define KGPU_VERSION "0.0.0"
#endif

namespace kgpu::cli {

CLI::App* add_container_runtime_command(CLI::App& app) {
    auto* c = app.add_subcommand(
        "container-runtime",
        "OCI runtime wrapper with runc's command line (also run as kgpu-container-runtime): for create and run it "
        "injects the GPUs the container asks for into <bundle>/config.json, then execs runc");
    c->allow_extras();
    c->footer(
        "Configuration: /etc/kgpu/container-runtime.toml, or the file named by env KGPU_RUNTIME_CONFIG (keys: "
        "low-level-runtime, driver-root, dev-root, nvml-library, proc-root, log-file, log-level, "
        "accept-nvidia-visible-devices-envvar-when-unprivileged, accept-nvidia-visible-devices-as-volume-mounts, "
        "annotation-prefixes, default-kind, hook-path, ldconfig-path, disable-require). See docs/container-runtime.md.");
    return c;
}

int run_container_runtime(const std::vector<std::string>& args) { return toolkit::container_runtime_main(args, KGPU_VERSION); }

}  // namespace kgpu::cli
