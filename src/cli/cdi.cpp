#include "cli/cdi.h"

#include <cstdlib>
#include <iostream>

#include "cdi/spec.h"
#include "common/files.h"
#include "common/strings.h"
#include "inventory/discovery.h"

namespace kgpu::cli {

namespace {

// `cdi generate`'s createContainer hooks: which binary runs them and which are in the spec.
void add_hook_flags(CLI::App& gen, CdiOptions& opts) {
    gen.add_option("--nvidia-cdi-hook-path,--nvidia-ctk-path,--hook-path", opts.hook_path,
                   "The binary the createContainer hooks run: an absolute path, or a name looked up in PATH "
                   "(default nvidia-cdi-hook, else /usr/bin/nvidia-cdi-hook); nvidia-ctk and kgpu get `hook` "
                   "before the hook's name")
        ->envname("NVIDIA_CTK_CDI_HOOK_PATH")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    gen.add_option("--disable-hook,--disable-hooks", opts.disabled_hooks,
                   "A hook to leave out (create-symlinks, enable-cuda-compat, update-ldcache, "
                   "disable-device-node-modification, update-application-profile), or all; repeatable")
        ->delimiter(',')
        ->envname("NVIDIA_CTK_CDI_GENERATE_DISABLED_HOOKS");
    gen.add_option("--enable-hook,--enable-hooks", opts.enabled_hooks,
                   "A hook to include although disabled (chmod is off by default); repeatable")
        ->delimiter(',')
        ->envname("NVIDIA_CTK_CDI_GENERATE_ENABLED_HOOKS");
    gen.add_flag("--no-hooks", opts.no_hooks, "Emit no hooks (same as --disable-hook all)");
    gen.add_option("--ldconfig-path", opts.ldconfig_path, "update-ldcache's --ldconfig-path in the container")
        ->envname("NVIDIA_CTK_CDI_GENERATE_LDCONFIG_PATH")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

// Where `cdi generate` looks for the driver's libraries and graphics configuration files.
void add_search_flags(CLI::App& gen, CdiOptions& opts) {
    gen.add_option("--library-search-path", opts.library_search_paths,
                   "Host directories to find the driver's libraries in, instead of the standard ones; repeatable")
        ->delimiter(',')
        ->envname("NVIDIA_CTK_CDI_GENERATE_LIBRARY_SEARCH_PATHS");
    gen.add_flag("--allow-missing-libraries", opts.allow_missing_libraries,
                 "Write the spec even when no driver library is found (it then has no driver mounts or hooks)");
    gen.add_option("--config-search-path", opts.config_search_paths,
                   "Host directories to find the graphics configuration files (EGL, Vulkan, X11, OpenCL) in, "
                   "instead of /etc and $XDG_DATA_DIRS under the driver root; repeatable")
        ->delimiter(',')
        ->envname("NVIDIA_CTK_CDI_GENERATE_CONFIG_SEARCH_PATHS");
}

}  // namespace

CLI::App* add_cdi_command(CLI::App& app, CdiOptions& opts) {
    auto* cdi = app.add_subcommand("cdi", "Container Device Interface (CDI) specs");
    cdi->require_subcommand(1);
    auto* gen = cdi->add_subcommand("generate", "Write a CDI spec for this node's GPUs, MIG devices and driver files");
    add_nvml_options(*gen, opts.nvml);
    gen->add_option("--format", opts.format, "yaml or json (default: json when --output ends in .json, else yaml)")
        ->transform(CLI::IsMember({"yaml", "json"}, CLI::ignore_case))
        ->envname("NVIDIA_CTK_CDI_GENERATE_OUTPUT_FORMAT")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    gen->add_option("--output", opts.output, "Write the spec to this file atomically (default: stdout)")
        ->envname("NVIDIA_CTK_CDI_OUTPUT_FILE_PATH")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    gen->add_option("--vendor,--cdi-vendor", opts.vendor, "Vendor part of the CDI kind")
        ->envname("NVIDIA_CTK_CDI_GENERATE_VENDOR")
        ->capture_default_str()
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    gen->add_option("--class,--cdi-class", opts.device_class,
                    "Class part of the CDI kind (default: gpu; imex-channel with --mode imex)")
        ->envname("NVIDIA_CTK_CDI_GENERATE_CLASS")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    gen->add_option("--device-name-strategy", opts.name_strategies,
                    "How devices are named: index, uuid, type-index (a list; repeat or separate with commas)")
        ->delimiter(',')
        ->envname("NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES")
        ->capture_default_str();
    gen->add_option("--nvidia-dev-root,--dev-root", opts.dev_root,
                    "Root under which /dev/nvidia* are looked up (default: the driver root)")
        ->envname("NVIDIA_DEV_ROOT")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    gen->add_option("--proc-root", opts.proc_root, "Where the host's /proc is (for the MIG capability minors)")
        ->capture_default_str()
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    gen->add_option("--sysfs-root", opts.sysfs_root, "Where the host's /sys is (DRM nodes, firmware search path)")
        ->capture_default_str()
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    add_hook_flags(*gen, opts);
    gen->add_flag("--no-all-device", opts.no_all_device, "Do not add the `all` device")
        ->envname("NVIDIA_CTK_CDI_GENERATE_NO_ALL_DEVICE");
    gen->add_option("--mode,--discovery-mode", opts.mode,
                    "auto or nvml: GPUs and MIG devices; imex: the IMEX channels")
        ->envname("NVIDIA_CTK_CDI_GENERATE_MODE")
        ->capture_default_str()
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    gen->add_option("--device-id,--device-ids,--device,--devices", opts.device_ids,
                    "Only these devices: GPU indexes or UUIDs, MIG i:j or UUIDs (IMEX: channel numbers), all, or none")
        ->delimiter(',')
        ->envname("NVIDIA_CTK_CDI_GENERATE_DEVICE_IDS")
        ->capture_default_str();
    add_search_flags(*gen, opts);
    gen->add_option("--feature-flag,--feature-flags", opts.feature_flags,
                    "nvidia-ctk's; accepted and ignored with a warning (kgpu has no feature flags)")
        ->delimiter(',')
        ->envname("NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS");
    // nvidia-ctk's own names for the two roots, after kgpu's: flag > NVIDIA_DRIVER_ROOT >
    // NVIDIA_CTK_DRIVER_ROOT (and the same for the dev root), so an nvidia-ctk environment works.
    gen->parse_complete_callback([&opts, gen] {
        if (gen->get_option("--nvidia-driver-root")->count() == 0)
            if (const char* v = std::getenv("NVIDIA_CTK_DRIVER_ROOT"); v && *v) opts.nvml.driver_root = v;
        if (gen->get_option("--nvidia-dev-root")->count() == 0)
            if (const char* v = std::getenv("NVIDIA_CTK_DEV_ROOT"); v && *v) opts.dev_root = v;
    });
    return cdi;
}

namespace {

// The generator's options from the command line's; every error is a usage error (exit 2).
Result<cdi::SpecOptions> spec_options(const CdiOptions& opts) {
    cdi::SpecOptions so;
    const std::string mode = strings::lower(opts.mode);
    if (mode == "auto" || mode == "nvml") so.mode = cdi::Mode::nvml;
    else if (mode == "imex") so.mode = cdi::Mode::imex;
    else
        return fail(Code::invalid_argument,
                    "--mode '{}': kgpu generates auto (= nvml), nvml or imex specs (csv, wsl, management, "
                    "gdrcopy, gds, mofed and nvswitch are nvidia-ctk's only)",
                    opts.mode);
    so.vendor = opts.vendor;
    so.device_class = !opts.device_class.empty() ? opts.device_class : so.mode == cdi::Mode::imex ? "imex-channel" : "gpu";
    std::string joined;
    for (const auto& s : opts.name_strategies) joined += s + ",";
    auto strategies = cdi::parse_strategies(joined);
    if (!strategies) return fail(Code::invalid_argument, "--{}", strategies.error().message);
    so.strategies = *strategies;
    so.driver_root = opts.nvml.driver_root;
    so.dev_root = opts.dev_root;
    so.proc_root = opts.proc_root;
    so.sysfs_root = opts.sysfs_root;
    so.hooks.path = cdi::resolve_hook_path(opts.hook_path);
    so.hooks.disabled = opts.disabled_hooks;
    if (opts.no_hooks) so.hooks.disabled.push_back("all");
    for (const auto& h : opts.enabled_hooks)
        if (h == "all") return fail(Code::invalid_argument, "--enable-hook all: enabling all hooks is not supported");
    so.hooks.enabled = opts.enabled_hooks;
    so.hooks.ldconfig_path = opts.ldconfig_path;
    so.all_device = !opts.no_all_device;
    so.device_ids = opts.device_ids.empty() ? std::vector<std::string>{"all"} : opts.device_ids;
    if (std::find(so.device_ids.begin(), so.device_ids.end(), "none") != so.device_ids.end()) so.all_device = false;
    so.library_search_paths = opts.library_search_paths;
    so.config_search_paths = opts.config_search_paths;
    so.allow_missing_libraries = opts.allow_missing_libraries;
    if (auto kind = cdi::make_kind(so.vendor, so.device_class); !kind) return std::unexpected(kind.error());
    return so;
}

}  // namespace

int run_cdi_generate(const CdiOptions& opts) {
    for (const auto& f : opts.feature_flags)
        std::cerr << "kgpu cdi generate: warning: --feature-flag " << f << " ignored: kgpu has no feature flags\n";
    const auto options = spec_options(opts);
    if (!options) {
        std::cerr << "kgpu cdi generate: " << options.error().message << "\n";
        return 2;
    }
    const cdi::SpecOptions& so = *options;

    inventory::Node node;
    if (so.mode == cdi::Mode::nvml) {
        auto session = open_nvml(opts.nvml);
        if (!session) {
            std::cerr << "kgpu cdi generate: " << session.error().message << "\n";
            return 1;
        }
        inventory::DiscoveryOptions dopts;
        dopts.sysfs_root = opts.sysfs_root;
        dopts.topology = false;
        auto discovered = inventory::discover(*session, dopts);
        if (!discovered) {
            std::cerr << "kgpu cdi generate: " << discovered.error().message << "\n";
            return 1;
        }
        node = std::move(*discovered);
    }
    auto spec = cdi::generate(node, so);
    if (!spec) {
        std::cerr << "kgpu cdi generate: " << spec.error().message << "\n";
        return spec.error().code == Code::invalid_argument ? 2 : 1;
    }
    std::string format = strings::lower(opts.format);
    if (format.empty()) format = opts.output.ends_with(".json") ? "json" : "yaml";
    // The JSON text first in either format: it refuses a path that is not UTF-8, which the YAML
    // writer would turn into U+FFFD (a path that does not exist).
    auto text = cdi::to_json_text(*spec);
    if (!text) {
        std::cerr << "kgpu cdi generate: " << text.error().message << "\n";
        return 1;
    }
    if (format != "json") text = cdi::to_yaml(*spec);
    if (opts.output.empty()) {
        std::cout << *text;
        return 0;
    }
    // The directory too (nvidia-ctk: MkdirAll(dir, 0755)): /var/run/cdi does not survive a reboot.
    if (auto st = files::create_directories(std::filesystem::path(opts.output).parent_path(), 0755); !st) {
        std::cerr << "kgpu cdi generate: --output " << opts.output << ": " << st.error().message << "\n";
        return 1;
    }
    if (auto st = files::write_atomic(opts.output, *text, 0644); !st) {
        std::cerr << "kgpu cdi generate: " << st.error().message << "\n";
        return 1;
    }
    std::cerr << "kgpu cdi generate: wrote " << opts.output << " (" << (*spec)["devices"].size() << " devices, cdiVersion "
              << (*spec)["cdiVersion"].get<std::string>() << ")\n";
    return 0;
}

}  // namespace kgpu::cli
