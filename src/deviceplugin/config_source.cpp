// Per-node configs by node label (config_source.h).
#include "deviceplugin/config_source.h"

#include <cctype>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kgpu::deviceplugin {

namespace fs = std::filesystem;

Result<std::set<std::string>> config_names(const std::string& srcdir) {
    std::error_code ec;
    fs::directory_iterator it(srcdir, ec);
    if (ec) return fail(Code::not_found, "config directory {} (CONFIG_FILE_SRCDIR): {}", srcdir, ec.message());
    std::set<std::string> out;
    for (const auto& e : it) {
        const std::string name = e.path().filename().string();
        if (name.starts_with(".")) continue;
        if (e.is_regular_file(ec)) out.insert(name);  // follows links (ConfigMap keys are links into ..data)
    }
    return out;
}

Status check_fallbacks(const std::vector<std::string>& fallbacks) {
    for (const auto& f : fallbacks)
        if (f != "named" && f != "single" && f != "empty")
            return fail(Code::invalid_argument, "FALLBACK_STRATEGIES: unknown fallback strategy '{}' (expected named, single or empty)", f);
    return {};
}

Result<ConfigChoice> choose_config(const ConfigSource& source, const std::set<std::string>& names, const std::string& label) {
    if (auto st = check_fallbacks(source.fallbacks); !st) return std::unexpected(st.error());
    ConfigChoice c;
    auto pick = [&](const std::string& name, std::string why) {
        c.name = name;
        c.path = name.empty() ? std::string() : (fs::path(source.srcdir) / name).string();
        c.why = std::move(why);
        return c;
    };
    if (!label.empty()) {
        if (names.contains(label)) return pick(label, fmt::format("node label {}={}", source.node_label, label));
        c.warnings.push_back(fmt::format("node label {}={}: no config of that name in {} (it has: {}); using the default",
                                         source.node_label, label, source.srcdir, fmt::join(names, ", ")));
    }
    if (!source.default_config.empty()) {
        if (names.contains(source.default_config))
            return pick(source.default_config, fmt::format("the default config (DEFAULT_CONFIG={})", source.default_config));
        c.warnings.push_back(fmt::format("DEFAULT_CONFIG={}: no config of that name in {}", source.default_config, source.srcdir));
    }
    for (const auto& f : source.fallbacks) {
        if (f == "named" && names.contains("default")) return pick("default", "fallback named (a config called default)");
        if (f == "single" && names.size() == 1) return pick(*names.begin(), "fallback single (the only config)");
        if (f == "empty") return pick("", "fallback empty (no config file: the built-in defaults)");
    }
    return fail(Code::invalid_argument,
                "no config for this node: the node label {} is {}, DEFAULT_CONFIG is {}, and the fallbacks [{}] found none "
                "among [{}] in {}",
                source.node_label, label.empty() ? "absent" : "'" + label + "'",
                source.default_config.empty() ? "not set" : "'" + source.default_config + "'", fmt::join(source.fallbacks, ", "),
                fmt::join(names, ", "), source.srcdir);
}

bool valid_label_value(const std::string& v) {
    if (v.size() > 63) return false;
    if (v.empty()) return true;
    auto alnum = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) != 0; };
    if (!alnum(v.front()) || !alnum(v.back())) return false;
    for (char ch : v)
        if (!alnum(ch) && ch != '-' && ch != '_' && ch != '.') return false;
    return true;
}

}  // namespace kgpu::deviceplugin
