#include "runtime/docker.h"

#include <nlohmann/json.hpp>

#include "common/strings.h"

namespace kgpu::runtime {

namespace {

using ojson = nlohmann::ordered_json;

// The indentation unit of a JSON text: the leading blanks of its first indented line.
std::string indent_unit(std::string_view text) {
    for (auto line : strings::split(text, '\n')) {
        size_t n = 0;
        while (n < line.size() && (line[n] == ' ' || line[n] == '\t')) ++n;
        if (n > 0 && n < line.size()) return std::string(line.substr(0, n));
    }
    return "    ";
}

std::pair<size_t, size_t> line_column(std::string_view text, size_t byte) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < byte && i < text.size(); ++i) {
        if (text[i] == '\n') ++line, col = 1;
        else ++col;
    }
    return {line, col};
}

}  // namespace

Result<Edited> configure_docker(std::string_view text, std::string_view source, const DockerOptions& o) {
    if (o.runtime_name.empty()) return fail(Code::invalid_argument, "--nvidia-runtime-name: expected a name");
    if (o.runtime_path.empty()) return fail(Code::invalid_argument, "--nvidia-runtime-path: expected a path");
    ojson doc = ojson::object();
    if (!strings::trim(text).empty()) {
        try {
            doc = ojson::parse(text);
        } catch (const ojson::parse_error& e) {
            auto [line, col] = line_column(text, e.byte > 0 ? e.byte - 1 : 0);
            return fail(Code::parse, "{}:{}:{}: not valid JSON (the file was left untouched)", source, line, col);
        } catch (const ojson::exception& e) {
            // A number out of range (1e999): Go's encoding/json, and so Docker, refuse it too.
            std::string_view what = e.what();
            if (auto close = what.find("] "); close != std::string_view::npos) what.remove_prefix(close + 2);
            return fail(Code::parse, "{}: not valid JSON: {} (the file was left untouched)", source, what);
        }
    }
    if (!doc.is_object()) return fail(Code::invalid_argument, "{}: expected a JSON object", source);
    const ojson before = doc;
    if (doc.contains("runtimes") && !doc["runtimes"].is_object())
        return fail(Code::invalid_argument, "{}: \"runtimes\" is not an object", source);
    doc["runtimes"][o.runtime_name] = ojson{{"path", o.runtime_path}, {"args", ojson::array()}};
    if (o.set_as_default) doc["default-runtime"] = o.runtime_name;
    if (o.enable_cdi) {
        // nvidia-ctk v1.20 replaces "features" with {"cdi": true}; the other features stay here.
        if (doc.contains("features") && !doc["features"].is_object())
            return fail(Code::invalid_argument, "{}: \"features\" is not an object", source);
        doc["features"]["cdi"] = true;
    }
    Edited out;
    out.version = 0;
    if (doc == before && !strings::trim(text).empty()) {
        out.text = std::string(text);
        return out;
    }
    const std::string unit = indent_unit(text);
    std::string dumped = doc.dump(static_cast<int>(unit.size()), unit.front() == '\t' ? '\t' : ' ');
    out.text = dumped + "\n";
    out.changed = true;
    return out;
}

}  // namespace kgpu::runtime
