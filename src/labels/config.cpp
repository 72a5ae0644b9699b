#include "labels/config.h"

#include <yaml-cpp/yaml.h>

#include <set>

#include "common/files.h"

namespace kgpu::labels {

namespace {

std::string where(const std::filesystem::path& path, const YAML::Node& n) {
    return fmt::format("{}:{}", path.string(), n.Mark().line + 1);
}

Status check_keys(const std::filesystem::path& path, const YAML::Node& map, const std::set<std::string>& allowed,
                  std::string_view section) {
    if (!map.IsMap()) return fail(Code::parse, "{}: {} must be a mapping", where(path, map), section);
    for (const auto& kv : map) {
        const auto key = kv.first.as<std::string>();
        if (!allowed.contains(key))
            return fail(Code::parse, "{}: unknown key '{}' in {}", where(path, kv.first), key, section);
    }
    return {};
}

}  // namespace

Result<PluginConfig> read_plugin_config(const std::filesystem::path& path) {
    auto text = files::read(path);
    if (!text) return std::unexpected(text.error().context("config file"));
    PluginConfig cfg;
    try {
        YAML::Node root = YAML::Load(*text);
        if (!root.IsMap()) return fail(Code::parse, "{}: expected a mapping with version: v1", path.string());
        if (auto v = root["version"]; v && v.as<std::string>() != "v1")
            return fail(Code::parse, "{}: version '{}': expected v1", where(path, v), v.as<std::string>());
        if (auto flags = root["flags"]; flags && flags["migStrategy"]) {
            auto s = parse_mig_strategy(flags["migStrategy"].as<std::string>());
            if (!s) return fail(Code::parse, "{}: flags.migStrategy: {}", where(path, flags["migStrategy"]), s.error().message);
            cfg.mig_strategy = *s;
        }
        YAML::Node sharing = root["sharing"];
        if (!sharing) return cfg;
        if (auto st = check_keys(path, sharing, {"timeSlicing", "mps"}, "sharing"); !st) return std::unexpected(st.error());
        if (sharing["timeSlicing"] && sharing["mps"])
            return fail(Code::parse, "{}: sharing: timeSlicing and mps cannot both be set", where(path, sharing));
        const bool ts = static_cast<bool>(sharing["timeSlicing"]);
        YAML::Node section = ts ? sharing["timeSlicing"] : sharing["mps"];
        if (!section) return cfg;
        const std::string name = ts ? "sharing.timeSlicing" : "sharing.mps";
        if (auto st = check_keys(path, section, {"renameByDefault", "failRequestsGreaterThanOne", "resources"}, name); !st)
            return std::unexpected(st.error());
        cfg.sharing.strategy = ts ? "time-slicing" : "mps";
        if (section["renameByDefault"]) cfg.sharing.rename_by_default = section["renameByDefault"].as<bool>();
        for (const auto& r : section["resources"]) {
            if (auto st = check_keys(path, r, {"name", "rename", "devices", "replicas"}, name + ".resources"); !st)
                return std::unexpected(st.error());
            if (!r["name"] || !r["replicas"])
                return fail(Code::parse, "{}: {}.resources: each entry needs name and replicas", where(path, r), name);
            const auto replicas = r["replicas"].as<int>();
            if (replicas < 2)
                return fail(Code::parse, "{}: replicas {}: expected at least 2", where(path, r["replicas"]), replicas);
            cfg.sharing.replicas[r["name"].as<std::string>()] = static_cast<unsigned>(replicas);
        }
    } catch (const YAML::Exception& e) {
        return fail(Code::parse, "{}:{}: {}", path.string(), e.mark.line + 1, e.msg);
    }
    return cfg;
}

}  // namespace kgpu::labels
