// The device plugin's config file (NVIDIA's v1 schema): the YAML read section by section into a
// Config, with located errors and unknown keys collected. Environment, flags and the checks
// after the merge are in config.cpp.
#include "deviceplugin/config.h"

#include <initializer_list>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "cdi/spec.h"
#include "common/files.h"
#include "common/strings.h"
#include "common/yaml_walker.h"

namespace kgpu::deviceplugin {

// The file's sections, read with common/yaml_walker.h (located errors; unknown keys collected).
namespace {

using yaml::ParseError;
using yaml::Walker;

std::set<unsigned> xids(const Walker& w, const YAML::Node& node, const std::string& path) {
    if (!node.IsSequence()) w.error(node, path, "expected a list of XIDs");
    std::set<unsigned> out;
    for (const auto& item : node) out.insert(w.number(item, path, 1, 65535));
    return out;
}

// A flags.gfd value of each type the table has.
void read_gfd(const Walker& w, const YAML::Node& v, const std::string& p, std::optional<bool>& out) { out = w.boolean(v, p); }
void read_gfd(const Walker& w, const YAML::Node& v, const std::string& p, std::optional<std::string>& out) {
    out = w.scalar(v, p);
}
void read_gfd(const Walker& w, const YAML::Node& v, const std::string& p, std::optional<std::chrono::seconds>& out) {
    out = w.value<std::chrono::seconds>(v, p, parse_duration);
}

GfdFlags parse_gfd(const Walker& w, const YAML::Node& node) {
    const std::string path = "flags.gfd";
#define KGPU_GFD_KEY(field, type, key, ...) key,
    w.expect_map(node, path, {KGPU_GFD_OPTIONS(KGPU_GFD_KEY)});
#undef KGPU_GFD_KEY
    GfdFlags g;
    for (const auto& kv : node) {
        const std::string key = kv.first.as<std::string>();
        const std::string p = Walker::join(path, key);
        const YAML::Node& v = kv.second;
        if (Walker::unset(v)) continue;
#define KGPU_GFD_READ(field, type, name, ...) \
        if (key == name) read_gfd(w, v, p, g.field);
        KGPU_GFD_OPTIONS(KGPU_GFD_READ)
#undef KGPU_GFD_READ
    }
    return g;
}

// A table setting's value in the file: its codec's text, or the YAML type the codec asks for.
template <class Codec>
typename Codec::type read_option(const Walker& w, const YAML::Node& v, const std::string& p, Codec) {
    return w.value<typename Codec::type>(v, p, &Codec::parse);
}
bool read_option(const Walker& w, const YAML::Node& v, const std::string& p, option::Bool) { return w.boolean(v, p); }
std::optional<bool> read_option(const Walker& w, const YAML::Node& v, const std::string& p, option::MaybeBool) {
    return w.boolean(v, p);
}
std::vector<DeviceListStrategy> read_option(const Walker& w, const YAML::Node& v, const std::string& p,
                                            option::DeviceLists) {
    if (!v.IsSequence()) return w.value<std::vector<DeviceListStrategy>>(v, p, parse_device_list_strategies);
    if (v.size() == 0) w.error(v, p, "expected at least one strategy");
    std::vector<DeviceListStrategy> list;
    for (const auto& item : v) {
        auto s = w.value<DeviceListStrategy>(item, p, parse_device_list_strategy);
        if (std::find(list.begin(), list.end(), s) == list.end()) list.push_back(s);
    }
    return list;
}

// The keys allowed directly under `section` ("flags", "flags.plugin"), in table order: the
// table's keys there and the names of its subsections ("plugin"), then the `extra` subsections
// the table has no keys of, after the table's subsections.
std::vector<std::string_view> section_keys(std::string_view section, std::initializer_list<std::string_view> extra) {
    std::vector<std::string_view> out;
    size_t after_subsections = 0;
    for_each_option([&](const OptionNames& names, auto...) {
        for (std::string_view key : strings::split(names.keys, ',')) {
            if (key.size() <= section.size() || !key.starts_with(section) || key[section.size()] != '.') continue;
            key.remove_prefix(section.size() + 1);
            const bool subsection = key.find('.') != std::string_view::npos;
            key = key.substr(0, key.find('.'));
            if (std::find(out.begin(), out.end(), key) != out.end()) continue;
            out.push_back(key);
            if (subsection) after_subsections = out.size();
        }
    });
    for (std::string_view key : extra)
        if (std::find(out.begin(), out.end(), key) == out.end())
            out.insert(out.begin() + static_cast<std::ptrdiff_t>(after_subsections++), key);
    return out;
}

// Sets the table setting whose file key is `path`; false when none has it.
bool read_table_key(const Walker& w, const YAML::Node& v, const std::string& path, Config& c) {
    bool found = false;
    for_each_option([&](const OptionNames& names, auto codec, auto field, auto...) {
        if (found) return;
        for (std::string_view key : strings::split(names.keys, ','))
            if (key == path) {
                c.*field = read_option(w, v, path, codec);
                c.file_keys.emplace(names.keys.substr(0, names.keys.find(',')));
                found = true;
                return;
            }
    });
    return found;
}

// A section of `flags:` ("flags", "flags.plugin"): the table's keys and `subsections` it has no
// keys of (flags.gfd, parse_gfd).
void parse_flag_section(const Walker& w, const YAML::Node& node, const std::string& path, Config& c,
                        std::initializer_list<std::string_view> subsections) {
    w.expect_map(node, path, section_keys(path, subsections));
    for (const auto& kv : node) {
        const std::string key = kv.first.as<std::string>();
        const std::string p = Walker::join(path, key);
        const YAML::Node& v = kv.second;
        if (Walker::unset(v)) continue;
        if (path == "flags" && key == "plugin") parse_flag_section(w, v, p, c, {});
        else if (path == "flags" && key == "gfd") c.gfd = parse_gfd(w, v);
        else read_table_key(w, v, p, c);
    }
}

void parse_imex(const Walker& w, const YAML::Node& node, Config& c) {
    const std::string path = "imex";
    w.expect_map(node, path, {"channelIDs", "required"});
    if (node.IsNull()) return;
    if (const YAML::Node ids = node["channelIDs"]; !Walker::unset(ids)) {
        if (!ids.IsSequence()) w.error(ids, path + ".channelIDs", "expected a list of channel IDs: [] or [0]");
        std::vector<unsigned> list;
        for (const auto& item : ids) list.push_back(w.number(item, path + ".channelIDs", 0, 2047));
        if (auto st = validate_imex_channel_ids(list); !st) w.error(ids, path + ".channelIDs", st.error().message);
        c.imex.channel_ids = std::move(list);
    }
    if (const YAML::Node r = node["required"]; !Walker::unset(r)) c.imex.required = w.boolean(r, path + ".required");
}

void parse_health(const Walker& w, const YAML::Node& node, Config& c) {
    const std::string path = "health";
    w.expect_map(node, path, {"disabled", "ignoredXids", "recoverableXids", "resetXids", "recoveryPeriod"});
    for (const auto& kv : node) {
        const std::string key = kv.first.as<std::string>();
        const std::string p = Walker::join(path, key);
        const YAML::Node& v = kv.second;
        if (key == "disabled") c.health.disabled = w.boolean(v, p);
        else if (key == "ignoredXids") c.health.ignored_xids = xids(w, v, p);
        else if (key == "recoverableXids") c.health.recoverable_xids = xids(w, v, p);
        else if (key == "resetXids") c.health.reset_xids = xids(w, v, p);
        else if (key == "recoveryPeriod") {
            auto d = w.value<std::chrono::seconds>(v, p, parse_duration);
            if (d < std::chrono::seconds(1)) w.error(v, p, "expected a duration of at least 1s");
            c.health.recovery_period = d;
        }
    }
    // An XID in two classes is a mistake worth pointing at.
    auto check = [&](const std::set<unsigned>& a, const std::set<unsigned>& b, const char* an, const char* bn) {
        for (unsigned x : a)
            if (b.contains(x))
                w.error(node, path, fmt::format("XID {} is in both {} and {}", x, an, bn));
    };
    check(c.health.ignored_xids, c.health.recoverable_xids, "ignoredXids", "recoverableXids");
    check(c.health.ignored_xids, c.health.reset_xids, "ignoredXids", "resetXids");
    check(c.health.recoverable_xids, c.health.reset_xids, "recoverableXids", "resetXids");
}

std::vector<ResourcePattern> parse_patterns(const Walker& w, const YAML::Node& node, const std::string& path) {
    if (node.IsNull()) return {};
    if (!node.IsSequence()) w.error(node, path, "expected a list of {pattern, name}");
    std::vector<ResourcePattern> out;
    size_t i = 0;
    for (const auto& item : node) {
        const std::string ip = fmt::format("{}[{}]", path, i++);
        w.expect_map(item, ip, {"pattern", "name"});
        if (!item.IsMap()) w.error(item, ip, "expected {pattern, name}");
        ResourcePattern rp;
        // NVIDIA's plugin requires both fields.
        if (Walker::unset(item["pattern"])) w.error(item, ip + ".pattern", "missing: expected a pattern such as \"*A100*\"");
        if (Walker::unset(item["name"])) w.error(item, ip + ".name", "missing: expected a resource name such as gpu");
        rp.pattern = w.scalar(item["pattern"], ip + ".pattern");
        if (rp.pattern.empty()) w.error(item["pattern"], ip + ".pattern", "expected a non-empty pattern");
        const std::string name = w.scalar(item["name"], ip + ".name");
        if (name.empty()) w.error(item["name"], ip + ".name", "expected a non-empty resource name");
        rp.name = qualify_resource_name(name);
        if (auto st = validate_resource_name(rp.name); !st) w.error(item["name"], ip + ".name", st.error().message);
        out.push_back(std::move(rp));
    }
    return out;
}

void parse_resources(const Walker& w, const YAML::Node& node, Config& c) {
    w.expect_map(node, "resources", {"gpus", "mig"});
    if (node.IsNull()) return;
    if (node["gpus"]) c.resources.gpus = parse_patterns(w, node["gpus"], "resources.gpus");
    if (node["mig"]) c.resources.mig = parse_patterns(w, node["mig"], "resources.mig");
}

ReplicatedResource parse_replicated(const Walker& w, const YAML::Node& item, const std::string& path) {
    w.expect_map(item, path, {"name", "rename", "devices", "replicas"});
    ReplicatedResource r;
    r.line = Walker::line_of(item);
    auto resource_name = [&](const YAML::Node& v, const std::string& p) {
        std::string n = qualify_resource_name(w.scalar(v, p));
        if (auto st = validate_resource_name(n); !st) w.error(v, p, st.error().message);
        return n;
    };
    if (!item["name"] || w.scalar(item["name"], path + ".name").empty())
        w.error(item, path + ".name", "expected the name of a resource to share (e.g. nvidia.com/gpu)");
    r.name = resource_name(item["name"], path + ".name");
    if (item["rename"] && !item["rename"].Scalar().empty()) {
        r.rename = resource_name(item["rename"], path + ".rename");
        r.rename_line = Walker::line_of(item["rename"]);
    }
    if (!item["replicas"]) w.error(item, path + ".replicas", "expected a number of replicas (>= 2)");
    {
        const YAML::Node rn = item["replicas"];
        const std::string text = w.scalar(rn, path + ".replicas", "a number");
        unsigned v = 0;
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc{} || ptr != text.data() + text.size() || v > 65535)
            w.error(rn, path + ".replicas", fmt::format("expected a number 2..65535, got '{}'", text));
        if (v < 2)
            w.error(rn, path + ".replicas",
                    fmt::format("replicas must be at least 2, got {} (leave the resource out to not share it)", v));
        r.replicas = v;
    }
    if (const YAML::Node d = item["devices"]) {
        const std::string dp = path + ".devices";
        r.devices_line = Walker::line_of(d);
        if (d.IsScalar()) {
            if (d.Scalar() == "all") {
                r.all_devices = true;
            } else {
                r.all_devices = false;
                r.device_count = w.number(d, dp, 1, 65535);
            }
        } else if (d.IsSequence()) {
            r.all_devices = false;
            for (const auto& id : d) {
                std::string s = w.scalar(id, dp);
                if (s.empty()) w.error(id, dp, "expected a device index, i:j or UUID");
                if (std::find(r.device_ids.begin(), r.device_ids.end(), s) != r.device_ids.end())
                    w.error(id, dp, fmt::format("device '{}' is listed twice", s));
                r.device_ids.push_back(std::move(s));
                r.device_lines.push_back(Walker::line_of(id));
            }
            if (r.device_ids.empty()) w.error(d, dp, "expected at least one device");
        } else {
            w.error(d, dp, "expected \"all\", a count, or a list of device indices / UUIDs");
        }
    }
    return r;
}

// `sharing.timeSlicing` and `sharing.mps` share their shape (NVIDIA's ReplicatedResources):
// `resources` is required and not empty.
ReplicatedResources parse_replicated_resources(const Walker& w, const YAML::Node& node, const std::string& path,
                                               bool fail_default, std::vector<std::string>& warnings) {
    w.expect_map(node, path, {"renameByDefault", "failRequestsGreaterThanOne", "resources"});
    ReplicatedResources t;
    t.line = Walker::line_of(node);
    t.fail_requests_greater_than_one = fail_default;
    if (!Walker::unset(node["renameByDefault"]))
        t.rename_by_default = w.boolean(node["renameByDefault"], path + ".renameByDefault");
    if (const YAML::Node f = node["failRequestsGreaterThanOne"]; !Walker::unset(f)) {
        const bool v = w.boolean(f, path + ".failRequestsGreaterThanOne");
        t.fail_requests_set = true;
        // MPS (fail_default): NVIDIA's NewConfig sets it to true whatever the file says, and its
        // ValidateRequest refuses more than one MPS replica per request in any case.
        if (fail_default && !v)
            warnings.push_back(fmt::format(
                "{}:{}: key '{}.failRequestsGreaterThanOne': false is ignored: a container gets at most one MPS "
                "replica, as with NVIDIA's plugin (request one replica per container)",
                w.source(), Walker::line_of(f), path));
        else
            t.fail_requests_greater_than_one = v;
    }
    const YAML::Node rs = node.IsMap() ? node["resources"] : YAML::Node();
    if (Walker::unset(rs))
        w.error(node, path + ".resources", "missing: expected a list of {name, rename, devices, replicas}");
    if (!rs.IsSequence()) w.error(rs, path + ".resources", "expected a list of {name, rename, devices, replicas}");
    if (rs.size() == 0) w.error(rs, path + ".resources", "expected at least one resource to share");
    size_t i = 0;
    for (const auto& item : rs) t.resources.push_back(parse_replicated(w, item, fmt::format("{}.resources[{}]", path, i++)));
    return t;
}

void parse_sharing(const Walker& w, const YAML::Node& node, Config& c) {
    w.expect_map(node, "sharing", {"timeSlicing", "mps"});
    if (node.IsNull()) return;
    for (const auto& kv : node) {
        const std::string key = kv.first.as<std::string>();
        if (Walker::unset(kv.second) || (key != "mps" && key != "timeSlicing")) continue;  // unknown: recorded
        // MPS always refuses more than one replica per request (NVIDIA's NewConfig forces it).
        auto& slot = key == "mps" ? c.sharing.mps : c.sharing.time_slicing;
        slot = parse_replicated_resources(w, kv.second, "sharing." + key, key == "mps", c.warnings);
        slot->line = Walker::line_of(kv.first);  // the key's line: a map's own mark is its first entry
    }
}

}  // namespace

