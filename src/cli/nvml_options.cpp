#include "cli/nvml_options.h"


namespace kgpu::cli {

void add_nvml_options(CLI::App& app, NvmlOptions& opts) {
    app.add_option("--nvml-library", opts.nvml_library,
                   "Path of libnvidia-ml.so.1 to load (default: searched under the driver root)")
        ->envname("KGPU_NVML_LIBRARY");
    app.add_option("--nvidia-driver-root,--driver-root", opts.driver_root,
                   "Root of the NVIDIA driver installation (e.g. /run/nvidia/driver)")
        ->envname("NVIDIA_DRIVER_ROOT")
        ->capture_default_str();
}

Result<nvml::Session> open_nvml(const NvmlOptions& opts) {
    auto session = nvml::open_session({opts.nvml_library, opts.driver_root});
    if (!session && session.error().nvml_return != 0) {
        Error e = session.error();
        e.message += "; run `kgpu doctor` for a full check";
        return std::unexpected(e);
    }
    return session;
}

}  // namespace kgpu::cli
