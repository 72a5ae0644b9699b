#include "cli/hook.h"

#include <iostream>

#include "toolkit/hooks.h"

namespace kgpu::cli {

namespace {

void add_container_spec(CLI::App& c, HookOptions& o) {
    c.add_option("--container-spec", o.container_spec,
                 "The OCI container state file (default: read from stdin, as the runtime passes it)");
}

void add_hooks(CLI::App& parent, HookOptions& o) {
    auto* ld = parent.add_subcommand("update-ldcache", "Add folders to the container's linker cache (runs the host's ldconfig in the container's root)");
    ld->add_option("--folder", o.folders, "A folder to add to the linker's search path (repeatable)");
    ld->add_option("--ldconfig-path", o.ldconfig_path, "The host's ldconfig (an @ prefix is accepted)")->capture_default_str();
    add_container_spec(*ld, o);

    auto* sl = parent.add_subcommand("create-symlinks", "Create symlinks in the container");
    sl->add_option("--link", o.links, "<target>::<link> (repeatable); the link is replaced when it points elsewhere");
    add_container_spec(*sl, o);

    auto* cc = parent.add_subcommand("enable-cuda-compat",
                                     "Put the image's CUDA forward-compatibility libraries first when the host driver is older");
    cc->add_option("--host-driver-version", o.host_driver_version, "The host's driver version (e.g. 550.54.15)");
    cc->add_option("--host-cuda-version", o.host_cuda_version, "The CUDA version the host driver supports (e.g. 12.4)");
    cc->add_option("--cuda-compat-container-root", o.compat_dir, "Where the compat libraries are in the container")
        ->capture_default_str();
    add_container_spec(*cc, o);

    auto* dm = parent.add_subcommand("disable-device-node-modification",
                                     "Make NVML in the container never create device nodes (ModifyDeviceFiles: 0)");
    dm->add_option("--nvidia-params-path", o.params_path, "The host's NVIDIA driver parameters file")
        ->capture_default_str()
        ->group("");  // for tests; NVIDIA's hook has no such flag
    add_container_spec(*dm, o);

    auto* ap = parent.add_subcommand("update-application-profile",
                                     "Restrict EGL/Vulkan in the container to its GPUs (an application profile)");
    add_container_spec(*ap, o);

    auto* ch = parent.add_subcommand("chmod", "Set the mode of paths in the container");
    ch->add_option("--path", o.paths, "A path in the container (repeatable)");
    ch->add_option("--mode", o.mode, "The mode, in octal (e.g. 755)");
    add_container_spec(*ch, o);

    parent.add_flag("--debug,-d", o.debug, "Accepted for nvidia-cdi-hook compatibility");
    parent.add_flag("--quiet", o.quiet, "Accepted for nvidia-cdi-hook compatibility");
    parent.require_subcommand(1);
}

int report(std::string_view hook, const Status& st) {
    if (st) return 0;
    std::cerr << "kgpu hook " << hook << ": " << st.error().message << "\n";
    return 1;
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
    auto root = toolkit::load_container_root(o.container_spec);
    if (!root) return report(name, std::unexpected(root.error()));
    if (name == "update-ldcache") return report(name, toolkit::update_ldcache(*root, {o.folders, o.ldconfig_path}));
    if (name == "create-symlinks") return report(name, toolkit::create_symlinks(*root, o.links));
    if (name == "enable-cuda-compat")
        return report(name, toolkit::enable_cuda_compat(*root, {o.host_driver_version, o.host_cuda_version, o.compat_dir}));
    if (name == "disable-device-node-modification")
        return report(name, toolkit::disable_device_node_modification(*root, o.params_path));
    if (name == "update-application-profile") return report(name, toolkit::update_application_profile(*root));
    if (name == "chmod") {
        unsigned mode = 0;
        try {
            size_t used = 0;
            mode = static_cast<unsigned>(std::stoul(o.mode, &used, 8));
            if (used != o.mode.size() || mode > 07777) throw std::invalid_argument("range");
        } catch (const std::exception&) {
            std::cerr << "kgpu hook chmod: --mode '" << o.mode << "': expected an octal mode such as 755\n";
            return 2;
        }
        return report(name, toolkit::chmod_paths(*root, o.paths, mode));
    }
    return 2;
}

int run_hook_argv(const std::string& program, const std::vector<std::string>& args) {
    HookOptions o;
    CLI::App app{program == "nvidia-cdi-hook" ? "nvidia-cdi-hook (kgpu): createContainer hooks for CDI specs"
                                              : "kgpu hook: createContainer hooks for CDI specs"};
    app.name(program == "nvidia-cdi-hook" ? program : "kgpu hook");
    add_hooks(app, o);
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
