// The createContainer hooks of a CDI spec: the one place that decides which binary runs them
// and with which argv, so a spec can point at NVIDIA's nvidia-cdi-hook (or `nvidia-ctk hook`)
// today and at an installed kgpu (`kgpu hook <name>`) alike (nvidia-ctk v1.20's
// internal/discover/hooks.go: argv[0] is the binary's name, then `hook` for nvidia-ctk and
// kgpu, then the hook's name and arguments; every hook carries NVIDIA_CTK_DEBUG=<debug>).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kgpu::cdi {

// The hooks nvidia-ctk v1.20 knows, by their CLI names.
inline constexpr std::string_view kCreateSymlinks = "create-symlinks";
inline constexpr std::string_view kEnableCudaCompat = "enable-cuda-compat";
inline constexpr std::string_view kUpdateLdcache = "update-ldcache";
inline constexpr std::string_view kDisableDeviceNodeModification = "disable-device-node-modification";
inline constexpr std::string_view kUpdateApplicationProfile = "update-application-profile";
inline constexpr std::string_view kChmod = "chmod";  // off unless enabled (deprecated upstream)
// Whether `name` is one of the hooks above (what a spec's argv may name; `chain` is not one).
bool is_hook_name(std::string_view name);
// kgpu's own: several of the hooks above in one exec (`kgpu hook chain <hook> [args] + <hook>
// [args] ...`). Only kgpu's runtime writes it, and only when the hooks' binary is kgpu itself:
// CDI specs other runtimes read keep NVIDIA's one hook per step.
inline constexpr std::string_view kChain = "chain";
inline constexpr std::string_view kChainSeparator = "+";
// Those a spec gets by default, in nvidia-ctk's order.
inline constexpr std::array<std::string_view, 5> kDefaultHooks = {
    kCreateSymlinks, kEnableCudaCompat, kUpdateLdcache, kDisableDeviceNodeModification, kUpdateApplicationProfile};

struct HookOptions {
    std::string path = "/usr/bin/nvidia-cdi-hook";  // absolute (see resolve_hook_path)
    std::vector<std::string> disabled;              // hook names, or "all"
    std::vector<std::string> enabled;               // wins over disabled (for chmod)
    // update-ldcache --ldconfig-path, when set: a host path, with or without NVIDIA's config
    // spelling "@/sbin/ldconfig". The hook's argv always gets the plain path: NVIDIA's
    // nvidia-cdi-hook prepends the "@" itself (internal/ldconfig NewRunner: "@" + the flag), so
    // "@/sbin/ldconfig" there becomes "stat @/sbin/ldconfig" and the container fails; kgpu's
    // hook takes either spelling.
    std::string ldconfig_path;
    bool debug = false;                             // NVIDIA_CTK_DEBUG
};

// --nvidia-cdi-hook-path as nvidia-ctk resolves it: an absolute path is used as given; a name
// (default nvidia-cdi-hook) is looked up in PATH, then in /usr/local/kgpu (kgpu's hook from
// `kgpu runtime install`), falling back to /usr/bin/<name>.
std::string resolve_hook_path(std::string_view given);

class HookCreator {
public:
    explicit HookCreator(HookOptions options) : o_(std::move(options)) {}

    // The hook `name` with `args` (create-symlinks: --link per arg; update-ldcache: --folder
    // per arg; chmod: --mode 755 --path per arg), or nullopt when it is disabled or, for
    // create-symlinks and chmod, has no arguments. argv: [nvidia-ctk|kgpu, hook, name, ...] for
    // a binary of those names, else [<file name>, name, ...] (nvidia-ctk's rule), which kgpu runs
    // as that hook whatever its file is called (cli/app.cpp dispatches a hook name in argv[1]).
    std::optional<nlohmann::ordered_json> create(std::string_view name, const std::vector<std::string>& args = {}) const;

    bool disabled(std::string_view name) const;

private:
    HookOptions o_;
};

// `hooks` (a containerEdits "hooks" array) with each run of two or more consecutive
// createContainer hooks that share path and env, and whose argv is a known hook's (as
// HookCreator writes it), replaced by one `chain` hook that runs their steps in order: argv
// [<prefix>, chain, <hook 1> <args>, +, <hook 2> <args>, ...], where <prefix> is the hooks' own
// (argv[0], and `hook` for a binary named kgpu or nvidia-ctk). A hook with other keys (timeout),
// an argument that is the separator itself, or another hook name is left as it is.
// Each container start then pays for one exec of kgpu instead of one per step (issue #26).
nlohmann::ordered_json chain_hooks(const nlohmann::ordered_json& hooks);

}  // namespace kgpu::cdi
