#include "cli/hook.h"

#include <iostream>

#include <memory>
#include <optional>

#include <fmt/format.h>

#include "cdi/hooks.h"
#include "common/error.h"
#include "toolkit/hooks.h"

namespace kgpu::cli {

namespace {

void add_container_spec(CLI::App& c, HookOptions& o) {
    c.add_option("--container-spec", o.container_spec,
                 "The OCI container state file (default: read from stdin, as the runtime passes it)");
}

// The hooks' subcommands; with `only`, that one alone (a chain's step or a hook exec'd by runc
// builds no parser for the hooks it does not run: building them all was most of a step's CPU).
void add_hooks(CLI::App& parent, HookOptions& o, std::string_view only = {}) {
    auto want = [&](std::string_view name) { return only.empty() || only == name; };
    if (want("update-ldcache")) {
        auto* ld = parent.add_subcommand("update-ldcache", "Add folders to the container's linker cache (runs the host's ldconfig in the container's root)");
        ld->add_option("--folder", o.folders, "A folder to add to the linker's search path (repeatable)");
        ld->add_option("--ldconfig-path", o.ldconfig_path, "The host's ldconfig (an @ prefix is accepted)")->capture_default_str();
        add_container_spec(*ld, o);
    }
    if (want("create-symlinks")) {
        auto* sl = parent.add_subcommand("create-symlinks", "Create symlinks in the container");
        sl->add_option("--link", o.links, "<target>::<link> (repeatable); the link is replaced when it points elsewhere");
        add_container_spec(*sl, o);
    }
    if (want("enable-cuda-compat")) {
        auto* cc = parent.add_subcommand("enable-cuda-compat",
                                         "Put the image's CUDA forward-compatibility libraries first when the host driver is older");
        cc->add_option("--host-driver-version", o.host_driver_version, "The host's driver version (e.g. 550.54.15)");
        cc->add_option("--host-cuda-version", o.host_cuda_version, "The CUDA version the host driver supports (e.g. 12.4)");
        cc->add_option("--cuda-compat-container-root", o.compat_dir, "Where the compat libraries are in the container")
            ->capture_default_str();
        add_container_spec(*cc, o);
    }
    if (want("disable-device-node-modification")) {
        auto* dm = parent.add_subcommand("disable-device-node-modification",
                                         "Make NVML in the container never create device nodes (ModifyDeviceFiles: 0)");
        dm->add_option("--nvidia-params-path", o.params_path, "The host's NVIDIA driver parameters file")
            ->capture_default_str()
            ->group("");  // for tests; NVIDIA's hook has no such flag
        add_container_spec(*dm, o);
    }
    if (want("update-application-profile")) {
        auto* ap = parent.add_subcommand("update-application-profile",
                                         "Restrict EGL/Vulkan in the container to its GPUs (an application profile)");
        add_container_spec(*ap, o);
    }
    if (want("chmod")) {
        auto* ch = parent.add_subcommand("chmod", "Set the mode of paths in the container");
        ch->add_option("--path", o.paths, "A path in the container (repeatable)");
        ch->add_option("--mode", o.mode, "The mode, in octal (e.g. 755)");
        add_container_spec(*ch, o);
    }
    if (want(cdi::kChain)) {
        // Parsed by run_chain (its steps are hooks of their own); here for --help.
        parent.add_subcommand(std::string(cdi::kChain), "Several of these hooks in one exec: <hook> [args] + <hook> [args] ... "
                                                        "(kgpu's runtime writes it when the hooks' binary is kgpu)")
            ->allow_extras()
            ->prefix_command();
    }

    parent.add_flag("--debug,-d", o.debug, "Accepted for nvidia-cdi-hook compatibility");
    parent.add_flag("--quiet", o.quiet, "Accepted for nvidia-cdi-hook compatibility");
    parent.require_subcommand(1);
}

int report(std::string_view hook, const Status& st) {
    if (st) return 0;
    std::cerr << "kgpu hook " << hook << ": " << st.error().message << "\n";
    return 1;
}

// chmod --mode as an octal mode; nullopt (after saying why, as `who`) when it is not one.
std::optional<unsigned> chmod_mode(const std::string& text, std::string_view who = "kgpu hook chmod") {
    try {
        size_t used = 0;
        const unsigned long mode = std::stoul(text, &used, 8);
        if (used == text.size() && mode <= 07777) return static_cast<unsigned>(mode);
    } catch (const std::exception&) {
    }
    std::cerr << who << ": --mode '" << text << "': expected an octal mode such as 755\n";
    return std::nullopt;
}

int run_chain(const std::string& program, const std::vector<std::string>& args);

// One hook's step in the container's root.
Status run_step(const std::string& name, const HookOptions& o, const std::string& root) {
    if (name == "update-ldcache") return toolkit::update_ldcache(root, {o.folders, o.ldconfig_path});
    if (name == "create-symlinks") return toolkit::create_symlinks(root, o.links);
    if (name == "enable-cuda-compat") return toolkit::enable_cuda_compat(root, {o.host_driver_version, o.host_cuda_version, o.compat_dir});
    if (name == "disable-device-node-modification") return toolkit::disable_device_node_modification(root, o.params_path);
    if (name == "update-application-profile") return toolkit::update_application_profile(root);
    if (name == "chmod") {
        auto mode = chmod_mode(o.mode);
        if (!mode) return fail(Code::invalid_argument, "--mode '{}': expected an octal mode such as 755", o.mode);
        return toolkit::chmod_paths(root, o.paths, *mode);
    }
    return fail(Code::invalid_argument, "unknown hook '{}'", name);
}

}  // namespace

CLI::App* add_hook_command(CLI::App& app, HookOptions& o) {
    auto* hook = app.add_subcommand("hook", "createContainer hooks for CDI specs (also run as nvidia-cdi-hook)");
    add_hooks(*hook, o);
    return hook;
}

int run_hook(CLI::App& hook_cmd, const HookOptions& o) {
    auto* chosen = hook_cmd.get_subcommands().empty() ? nullptr : hook_cmd.get_subcommands().front();
    if (!chosen) return 2;
    const std::string name = chosen->get_name();
    if (name == cdi::kChain) return run_chain("kgpu hook", chosen->remaining());
    if (name == "chmod" && !chmod_mode(o.mode)) return 2;
    auto root = toolkit::load_container_root(o.container_spec);
    if (!root) return report(name, std::unexpected(root.error()));
    return report(name, run_step(name, o, *root));
}

namespace {

std::unique_ptr<CLI::App> hook_parser(const std::string& program, HookOptions& o, std::string_view only = {}) {
    auto app = std::make_unique<CLI::App>(program == "nvidia-cdi-hook" ? "nvidia-cdi-hook (kgpu): createContainer hooks for CDI specs"
                                                                       : "kgpu hook: createContainer hooks for CDI specs");
    app->name(program == "nvidia-cdi-hook" ? program : "kgpu hook");
    add_hooks(*app, o, only);
    return app;
}

// `chain [--container-spec FILE] <hook> [args] + <hook> [args] ...`: every step parsed first (a
// bad one refuses the lot, nothing done), the container state read once, then the steps in
// order; the first that fails ends the chain, naming its position and hook.
int run_chain(const std::string& program, const std::vector<std::string>& args) {
    const std::string me = program == "nvidia-cdi-hook" ? "nvidia-cdi-hook chain" : "kgpu hook chain";
    size_t i = 0;
    std::string container_spec;
    if (i < args.size() && (args[i] == "--help" || args[i] == "-h")) {
        std::cout << "Usage: " << me << " [--container-spec FILE] <hook> [args] [+ <hook> [args]]...\n"
                  << "Runs several hooks in one exec, in order, on one read of the container's state (kgpu's runtime "
                     "writes it when the hooks' binary is kgpu).\n";
        return 0;
    }
    if (i < args.size() && args[i].starts_with("--container-spec=")) {
        container_spec = args[i].substr(std::string_view("--container-spec=").size());
        ++i;
    } else if (i + 1 < args.size() && args[i] == "--container-spec") {
        container_spec = args[i + 1];
        i += 2;
    }
    std::vector<std::vector<std::string>> steps(1);
    for (; i < args.size(); ++i) {
        if (args[i] == cdi::kChainSeparator) steps.emplace_back();
        else steps.back().push_back(args[i]);
    }
    struct Step {
        std::string name;
        HookOptions options;
    };
    std::vector<Step> parsed;
    for (size_t n = 0; n < steps.size(); ++n) {
        const std::string where = fmt::format("{}: step {}", me, n + 1);
        if (steps[n].empty() || !cdi::is_hook_name(steps[n].front())) {
            std::cerr << where << ": expected a hook's name (create-symlinks, enable-cuda-compat, update-ldcache, "
                      << "disable-device-node-modification, update-application-profile, chmod)"
                      << (steps[n].empty() ? ", found nothing" : ", found '" + steps[n].front() + "'") << "\n";
            return 2;
        }
        Step s;
        auto app = hook_parser(program, s.options, steps[n].front());
        std::vector<std::string> reversed(steps[n].rbegin(), steps[n].rend());
        try {
            app->parse(reversed);
        } catch (const CLI::CallForHelp&) {
            const auto chosen = app->get_subcommands();
            std::cout << (chosen.empty() ? app->help() : chosen.front()->help());
            return 0;
        } catch (const CLI::ParseError& e) {
            std::cerr << where << " (" << steps[n].front() << "): " << e.what() << "\n";
            return 2;
        }
        if (!s.options.container_spec.empty()) {
            std::cerr << where << ": --container-spec goes before the first hook, once for the chain\n";
            return 2;
        }
        s.name = app->get_subcommands().front()->get_name();
        if (s.name == "chmod" && !chmod_mode(s.options.mode, where + " (chmod)")) return 2;
        parsed.push_back(std::move(s));
    }
    auto root = toolkit::load_container_root(container_spec);
    if (!root) return report("chain", std::unexpected(root.error()));
    for (size_t n = 0; n < parsed.size(); ++n)
        if (auto st = run_step(parsed[n].name, parsed[n].options, *root); !st) {
            std::cerr << me << ": step " << n + 1 << " (" << parsed[n].name << "): " << st.error().message << "\n";
            return 1;
        }
    return 0;
}

}  // namespace

int run_hook_argv(const std::string& program, const std::vector<std::string>& args) {
    // nvidia-cdi-hook's global flags may come first; they change nothing here.
    size_t first = 0;
    while (first < args.size() && (args[first] == "--debug" || args[first] == "-d" || args[first] == "--quiet")) ++first;
    if (first < args.size() && args[first] == cdi::kChain) return run_chain(program, {args.begin() + first + 1, args.end()});
    HookOptions o;
    // A hook's name first (as runc runs it): only its parser; anything else (--help, a typo): all,
    // so that the help and the error list them.
    const bool named = first < args.size() && cdi::is_hook_name(args[first]) && args[first] != cdi::kChain;
    auto parser = hook_parser(program, o, named ? std::string_view(args[first]) : std::string_view());
    CLI::App& app = *parser;
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11's vector form takes them reversed
    try {
        app.parse(reversed);
    } catch (const CLI::ParseError& e) {
        int code = app.exit(e);
        return code == 0 ? 0 : 2;
    }
    return run_hook(app, o);
}

}  // namespace kgpu::cli
