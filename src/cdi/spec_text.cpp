// CDI spec files as text: reading one (JSON or YAML) and what its libraries say, the lowest
// cdiVersion its features allow, and writing it as YAML or JSON. Generation is spec.cpp's.
#include "cdi/spec.h"

#include <algorithm>
#include <regex>
#include <set>

#include <yaml-cpp/yaml.h>

#include "common/files.h"

namespace kgpu::cdi {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

LibraryMismatch check_libraries(const nlohmann::json& spec, const std::string& driver_version, const fs::path& host_root) {
    LibraryMismatch out;
    std::set<std::string> versions;
    static const std::regex re(R"(^lib.*\.so\.([0-9]+\.[0-9]+(?:\.[0-9]+)?)$)");
    auto visit = [&](const nlohmann::json& edits) {
        if (!edits.is_object() || !edits.contains("mounts") || !edits["mounts"].is_array()) return;
        for (const auto& m : edits["mounts"]) {
            if (!m.is_object()) continue;
            const std::string container = m.value("containerPath", "");
            const std::string host = m.value("hostPath", container);
            std::smatch match;
            const std::string base = fs::path(container).filename().string();
            if (!std::regex_match(base, match, re)) continue;
            // The EGL platform libraries the graphics files bring carry their own versions
            // (libnvidia-egl-gbm.so.1.1.2), not the driver's.
            const bool own_version = base.starts_with("libnvidia-egl-gbm.so.") ||
                                     base.starts_with("libnvidia-egl-wayland.so.") ||
                                     base.starts_with("libnvidia-egl-wayland2.so.");
            if (!own_version) {
                versions.insert(match[1].str());
                if (match[1].str() != driver_version) out.other_version.push_back(container);
            }
            std::error_code ec;
            if (!host.empty() && !fs::exists(files::under_root(host_root, host), ec)) out.missing.push_back(host);
        }
    };
    if (spec.contains("containerEdits")) visit(spec["containerEdits"]);
    if (spec.contains("devices") && spec["devices"].is_array())
        for (const auto& d : spec["devices"])
            if (d.is_object() && d.contains("containerEdits")) visit(d["containerEdits"]);
    out.versions.assign(versions.begin(), versions.end());
    return out;
}

namespace {

nlohmann::json from_yaml(const YAML::Node& n) {
    switch (n.Type()) {
        case YAML::NodeType::Map: {
            nlohmann::json j = nlohmann::json::object();
            for (const auto& kv : n) j[kv.first.as<std::string>()] = from_yaml(kv.second);
            return j;
        }
        case YAML::NodeType::Sequence: {
            nlohmann::json j = nlohmann::json::array();
            for (const auto& e : n) j.push_back(from_yaml(e));
            return j;
        }
        case YAML::NodeType::Scalar: return n.as<std::string>();
        default: return nullptr;
    }
}

}  // namespace

Result<nlohmann::json> parse_spec(std::string_view text, std::string_view source) {
    const auto first = text.find_first_not_of(" \t\r\n");
    if (first != std::string_view::npos && text[first] == '{') {
        try {
            return nlohmann::json::parse(text);
        } catch (const nlohmann::json::exception& e) {
            return fail(Code::parse, "{}: not valid JSON: {}", source, e.what());
        }
    }
    try {
        return from_yaml(YAML::Load(std::string(text)));
    } catch (const YAML::Exception& e) {
        return fail(Code::parse, "{}: not valid YAML: {}", source, e.what());
    }
}

std::string minimum_version(const ojson& spec) {
    int minor = 3;
    auto need = [&](int m) { minor = std::max(minor, m); };
    std::vector<const ojson*> edits;
    if (spec.contains("containerEdits")) edits.push_back(&spec["containerEdits"]);
    if (spec.contains("annotations") && !spec["annotations"].empty()) need(6);
    const std::string kind = spec.value("kind", "");
    if (auto slash = kind.find('/'); slash != std::string::npos && kind.find('.', slash) != std::string::npos) need(6);
    if (spec.contains("devices")) {
        for (const auto& d : spec["devices"]) {
            const std::string name = d.value("name", "");
            if (!name.empty() && !std::isalpha(static_cast<unsigned char>(name[0]))) need(5);
            if (d.contains("annotations") && !d["annotations"].empty()) need(6);
            if (d.contains("containerEdits")) edits.push_back(&d["containerEdits"]);
        }
    }
    for (const ojson* e : edits) {
        if (e->contains("mounts"))
            for (const auto& m : (*e)["mounts"])
                if (m.contains("type")) need(4);
        if (e->contains("deviceNodes"))
            for (const auto& n : (*e)["deviceNodes"])
                if (n.contains("hostPath") && !n["hostPath"].get<std::string>().empty()) need(5);
        if (e->contains("additionalGids") && !(*e)["additionalGids"].empty()) need(7);
        if (e->contains("intelRdt")) need(7);
    }
    return fmt::format("0.{}.0", minor);
}

namespace {

// Whether YAML would read `s` as a plain string; otherwise it is written double-quoted.
bool plain_safe(const std::string& s) {
    if (s.empty()) return false;
    static const std::set<std::string> reserved = {"true", "false", "yes", "no", "on", "off", "null", "~", "y", "n"};
    if (reserved.contains(strings::lower(s))) return false;
    if (!std::isalpha(static_cast<unsigned char>(s[0])) && s[0] != '/') return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '/' || c == '-' || c == '=' || c == ',';
    });
}

void emit(YAML::Emitter& out, const ojson& j) {
    if (j.is_object()) {
        out << YAML::BeginMap;
        for (const auto& [k, v] : j.items()) {
            out << YAML::Key << k << YAML::Value;
            emit(out, v);
        }
        out << YAML::EndMap;
    } else if (j.is_array()) {
        out << YAML::BeginSeq;
        for (const auto& v : j) emit(out, v);
        out << YAML::EndSeq;
    } else if (j.is_string()) {
        const auto& s = j.get_ref<const std::string&>();
        if (plain_safe(s)) out << s;
        else out << YAML::DoubleQuoted << s;
    } else if (j.is_number_unsigned()) {
        out << j.get<std::uint64_t>();
    } else if (j.is_number_integer()) {
        out << j.get<std::int64_t>();
    } else if (j.is_boolean()) {
        out << j.get<bool>();
    } else {
        out << YAML::Null;
    }
}

}  // namespace

std::string to_yaml(const ojson& spec) {
    YAML::Emitter out;
    out.SetIndent(2);
    out << YAML::BeginDoc;
    emit(out, spec);
    std::string s = out.c_str();
    if (s.empty() || s.back() != '\n') s += '\n';
    return s;
}

Result<std::string> to_json_text(const ojson& spec) {
    try {
        return spec.dump(2) + "\n";
    } catch (const ojson::type_error& e) {
        // A host path (a driver file, a device node) that is not UTF-8: JSON cannot hold it.
        return fail(Code::invalid_argument, "the CDI spec cannot be written as JSON, a string in it is not UTF-8 ({})", e.what());
    }
}

}  // namespace kgpu::cdi
