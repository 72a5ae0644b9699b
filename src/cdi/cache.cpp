#include "cdi/cache.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cdi/spec.h"
#include "common/error.h"
#include "common/files.h"

namespace kgpu::cdi {

namespace fs = std::filesystem;

namespace {

bool letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool digit(char c) { return c >= '0' && c <= '9'; }

// pkg/parser validateVendorOrClassName: a letter first, then letters, digits, '-', '_', '.', and
// a letter or digit last.
bool valid_vendor_or_class(std::string_view s) {
    if (s.empty() || !letter(s.front())) return false;
    if (!std::all_of(s.begin(), s.end(),
                     [](char c) { return letter(c) || digit(c) || c == '-' || c == '_' || c == '.'; }))
        return false;
    return letter(s.back()) || digit(s.back());
}

// pkg/parser ValidateDeviceName: a letter or digit first and last; letters, digits, '-', '_',
// '.', ':' between.
bool valid_device_name(std::string_view s) {
    if (s.empty() || !(letter(s.front()) || digit(s.front()))) return false;
    if (!std::all_of(s.begin(), s.end(),
                     [](char c) { return letter(c) || digit(c) || c == '-' || c == '_' || c == '.' || c == ':'; }))
        return false;
    return letter(s.back()) || digit(s.back());
}

// specs-go/version.go's released versions, newest first; an optional leading 'v'.
constexpr std::string_view kVersions[] = {"1.1.0", "1.0.0", "0.8.0", "0.7.0", "0.6.0",
                                          "0.5.0", "0.4.0", "0.3.0", "0.2.0", "0.1.0"};
int version_index(std::string_view v) {
    if (v.starts_with('v')) v.remove_prefix(1);
    for (size_t i = 0; i < std::size(kVersions); ++i)
        if (kVersions[i] == v) return static_cast<int>(i);
    return -1;
}

// ReadSpec + newSpec + Spec.validate, as far as names go. Returns the spec's qualified device
// names, or the reason it is left out.
Result<std::vector<std::string>> load_spec(const fs::path& path) {
    auto text = files::read(path);
    if (!text) return std::unexpected(text.error());
    auto spec = parse_spec(*text, path.string());
    if (!spec) return std::unexpected(spec.error());
    if (!spec->is_object()) return fail(Code::parse, "{}: expected a CDI spec (a map)", path.string());
    try {
        const std::string version = spec->value("cdiVersion", "");
        const int have = version_index(version);
        if (have < 0) return fail(Code::parse, "{}: invalid version \"{}\"", path.string(), version);
        const std::string needed = minimum_version(nlohmann::ordered_json::parse(spec->dump()));
        if (version_index(needed) < have)
            return fail(Code::parse, "{}: the spec version must be at least v{} (it says {})", path.string(), needed,
                        version);
        const std::string kind = spec->value("kind", "");
        const auto slash = kind.find('/');
        if (slash == std::string::npos || !valid_vendor_or_class(std::string_view(kind).substr(0, slash)) ||
            !valid_vendor_or_class(std::string_view(kind).substr(slash + 1)))
            return fail(Code::parse, "{}: invalid kind \"{}\" (expected <vendor>/<class>)", path.string(), kind);
        const auto devices = spec->find("devices");
        if (devices == spec->end() || !devices->is_array() || devices->empty())
            return fail(Code::parse, "{}: invalid spec, no devices", path.string());
        std::vector<std::string> names;
        std::set<std::string> seen;
        for (const auto& d : *devices) {
            const auto n = d.is_object() ? d.find("name") : d.end();
            if (!d.is_object() || n == d.end() || !n->is_string() || !valid_device_name(n->get<std::string>()))
                return fail(Code::parse, "{}: invalid device name {}", path.string(),
                            d.is_object() && d.contains("name") ? d["name"].dump() : std::string("(none)"));
            const std::string name = n->get<std::string>();
            if (!seen.insert(name).second)
                return fail(Code::parse, "{}: invalid spec, multiple device \"{}\"", path.string(), name);
            names.push_back(kind + "=" + name);
        }
        return names;
    } catch (const nlohmann::json::exception& e) {
        return fail(Code::parse, "{}: unexpected content: {}", path.string(), e.what());
    }
}

}  // namespace

CacheView scan_spec_dirs(const std::vector<fs::path>& dirs) {
    CacheView view;
    struct Holder {
        std::string path;
        size_t priority;
    };
    std::map<std::string, Holder> devices;
    std::map<std::string, std::vector<std::pair<std::string, size_t>>> defined;  // name -> (path, priority)
    std::set<std::string> conflicts;
    for (size_t priority = 0; priority < dirs.size(); ++priority) {
        std::error_code ec;
        std::vector<fs::path> files;
        for (const auto& e : fs::directory_iterator(dirs[priority], ec)) {
            // os.ReadDir's type: a symlink is not a directory here (it is read as a file).
            if (e.is_directory(ec) && !e.is_symlink(ec)) continue;
            const std::string ext = e.path().extension().string();
            if (ext == ".json" || ext == ".yaml") files.push_back(e.path());
        }
        std::sort(files.begin(), files.end());  // os.ReadDir returns entries sorted by name
        for (const auto& path : files) {
            auto names = load_spec(path);
            if (!names) {
                view.errors.emplace_back(path.string(), names.error().message);
                continue;
            }
            view.specs.push_back(path.string());
            for (const auto& name : *names) {
                defined[name].emplace_back(path.string(), priority);
                auto it = devices.find(name);
                // resolveConflict: a higher priority replaces; the same priority is a conflict
                // (the name is dropped after the scan); a lower one keeps what is there.
                if (it != devices.end()) {
                    if (priority == it->second.priority) conflicts.insert(name);
                    if (priority <= it->second.priority) continue;
                }
                devices[name] = Holder{path.string(), priority};
            }
        }
    }
    for (const auto& [name, holder] : devices)
        if (!conflicts.contains(name)) view.devices.emplace(name, holder.path);
    for (const auto& [name, defs] : defined) {
        if (defs.size() < 2) continue;
        NameDefinitions d{name, {}};
        for (const auto& [path, priority] : defs) d.paths.push_back(path);
        (conflicts.contains(name) ? view.conflicts : view.overridden).push_back(std::move(d));
    }
    return view;
}

std::vector<std::string> unresolved(const CacheView& view, const std::vector<std::string>& requested) {
    std::vector<std::string> out;
    for (const auto& name : requested)
        if (!view.devices.contains(name)) out.push_back(name);
    return out;
}

}  // namespace kgpu::cdi
