#include "cli/cdi.h"

#include <iostream>

#include "cdi/spec.h"
#include "common/files.h"
#include "inventory/discovery.h"

namespace kgpu::cli {

CLI::App* add_cdi_command(CLI::App& app, CdiOptions& opts) {
    auto* cdi = app.add_subcommand("cdi", "Container Device Interface (CDI) specs");
    cdi->require_subcommand(1);
    auto* gen = cdi->add_subcommand("generate", "Write a CDI spec for this node's GPUs, MIG devices and driver files");
    add_nvml_options(*gen, opts.nvml);
    gen->add_option("--format", opts.format, "yaml or json (default: json when --output ends in .json, else yaml)")
        ->check(CLI::IsMember({"yaml", "json"}));
    gen->add_option("--output", opts.output, "Write the spec to this file atomically (default: stdout)");
    gen->add_option("--vendor", opts.vendor, "Vendor part of the CDI kind")->capture_default_str();
    gen->add_option("--class", opts.device_class, "Class part of the CDI kind")->capture_default_str();
    gen->add_option("--device-name-strategy", opts.name_strategies,
                    "How devices are named: index, uuid, type-index (a list; repeat or separate with commas)")
        ->delimiter(',')
        ->capture_default_str();
    gen->add_option("--nvidia-dev-root,--dev-root", opts.dev_root,
                    "Root under which /dev/nvidia* are looked up (default: the driver root)")
        ->envname("NVIDIA_DEV_ROOT");
    gen->add_option("--proc-root", opts.proc_root, "Where the host's /proc is (for the MIG capability minors)")
        ->capture_default_str();
    gen->add_option("--sysfs-root", opts.sysfs_root, "Where the host's /sys is")->capture_default_str();
    gen->add_option("--hook-path", opts.hook_path, "The CDI hook binary the createContainer hooks run")
        ->capture_default_str();
    gen->add_flag("--no-hooks", opts.no_hooks, "Emit no hooks (no libcuda.so symlink, no ldcache update)");
    return cdi;
}

int run_cdi_generate(const CdiOptions& opts) {
    cdi::SpecOptions so;
    so.vendor = opts.vendor;
    so.device_class = opts.device_class;
    std::string joined;
    for (const auto& s : opts.name_strategies) joined += s + ",";
    auto strategies = cdi::parse_strategies(joined);
    if (!strategies) {
        std::cerr << "kgpu cdi generate: --" << strategies.error().message << "\n";
        return 2;
    }
    so.strategies = *strategies;
    so.driver_root = opts.nvml.driver_root;
    so.dev_root = opts.dev_root;
    so.proc_root = opts.proc_root;
    so.hook_path = opts.hook_path;
    so.hooks = !opts.no_hooks;
    if (auto kind = cdi::make_kind(so.vendor, so.device_class); !kind) {
        std::cerr << "kgpu cdi generate: " << kind.error().message << "\n";
        return 2;
    }

    auto session = open_nvml(opts.nvml);
    if (!session) {
        std::cerr << "kgpu cdi generate: " << session.error().message << "\n";
        return 1;
    }
    inventory::DiscoveryOptions dopts;
    dopts.sysfs_root = opts.sysfs_root;
    dopts.topology = false;
    auto node = inventory::discover(*session, dopts);
    if (!node) {
        std::cerr << "kgpu cdi generate: " << node.error().message << "\n";
        return 1;
    }
    auto spec = cdi::generate(*node, so);
    if (!spec) {
        std::cerr << "kgpu cdi generate: " << spec.error().message << "\n";
        return spec.error().code == Code::invalid_argument ? 2 : 1;
    }
    std::string format = opts.format;
    if (format.empty()) format = opts.output.ends_with(".json") ? "json" : "yaml";
    const std::string text = format == "json" ? cdi::to_json_text(*spec) : cdi::to_yaml(*spec);
    if (opts.output.empty()) {
        std::cout << text;
        return 0;
    }
    if (auto st = files::write_atomic(opts.output, text, 0644); !st) {
        std::cerr << "kgpu cdi generate: " << st.error().message << "\n";
        return 1;
    }
    std::cerr << "kgpu cdi generate: wrote " << opts.output << " (" << (*spec)["devices"].size() << " devices, cdiVersion "
              << (*spec)["cdiVersion"].get<std::string>() << ")\n";
    return 0;
}

}  // namespace kgpu::cli
