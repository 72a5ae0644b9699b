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

bool is_hook_name(std::string_view name) {
    return name == kChmod || std::find(kDefaultHooks.begin(), kDefaultHooks.end(), name) != kDefaultHooks.end();
}

namespace {

// Where the hook's name is in its argv (1, or 2 after `hook`), or 0 when the hook is not one
// `chain` can take.
size_t step_at(const nlohmann::ordered_json& h) {
    if (!h.is_object() || h.size() != 4 || h.value("hookName", "") != "createContainer" || !h.contains("path") ||
        !h["path"].is_string() || !h.contains("env") || !h["env"].is_array())
        return 0;
    const auto args = h.find("args");
    if (args == h.end() || !args->is_array() || args->size() < 2) return 0;
    for (const auto& a : *args)
        if (!a.is_string() || a.get<std::string>() == kChainSeparator) return 0;
    const std::string base = fs::path(h["path"].get<std::string>()).filename().string();
    const size_t at = (base == "kgpu" || base == "nvidia-ctk") ? 2 : 1;
    if (at == 2 && (*args)[1] != "hook") return 0;
    if (args->size() <= at || !is_hook_name((*args)[at].get<std::string>())) return 0;
    return at;
}

}  // namespace

nlohmann::ordered_json chain_hooks(const nlohmann::ordered_json& hooks) {
    if (!hooks.is_array()) return hooks;
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (size_t i = 0; i < hooks.size();) {
        const size_t at = step_at(hooks[i]);
        size_t end = i + 1;
        if (at != 0)
            while (end < hooks.size() && step_at(hooks[end]) == at && hooks[end]["path"] == hooks[i]["path"] &&
                   hooks[end]["env"] == hooks[i]["env"] && hooks[end]["args"][0] == hooks[i]["args"][0])
                ++end;
        if (end - i < 2) {
            out.push_back(hooks[i]);
            i = end;
            continue;
        }
        nlohmann::ordered_json chained = hooks[i];
        auto& args = chained["args"];
        args = nlohmann::ordered_json::array();
        for (size_t k = 0; k < at; ++k) args.push_back(hooks[i]["args"][k]);
        args.push_back(kChain);
        for (size_t j = i; j < end; ++j) {
            if (j > i) args.push_back(kChainSeparator);
            const auto& a = hooks[j]["args"];
            for (size_t k = at; k < a.size(); ++k) args.push_back(a[k]);
        }
        out.push_back(std::move(chained));
        i = end;
    }
    return out;
}

}  // namespace kgpu::cdi
