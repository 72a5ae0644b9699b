#include "mig/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <regex>

#include <fmt/format.h>

namespace kgpu::mig {

namespace {

struct ConfigError {
    std::string what;
};

[[noreturn]] void fail(const std::string& where, const std::string& what) {
    throw ConfigError{where.empty() ? what : where + ": " + what};
}

unsigned parse_hex(const std::string& s, const std::string& where) {
    const std::string digits = s.size() > 2 ? s.substr(2) : "";
    if ((!s.starts_with("0x") && !s.starts_with("0X")) || digits.empty() || digits.size() > 8 ||
        digits.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
        fail(where, "'" + s + "' is not 0x<device id><vendor id> like 0x20B210DE");
    return static_cast<unsigned>(std::stoul(digits, nullptr, 16));
}

Entry parse_entry(const YAML::Node& n, const std::string& where) {
    if (!n.IsMap()) fail(where, "expected a map with devices, mig-enabled and mig-devices");
    Entry e;
    for (const auto& kv : n) {
        const std::string key = kv.first.as<std::string>();
        if (key != "device-filter" && key != "devices" && key != "mig-enabled" && key != "mig-devices")
            fail(where, "unexpected field: " + key);
    }
    if (const YAML::Node f = n["device-filter"]; f) {
        if (f.IsScalar()) e.device_filter.push_back(f.as<std::string>());
        else if (f.IsSequence()) for (const auto& v : f) e.device_filter.push_back(v.as<std::string>());
        else fail(where + ".device-filter", "expected a string or a list of strings");
        for (const std::string& id : e.device_filter) {
            const auto colon = id.find(':');
            parse_hex(id.substr(0, colon), where + ".device-filter");
            if (colon != std::string::npos) parse_hex(id.substr(colon + 1), where + ".device-filter");
        }
    }
    const YAML::Node d = n["devices"];
    if (!d) fail(where, "missing required field: devices");
    if (d.IsScalar()) {
        if (d.as<std::string>() != "all") fail(where + ".devices", "invalid string input: expected all or a list of GPU indices");
    } else if (d.IsSequence()) {
        e.devices.emplace();
        for (const auto& v : d) {
            try {
                const int i = v.as<int>();
                if (i < 0) throw std::invalid_argument("negative");
                e.devices->push_back(static_cast<unsigned>(i));
            } catch (const std::exception&) {
                fail(where + ".devices", "expected GPU indices (0, 1, ...)");
            }
        }
    } else {
        fail(where + ".devices", "expected all or a list of GPU indices");
    }
    const YAML::Node en = n["mig-enabled"];
    if (!en) fail(where, "missing required field: mig-enabled");
    try {
        e.mig_enabled = en.as<bool>();
    } catch (const std::exception&) {
        fail(where + ".mig-enabled", "expected true or false");
    }
    const YAML::Node md = n["mig-devices"];
    if (e.mig_enabled && !md) fail(where, "missing required field 'mig-devices' when 'mig-enabled' is true");
    if (md && !md.IsNull()) {
        if (!md.IsMap()) fail(where + ".mig-devices", "expected a map of MIG profile to count, like {\"1g.10gb\": 7}");
        bool any = false;
        for (const auto& kv : md) {
            const std::string profile = kv.first.as<std::string>();
            if (!valid_profile_name(profile))
                fail(where + ".mig-devices", "'" + profile + "' is not a MIG profile name like 1g.10gb, 3g.40gb or 1g.10gb+me");
            int count = -1;
            try {
                count = kv.second.as<int>();
            } catch (const std::exception&) {
            }
            if (count < 0) fail(where + ".mig-devices." + profile, "expected a count of 0 or more");
            any = any || count > 0;
            e.mig_devices[profile] = static_cast<unsigned>(count);
        }
        if (!e.mig_devices.empty() && !any) fail(where + ".mig-devices", "all counts for all MigProfiles are 0");
        if (!e.mig_enabled && !e.mig_devices.empty()) fail(where, "MIG devices included when 'mig-enabled' is false");
    }
    return e;
}

}  // namespace

bool valid_profile_name(const std::string& name) {
    if (name.size() > 64) return false;  // (and libstdc++'s regex recurses per character)
    static const std::regex re(R"(^([1-8]c\.)?[1-8]g\.[1-9][0-9]*gb(\+[a-z][a-z0-9.]*[a-z0-9](,[a-z][a-z0-9.]*[a-z0-9])*|-me)?$)");
    return std::regex_match(name, re);
}

Result<Config> parse_config(const std::string& text, const std::string& source) {
    try {
        const YAML::Node root = YAML::Load(text);
        if (!root.IsMap()) fail("", "expected a map with version: v1 and mig-configs");
        for (const auto& kv : root) {
            const std::string key = kv.first.as<std::string>();
            if (key != "version" && key != "mig-configs") fail("", "unexpected field: " + key);
        }
        if (!root["version"]) fail("", "unable to parse with missing 'version' field");
        if (root["version"].as<std::string>() != "v1") fail("version", "unknown version: " + root["version"].as<std::string>());
        const YAML::Node configs = root["mig-configs"];
        if (!configs) fail("", "missing required field: mig-configs");
        if (!configs.IsMap() || configs.size() == 0) fail("mig-configs", "at least one config is required");
        Config out;
        for (const auto& kv : configs) {
            const std::string name = kv.first.as<std::string>();
            const std::string where = "mig-configs." + name;
            if (!kv.second.IsSequence() || kv.second.size() == 0) fail(where, "at least one entry in '" + name + "' is required");
            std::vector<Entry> entries;
            for (size_t i = 0; i < kv.second.size(); ++i)
                entries.push_back(parse_entry(kv.second[i], fmt::format("{}[{}]", where, i)));
            out.configs[name] = std::move(entries);
        }
        return out;
    } catch (const ConfigError& e) {
        return std::unexpected(Error{Code::parse, source + ": " + e.what});
    } catch (const YAML::Exception& e) {
        return std::unexpected(Error{Code::parse, source + ": not YAML: " + e.what()});
    }
}

Result<std::vector<Entry>> select(const Config& config, const std::string& name) {
    if (name.empty()) {
        if (config.configs.size() == 1) return config.configs.begin()->second;
        return std::unexpected(Error{Code::invalid_argument,
                                     "missing required flag 'selected-config' when more than one config available"});
    }
    const auto it = config.configs.find(name);
    if (it == config.configs.end()) {
        std::string names;
        for (const auto& [n, _] : config.configs) names += (names.empty() ? "" : ", ") + n;
        return std::unexpected(Error{Code::not_found, "selected mig-config not present: " + name + " (the file has " + names + ")"});
    }
    return it->second;
}

bool matches(const Entry& e, unsigned index, unsigned device_id, unsigned subsystem_id) {
    if (e.devices && std::find(e.devices->begin(), e.devices->end(), index) == e.devices->end()) return false;
    if (e.device_filter.empty()) return true;
    for (const std::string& f : e.device_filter) {
        const auto colon = f.find(':');
        const unsigned id = static_cast<unsigned>(std::stoul(f.substr(2, colon == std::string::npos ? std::string::npos : colon - 2), nullptr, 16));
        if (id != device_id) continue;
        if (colon == std::string::npos) return true;
        if (static_cast<unsigned>(std::stoul(f.substr(colon + 3), nullptr, 16)) == subsystem_id) return true;
    }
    return false;
}

}  // namespace kgpu::mig
