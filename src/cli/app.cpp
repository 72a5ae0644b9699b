#include "cli/app.h"

#include <algorithm>
#include <cctype>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <grpc/support/log.h>

#include "cdi/hooks.h"
#include "cli/cdi.h"
#include "cli/config_manager.h"
#include "cli/mig_manager.h"
#include "cli/container_runtime.h"
#include "cli/hook.h"
#include "cli/install.h"
#include "cli/smi.h"
#include "cli/mig.h"
#include "cli/labels.h"
#include "cli/runtime.h"
#include "cli/device_plugin.h"
#include "cli/doctor.h"
#include "cli/exporter.h"
#include "cli/demo.h"
#include "cli/info.h"
#include "cli/mps_control_daemon.h"
#include "common/log.h"

#ifndef KGPU_VERSION
#define KGPU_VERSION "0.0.0"
#endif

namespace kgpu::cli {

namespace {

std::string_view base_name(const char* argv0) {
    std::string_view s = argv0 ? argv0 : "";
    if (auto slash = s.rfind('/'); slash != std::string_view::npos) s.remove_prefix(slash + 1);
    return s;
}

// The hooks' names: no kgpu subcommand and no runc command is spelled like one of them.
bool is_hook_name(std::string_view s) {
    return s == cdi::kChain || cdi::is_hook_name(s);
}

// The index of the first word after kgpu's global options (`--log-level LEVEL`): the
// subcommand's name. args.size() when there is none, or when another option comes first (CLI11
// reports that one).
std::size_t command_word(const std::vector<std::string>& args) {
    for (std::size_t i = 1; i < args.size(); ++i) {
        const std::string_view a = args[i];
        if (a == "--log-level") {
            ++i;
            continue;
        }
        if (a.starts_with("--log-level=")) continue;
        if (a.starts_with("-")) return args.size();
        return i;
    }
    return args.size();
}

CLI::App* subcommand(CLI::App& app, std::string_view name) {
    auto found = app.get_subcommands([&](CLI::App* c) { return c->get_name() == name; });
    return found.empty() ? nullptr : found.front();
}

// Levenshtein distance, for "did you mean".
std::size_t distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diag = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diag = up;
        }
    }
    return row[b.size()];
}

// "kgpu: unknown subcommand 'exporterr' (did you mean 'exporter'?)" and the list.
std::string unknown_subcommand(CLI::App& app, std::string_view word) {
    std::vector<std::string> names;
    std::string closest;
    std::size_t best = 3;  // suggest within two edits, or a prefix
    for (const auto* c : app.get_subcommands([](CLI::App*) { return true; })) {
        names.push_back(c->get_name());
        const std::size_t d = c->get_name().starts_with(word) ? 1 : distance(word, c->get_name());
        if (d < best) best = d, closest = c->get_name();
    }
    std::string out = fmt::format("kgpu: unknown subcommand '{}'", word);
    if (!closest.empty()) out += fmt::format(" (did you mean '{}'?)", closest);
    out += fmt::format("\nSubcommands: {}, help, version. `kgpu --help` describes them.\n", fmt::join(names, ", "));
    return out;
}

// NVIDIA's Go binaries (dcgm-exporter, the device plugin, GFD) parse flags with Go's flag
// package, where `-debug` and `--debug` are the same flag: so do kgpu's drop-ins for them. A
// single-dash word whose name is one of the subcommand's long options is rewritten to the
// double-dash spelling; another single-dash word longer than one letter is an error naming it,
// as Go's "flag provided but not defined" (CLI11 would read `-debug` as `-d ebug` and blame
// whatever option `-d` is). Words after `--` are left alone. Returns the error text, or "".
std::string go_style_flags(CLI::App& app, CLI::App& sub, std::vector<std::string>& args, std::size_t from) {
    for (std::size_t i = from; i < args.size(); ++i) {
        std::string& a = args[i];
        if (a == "--") break;
        if (a.size() < 3 || a[0] != '-' || a[1] == '-' || !std::isalpha(static_cast<unsigned char>(a[1]))) continue;
        const std::string name = a.substr(1, a.find('=') - 1);
        if (sub.get_option_no_throw("--" + name) || app.get_option_no_throw("--" + name)) {
            a.insert(0, "-");
            continue;
        }
        return fmt::format("kgpu {}: unknown flag -{}: flags are spelt -name or --name (as {}'s), a short flag's value "
                           "goes after a blank (-f FILE); `kgpu {} --help` lists them",
                           sub.get_name(), name,
                           sub.get_name() == "exporter" ? "dcgm-exporter" : "NVIDIA's", sub.get_name());
    }
    return {};
}

