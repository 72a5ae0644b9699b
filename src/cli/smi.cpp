#include "cli/smi.h"

#include <iostream>

#include <fmt/format.h>

#include "toolkit/smi.h"

namespace kgpu::cli {

namespace {

void add_flags(CLI::App& c, SmiOptions& o) {
    add_nvml_options(c, o.nvml);
    c.add_flag("-L,--list-gpus", o.list, "List the GPUs (and MIG devices) with their UUIDs");
    c.add_option("-i,--id", o.ids, "Only these GPUs: indices or UUIDs (comma list)")->delimiter(',');
}

}  // namespace

CLI::App* add_smi_command(CLI::App& app, SmiOptions& o) {
    auto* c = app.add_subcommand("smi", "nvidia-smi's default table and -L (also run as nvidia-smi): what this process sees");
    add_flags(*c, o);
    return c;
}

std::string smi_usage_error(std::string_view program, std::string_view parse_error) {
    return fmt::format("{}: {}\n"
                       "{} has two of nvidia-smi's modes: its default table (no argument) and its GPU list (-L, "
                       "--list-gpus), each for every GPU or those -i/--id names (indices or UUIDs, comma list). "
                       "Other modes (--query-gpu, -q, topo, mig, ...) are not implemented: `kgpu info --json` has "
                       "the inventory and `kgpu info` the topology matrix; or run the driver's own nvidia-smi.\n",
                       program, parse_error, program);
}

int run_smi(const SmiOptions& o) {
    auto session = nvml::open_session({o.nvml.nvml_library, o.nvml.driver_root});
    if (!session) {
        std::cout << "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
                     "latest NVIDIA driver is installed and running.\n";
        std::cerr << "kgpu smi: " << session.error().message << "\n";
        return 9;
    }
    auto snap = toolkit::collect_smi(*session, o.ids);
    if (!snap) {
        std::cout << snap.error().message << "\n";
        return snap.error().code == Code::not_found ? 6 : 9;
    }
    if (o.list) {
        if (snap->gpus.empty()) {
            std::cout << "No devices found.\n";
            return 6;
        }
        std::cout << toolkit::render_smi_list(*snap);
        return 0;
    }
    std::cout << toolkit::render_smi_table(*snap);
    return 0;
}

int run_smi_argv(const std::vector<std::string>& args) {
    SmiOptions o;
    CLI::App app{"nvidia-smi (kgpu): the GPUs this process sees"};
    app.name("nvidia-smi");
    add_flags(app, o);
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    try {
        app.parse(reversed);
    } catch (const CLI::ExtrasError& e) {
        std::cerr << smi_usage_error("nvidia-smi (kgpu)", e.what());
        return 2;  // nvidia-smi's "a supplied argument or flag is invalid"
    } catch (const CLI::ParseError& e) {
        int code = app.exit(e);
        return code == 0 ? 0 : 2;
    }
    return run_smi(o);
}

}  // namespace kgpu::cli
