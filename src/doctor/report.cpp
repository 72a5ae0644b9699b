#include "doctor/report.h"

#include <algorithm>
#include <ostream>

#include <fmt/format.h>

namespace kgpu::doctor {

std::string_view to_string(Layer layer) {
    switch (layer) {
        case Layer::hardware: return "hardware";
        case Layer::driver: return "driver";
        case Layer::runtime: return "runtime";
        case Layer::device_plugin: return "device plugin";
        case Layer::kubelet: return "kubelet";
        case Layer::workload: return "workload";
    }
    return "unknown";
}

std::string_view to_string(Status status) {
    switch (status) {
        case Status::ok: return "ok";
        case Status::warn: return "warn";
        case Status::fail: return "fail";
        case Status::skipped: return "skipped";
    }
    return "unknown";
}

const CheckResult* Report::find(std::string_view id) const {
    for (const auto& c : checks)
        if (c.id == id) return &c;
    return nullptr;
}

bool Report::any_fail() const {
    return std::any_of(checks.begin(), checks.end(), [](const CheckResult& c) { return c.status == Status::fail; });
}

namespace {

std::string badge(Status s, bool colour) {
    const char* text = s == Status::ok ? " OK " : s == Status::warn ? "WARN" : s == Status::fail ? "FAIL" : "SKIP";
    if (!colour) return fmt::format("[{}]", text);
    const char* code = s == Status::ok ? "32" : s == Status::warn ? "33" : s == Status::fail ? "31" : "90";
    return fmt::format("[\x1b[{}m{}\x1b[0m]", code, text);
}

// Indents every line of a multi-line text.
std::string indent(std::string_view text, std::string_view prefix) {
    std::string out;
    size_t start = 0;
    while (start <= text.size()) {
        size_t nl = text.find('\n', start);
        std::string_view line = text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
        out += prefix;
        out += line;
        out += '\n';
        if (nl == std::string_view::npos) break;
        start = nl + 1;
    }
    return out;
}

}  // namespace

void print_text(const Report& report, std::ostream& out, bool colour) {
    const Layer layers[] = {Layer::hardware, Layer::driver,  Layer::runtime,
                            Layer::device_plugin, Layer::kubelet, Layer::workload};
    int counts[4] = {};
    for (Layer layer : layers) {
        bool header = false;
        for (const auto& c : report.checks) {
            if (c.layer != layer) continue;
            if (!header) {
                out << (colour ? fmt::format("\x1b[1m{}\x1b[0m\n", to_string(layer)) : fmt::format("{}\n", to_string(layer)));
                header = true;
            }
            ++counts[static_cast<int>(c.status)];
            out << fmt::format("  {} {:<28} {}\n", badge(c.status, colour), c.id, c.title);
            if (!c.evidence.empty()) out << indent(c.evidence, "         ");
            if (!c.fix.empty()) out << indent(c.fix, "         fix: ");
        }
        if (header) out << "\n";
    }
    out << fmt::format("{} ok, {} warn, {} fail, {} skipped\n", counts[0], counts[1], counts[2], counts[3]);
}

nlohmann::json to_json(const Report& report) {
    nlohmann::json checks = nlohmann::json::array();
    int counts[4] = {};
    for (const auto& c : report.checks) {
        ++counts[static_cast<int>(c.status)];
        checks.push_back({{"id", c.id},
                          {"layer", to_string(c.layer)},
                          {"status", to_string(c.status)},
                          {"title", c.title},
                          {"evidence", c.evidence},
                          {"fix", c.fix},
                          {"needs", c.needs}});
    }
    return {{"checks", checks},
            {"summary", {{"ok", counts[0]}, {"warn", counts[1]}, {"fail", counts[2]}, {"skipped", counts[3]}}}};
}

}  // namespace kgpu::doctor