// gRPC's own log (gpr_log: "E0102 ... chttp2_server.cc:1051] UNKNOWN:No address added out of
// total 1 resolved ...") goes through kgpu's log, at debug level: every gRPC failure also reaches
// kgpu as a status, which kgpu reports with what it was doing, so gRPC's raw lines only came
// before kgpu's clear message (issue #23: a device plugin run as non-root). An assertion gRPC
// fails before it aborts stays an error. Debian 12's gRPC 1.51 logs through gpr_log only (the
// absl log sink came with gRPC 1.65).
void grpc_log_line(gpr_log_func_args* a) {
    std::string_view file = a->file ? a->file : "?";
    if (auto slash = file.rfind('/'); slash != std::string_view::npos) file.remove_prefix(slash + 1);
    const std::string_view msg = a->message ? a->message : "";
    if (a->severity == GPR_LOG_SEVERITY_ERROR && msg.starts_with("assertion failed"))
        log::error("grpc: {} ({}:{})", msg, file, a->line);
    else
        log::debug("grpc: {} ({}:{})", msg, file, a->line);
}

// Commands that take another program's command line, dispatched before the flag parser (and
// before it is built: a container start waits for them). nullopt: none of them.
std::optional<int> run_before_parser(int argc, char** argv) {
    const std::string_view invoked_as = base_name(argc > 0 ? argv[0] : nullptr);
    // A hook as specs spell it for any binary not named nvidia-ctk or kgpu (nvidia-ctk's rule,
    // cdi/hooks.h): [<file name>, <hook>, ...]. It runs the hook whatever the file is called: a
    // copy named kgpu-container-runtime, which would otherwise take the hook for a runc command.
    if (argc > 1 && is_hook_name(argv[1]))
        return run_hook_argv(invoked_as == "nvidia-cdi-hook" ? "nvidia-cdi-hook" : "kgpu hook", {argv + 1, argv + argc});
    if (invoked_as == "kgpu-container-runtime") return run_container_runtime({argv + 1, argv + argc});
    if (argc > 1 && std::string_view(argv[1]) == "container-runtime" &&
        !(argc == 3 && (std::string_view(argv[2]) == "--help" || std::string_view(argv[2]) == "-h")))
        return run_container_runtime({argv + 2, argv + argc});
    if (invoked_as == "nvidia-smi") return run_smi_argv({argv + 1, argv + argc});
    if (invoked_as == "nvidia-cdi-hook") return run_hook_argv("nvidia-cdi-hook", {argv + 1, argv + argc});
    if (argc > 1 && std::string_view(argv[1]) == "hook") return run_hook_argv("kgpu hook", {argv + 2, argv + argc});
    // Behind kgpu's global options (which no hook reads), still the hooks' own parser.
    if (argc > 2 && std::string_view(argv[1]).starts_with("--log-level")) {
        const std::vector<std::string> words(argv, argv + argc);
        if (const std::size_t w = command_word(words); w < words.size() && words[w] == "hook")
            return run_hook_argv("kgpu hook", {words.begin() + static_cast<std::ptrdiff_t>(w) + 1, words.end()});
    }
    return std::nullopt;
}

// Every subcommand's options and the parser nodes dispatch() asks about.
struct Commands {
    std::string log_level = "info";
    InfoOptions info;
    CdiOptions cdi;
    CLI::App* cdi_cmd = nullptr;
    RuntimeOptions runtime;
    CLI::App* runtime_cmd = nullptr;
    InstallCliOptions install;
    LabelsOptions labels;
    DevicePluginFlags device_plugin;
    DoctorCliOptions doctor;
    ConfigManagerFlags config_manager;
    ExporterFlags exporter;
    DemoCliOptions demo;
    MpsControlDaemonFlags mps;
    CLI::App* mount_shm_cmd = nullptr;
    CLI::App* container_runtime_cmd = nullptr;
    HookOptions hook;  // `kgpu hook` runs before the parser (run_hook_argv); here for --help
    CLI::App* hook_cmd = nullptr;
    SmiOptions smi;
    CLI::App* smi_cmd = nullptr;
    MigOptions mig;
    MigManagerFlags mig_manager;

    void add_to(CLI::App& app) {
        app.require_subcommand(1);
        app.fallthrough();  // global options (--log-level) may also follow the subcommand
        app.set_version_flag("--version", KGPU_VERSION);
        app.add_option("--log-level", log_level, "debug, info, warn, error or off")->envname("KGPU_LOG_LEVEL");
        add_info_command(app, info);
        cdi_cmd = add_cdi_command(app, cdi);
        runtime_cmd = add_runtime_command(app, runtime);
        add_install_command(*runtime_cmd, install);
        add_kgpu_runtime_flag(*runtime_cmd, runtime.runtime_path);
        add_labels_command(app, labels);
        add_device_plugin_command(app, device_plugin);
        add_doctor_command(app, doctor);
        add_config_manager_command(app, config_manager);
        add_exporter_command(app, exporter);
        add_demo_command(app, demo);
        mount_shm_cmd = add_mps_control_daemon_command(app, mps);
        container_runtime_cmd = add_container_runtime_command(app);
        hook_cmd = add_hook_command(app, hook);
        smi_cmd = add_smi_command(app, smi);
        add_mig_command(app, mig);
        add_mig_manager_command(app, mig_manager);
    }