Result<Config> parse_config(std::string_view yaml_text, std::string_view source) {
    Walker w(std::string(source), Walker::Unknown::collect);
    Config c;
    c.config_file = std::string(source);
    try {
        const YAML::Node root = YAML::Load(std::string(yaml_text));
        if (root.IsNull()) return c;  // an empty file: every default
        if (!root.IsMap()) return fail(Code::parse, "{}:1: expected a map with 'version: v1'", source);
        w.expect_map(root, "", {"version", "flags", "resources", "sharing", "imex", "health"});
        // No version means v1, as in NVIDIA's plugin.
        const YAML::Node version = root["version"];
        if (!Walker::unset(version) && w.scalar(version, "version") != "v1")
            w.error(version, "version", fmt::format("expected v1, got '{}'", version.Scalar()));
        for (const auto& kv : root) {
            const std::string key = kv.first.as<std::string>();
            if (key == "flags") parse_flag_section(w, kv.second, "flags", c, {"plugin", "gfd"});
            else if (key == "health") parse_health(w, kv.second, c);
            else if (key == "resources") parse_resources(w, kv.second, c);
            else if (key == "sharing") parse_sharing(w, kv.second, c);
            else if (key == "imex") parse_imex(w, kv.second, c);
        }
    } catch (const ParseError& e) {
        // An unknown key seen before the error is a likely cause (`replica:` for `replicas:`).
        Error err = e.error;
        for (const auto& k : w.unknown())
            err.message += fmt::format("; {}:{}: unknown key '{}' (ignored)", k.source, k.line, k.key);
        return std::unexpected(std::move(err));
    } catch (const YAML::Exception& e) {
        const int line = e.mark.line >= 0 ? e.mark.line + 1 : 0;
        return fail(Code::parse, "{}:{}: invalid YAML: {}", source, line, e.msg);
    }
    c.unknown_keys = std::move(w.unknown());
    return c;
}

std::string unknown_key_error(const UnknownKey& k) {
    return fmt::format("{}:{}: key '{}': unknown key (expected one of: {})", k.source, k.line, k.key, k.expected);
}

std::string unknown_key_warning(const UnknownKey& k) {
    return fmt::format("{}; ignored, as NVIDIA's plugin ignores unknown keys (a misspelling? `kgpu device-plugin "
                       "--check-config` reports it as an error)",
                       unknown_key_error(k));
}

Result<Config> load_config_file(const std::string& path) {
    auto text = files::read_regular(path);  // a FIFO is refused, not waited on
    if (!text) return std::unexpected(text.error());
    return parse_config(*text, path);
}

}  // namespace kgpu::deviceplugin
