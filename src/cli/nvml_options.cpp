#include "cli/nvml_options.h"

#include "nvml/error.h"

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
    auto lib = nvml::Library::load({opts.nvml_library, opts.driver_root});
    if (!lib) return std::unexpected(lib.error());
    auto session = nvml::Session::open(*lib);
    if (!session) {
        Error e = session.error();
        std::string_view hint = nvml::init_failure_hint(e.nvml_return);
        e.message = fmt::format("initialising NVML from {}: {}{}{}; run `kgpu doctor` for a full check",
                                (*lib)->origin(), e.message, hint.empty() ? "" : " — ", hint);
        return std::unexpected(e);
    }
    return session;
}

}  // namespace kgpu::cli
