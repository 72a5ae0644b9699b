#include "cdi/hooks.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "common/strings.h"

namespace kgpu::cdi {

namespace fs = std::filesystem;

std::string resolve_hook_path(std::string_view given) {
    if (!given.empty() && given.front() == '/') return std::string(given);
    const std::string name = given.empty() ? "nvidia-cdi-hook" : fs::path(given).filename().string();
    const std::string fallback = "/usr/bin/" + name;
    std::vector<std::string> dirs;
    if (const char* path = std::getenv("PATH"))
        for (auto d : strings::split(path, ':'))
            if (!d.empty()) dirs.emplace_back(d);
    for (const char* d : {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}) dirs.emplace_back(d);
    // Last, where `kgpu runtime install` puts kgpu's hook (a node without NVIDIA's toolkit).
    dirs.emplace_back("/usr/local/kgpu");
    for (const auto& d : dirs) {
        const fs::path p = fs::path(d) / name;
        std::error_code ec;
        if (p.is_absolute() && fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0) return p.string();
    }
    return fallback;
}

bool HookCreator::disabled(std::string_view name) const {
    auto has = [](const std::vector<std::string>& v, std::string_view n) { return std::find(v.begin(), v.end(), n) != v.end(); };
    if (has(o_.enabled, name)) return false;
    if (has(o_.disabled, name) || has(o_.disabled, "all")) return true;
    return name == kChmod;  // off by default
}

std::optional<nlohmann::ordered_json> HookCreator::create(std::string_view name, const std::vector<std::string>& args) const {
    if (disabled(name)) return std::nullopt;
    if ((name == kCreateSymlinks || name == kChmod) && args.empty()) return std::nullopt;
    const std::string base = fs::path(o_.path).filename().string();
    std::vector<std::string> argv = {base};
    // nvidia-ctk and kgpu carry the hooks as subcommands of `hook`.
    if (base == "nvidia-ctk" || base == "kgpu") argv.emplace_back("hook");
    argv.emplace_back(name);
    if (name == kCreateSymlinks) {
        for (const auto& a : args) argv.insert(argv.end(), {"--link", a});
    } else if (name == kChmod) {
        argv.insert(argv.end(), {"--mode", "755"});
        for (const auto& a : args) argv.insert(argv.end(), {"--path", a});
    } else if (name == kUpdateLdcache) {
        if (!o_.ldconfig_path.empty()) {
            std::string_view ld = o_.ldconfig_path;
            if (ld.starts_with('@')) ld.remove_prefix(1);  // the plain host path both hooks take
            argv.insert(argv.end(), {"--ldconfig-path", std::string(ld)});
        }
        for (const auto& a : args) argv.insert(argv.end(), {"--folder", a});
    } else {
        argv.insert(argv.end(), args.begin(), args.end());
    }
    nlohmann::ordered_json j;
    j["hookName"] = "createContainer";
    j["path"] = o_.path;
    j["args"] = argv;
    j["env"] = nlohmann::ordered_json::array({std::string("NVIDIA_CTK_DEBUG=") + (o_.debug ? "true" : "false")});
    return j;
}

}  // namespace kgpu::cdi
