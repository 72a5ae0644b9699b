#include "deviceplugin/cdi_refresh.h"

#include "cdi/driver_files.h"
#include "cdi/naming.h"
#include "cdi/spec.h"
#include "common/files.h"
#include "common/log.h"
#include "deviceplugin/allocate.h"

namespace kgpu::deviceplugin {

namespace fs = std::filesystem;

std::string loaded_driver_version(const fs::path& proc_root) {
    auto text = files::read(proc_root / "driver/nvidia/version");
    return text ? cdi::parse_proc_driver_version(*text) : std::string();
}

void write_cdi_spec(const inventory::Node& node, const Config& cfg, const std::string& driver_version) {
    if (node.gpus.empty()) return;
    inventory::Node n = node;
    if (!driver_version.empty() && driver_version != node.driver_version) {
        log::info("the loaded driver is {} (NVML reported {}): the CDI spec names driver {}'s libraries", driver_version,
                  node.driver_version, driver_version);
        n.driver_version = driver_version;
    }
    cdi::SpecOptions so;
    so.vendor = std::string(cdi::kDevicePluginVendor);
    so.device_class = "gpu";
    so.driver_root = cfg.nvidia_driver_root;
    so.dev_root = cfg.dev_root();
    so.proc_root = cfg.proc_root;
    if (!cfg.nvidia_ctk_path.empty()) so.hooks.path = cfg.nvidia_ctk_path;  // flags.plugin.nvidiaCTKPath
    so.hooks.disabled = cfg.cdi_disabled_hooks;                              // --cdi-disable-hooks
    // Device names must resolve even on a node whose libraries kgpu cannot see (a warning says so).
    so.allow_missing_libraries = true;
    auto spec = cdi::generate(n, so);
    const fs::path path = fs::path(cfg.cdi_spec_dir) / cdi_spec_file_name(kGpuKind);
    if (!spec) {
        log::error("cannot generate the CDI spec for {}: {}; CDI device names will not resolve", path.string(),
                   spec.error().message);
        return;
    }
    if (auto st = files::create_directories(cfg.cdi_spec_dir); !st) {
        log::error("{}; CDI device names will not resolve", st.error().message);
        return;
    }
    auto text = cdi::to_json_text(*spec);
    if (!text) {
        log::error("{}: {}; CDI device names will not resolve", path.string(), text.error().message);
        return;
    }
    if (auto st = files::write_atomic(path, *text); !st) {
        log::error("{}; CDI device names will not resolve", st.error().message);
        return;
    }
    log::info("wrote the CDI spec {} (driver {})", path.string(), n.driver_version);
    // What kgpu wrote before issue #23: nvidia.com/gpu names, the node-wide spec's (kgpu cdi
    // generate, nvidia-ctk, nvidia-cdi-refresh), which the CDI cache drops from both files.
    const fs::path legacy = fs::path(cfg.cdi_spec_dir) / legacy_cdi_spec_file_name("gpu");
    std::error_code ec;
    if (fs::exists(legacy, ec)) {
        if (fs::remove(legacy, ec))
            log::info("removed {}, written by an earlier kgpu: its nvidia.com/gpu names collide with a node-wide "
                      "CDI spec (the plugin's names are {}=… now)",
                      legacy.string(), kGpuKind);
        else
            log::warn("cannot remove {} ({}), written by an earlier kgpu: its nvidia.com/gpu names collide with a "
                      "node-wide CDI spec in the same directory; delete it",
                      legacy.string(), ec.message());
    }
}

std::optional<std::string> DriverVersionWatch::changed() {
    const auto now = std::chrono::steady_clock::now();
    if (seen_ && now < next_) return std::nullopt;
    next_ = now + kInterval;
    std::string v = loaded_driver_version(proc_root_);
    if (!seen_) {
        seen_ = v;
        return std::nullopt;
    }
    if (v.empty() || v == *seen_) return std::nullopt;
    seen_ = v;
    return v;
}

bool CdiSpecRefresher::wanted(const Config& cfg) {
    return cfg.uses(DeviceListStrategy::cdi_annotations) || cfg.uses(DeviceListStrategy::cdi_cri);
}

void CdiSpecRefresher::poll(const inventory::Node& node, const Config& cfg) {
    if (!wanted(cfg)) return;
    if (!watch_ || proc_root_ != fs::path(cfg.proc_root)) {
        proc_root_ = cfg.proc_root;
        watch_.emplace(proc_root_);
    }
    if (auto v = watch_->changed()) {
        log::warn("the loaded NVIDIA driver changed to {} ({}): writing the CDI spec again for its libraries", *v,
                  (proc_root_ / "driver/nvidia/version").string());
        write_cdi_spec(node, cfg, *v);
    }
}

}  // namespace kgpu::deviceplugin