    int dispatch(CLI::App& app) {
        if (app.got_subcommand("info")) return run_info(info);
        if (app.got_subcommand("mig")) return run_mig(*app.get_subcommand("mig"), mig);
        if (app.got_subcommand("mig-manager")) return run_mig_manager(mig_manager);
        if (app.got_subcommand("device-plugin")) return run_device_plugin(device_plugin);
        if (app.got_subcommand("doctor")) return run_doctor(doctor);
        if (app.got_subcommand("config-manager")) return run_config_manager(config_manager);
        if (app.got_subcommand("exporter")) return run_exporter(exporter);
        if (app.got_subcommand("demo")) return run_demo(demo);
        if (cdi_cmd->got_subcommand("generate")) return run_cdi_generate(cdi);
        if (runtime_cmd->got_subcommand("configure")) return run_runtime_configure(runtime);
        if (runtime_cmd->got_subcommand("install")) return run_install(install);
        if (app.got_subcommand("labels")) return run_labels(labels);
        if (mount_shm_cmd->parsed()) return run_mps_mount_shm(mps);
        if (app.got_subcommand("mps-control-daemon")) return run_mps_control_daemon(mps);
        if (app.got_subcommand("smi")) return run_smi(smi);
        // Not reached from a command line (the fast paths take every spelling); kept so the
        // parser's `hook` never falls through to "no subcommand".
        if (app.got_subcommand("hook")) return run_hook(*hook_cmd, hook);
        if (app.got_subcommand("container-runtime")) return run_container_runtime(container_runtime_cmd->remaining());
        return 2;
    }
};

// What CLI11 would only answer with "A subcommand is required": `kgpu help [subcommand]`,
// `kgpu version`, and a word that names no subcommand; and Go-style flags of the subcommands
// that take NVIDIA's spellings. nullopt: the parser goes on (with `args` possibly rewritten).
std::optional<int> answer_before_parsing(CLI::App& app, std::vector<std::string>& args) {
    const std::size_t w = command_word(args);
    if (w >= args.size()) return std::nullopt;
    const std::string& word = args[w];
    if (word == "version") {
        std::cout << KGPU_VERSION << "\n";
        return 0;
    }
    if (word == "help") {
        if (w + 1 >= args.size()) {
            std::cout << app.help();
            return 0;
        }
        if (auto* sub = subcommand(app, args[w + 1])) {
            std::cout << sub->help();
            return 0;
        }
        std::cerr << unknown_subcommand(app, args[w + 1]);
        return 2;
    }
    auto* sub = subcommand(app, word);
    if (!sub) {
        std::cerr << unknown_subcommand(app, word);
        return 2;
    }
    if (word == "exporter" || word == "device-plugin" || word == "labels" || word == "mps-control-daemon" ||
        word == "config-manager")
        if (auto bad = go_style_flags(app, *sub, args, w + 1); !bad.empty()) {
            std::cerr << bad << "\n";
            return 2;
        }
    return std::nullopt;
}

}  // namespace

int run(int argc, char** argv) {
    if (auto code = run_before_parser(argc, argv)) return *code;

    gpr_set_log_function(grpc_log_line);
    CLI::App app{"kgpu: the node side of NVIDIA GPUs in Kubernetes"};
    Commands commands;
    commands.add_to(app);

    std::vector<std::string> args(argv, argv + argc);
    if (auto code = answer_before_parsing(app, args)) return *code;
    std::vector<char*> rewritten;
    for (auto& a : args) rewritten.push_back(a.data());
    rewritten.push_back(nullptr);
    try {
        app.parse(argc, rewritten.data());
    } catch (const CLI::ExtrasError& e) {
        if (!commands.smi_cmd->parsed()) return app.exit(e) == 0 ? 0 : 2;
        std::cerr << smi_usage_error("kgpu smi", e.what());  // e.g. --query-gpu: say which modes exist
        return 2;
    } catch (const CLI::ParseError& e) {
        int code = app.exit(e);  // prints help / version / the error
        return code == 0 ? 0 : 2;
    }
    log::Level level;
    if (!log::parse_level(commands.log_level, level)) {
        std::cerr << "kgpu: --log-level: expected debug, info, warn, error or off, got '" << commands.log_level << "'\n";
        return 2;
    }
    log::set_level(level);
    return commands.dispatch(app);
}

}  // namespace kgpu::cli
