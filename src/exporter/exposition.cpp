#include "exporter/exposition.h"

#include <cmath>
#include <cstdint>

#include <fmt/format.h>

namespace kgpu::exporter {

namespace {

bool name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }

}  // namespace

bool valid_metric_name(std::string_view name) {
    if (name.empty() || !(name_start(name[0]) || name[0] == ':')) return false;
    for (char c : name)
        if (!name_char(c) && c != ':') return false;
    return true;
}

bool valid_label_name(std::string_view name) {
    if (name.empty() || !name_start(name[0]) || name.starts_with("__")) return false;
    for (char c : name)
        if (!name_char(c)) return false;
    return true;
}

void append_escaped_label_value(std::string& out, std::string_view value) {
    for (char c : value) {
        switch (c) {
            case '\\': out += "\\\\"; break;
            case '"': out += "\\\""; break;
            case '\n': out += "\\n"; break;
            default: out += c;
        }
    }
}

std::string escape_help(std::string_view help) {
    std::string out;
    out.reserve(help.size());
    for (char c : help) {
        if (c == '\\') out += "\\\\";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
    return out;
}

void append_value(std::string& out, double v) {
    if (std::isnan(v)) {
        out += "NaN";
    } else if (std::isinf(v)) {
        out += v > 0 ? "+Inf" : "-Inf";
    } else if (v == std::floor(v) && std::fabs(v) <= 9007199254740992.0) {
        fmt::format_to(std::back_inserter(out), "{}", static_cast<std::int64_t>(v));
    } else {
        fmt::format_to(std::back_inserter(out), "{}", v);
    }
}

LabelSet& LabelSet::add(std::string_view name, std::string_view value) {
    if (!text_.empty()) text_ += ',';
    text_ += name;
    text_ += "=\"";
    append_escaped_label_value(text_, value);
    text_ += '"';
    return *this;
}

LabelSet& LabelSet::append(const LabelSet& other) {
    if (other.text_.empty()) return *this;
    if (!text_.empty()) text_ += ',';
    text_ += other.text_;
    return *this;
}

std::size_t Exposition::family(std::string_view name, std::string_view help, MetricType type) {
    for (std::size_t i = 0; i < families_.size(); ++i)
        if (families_[i].name == name) return i;
    families_.push_back(Family{std::string(name), escape_help(help), type, {}});
    return families_.size() - 1;
}

void Exposition::add(std::size_t family, const LabelSet& labels, double value) { add(family, labels.str(), value); }

void Exposition::add(std::size_t family, std::string labels, double value) {
    families_.at(family).samples.emplace_back(std::move(labels), value);
    ++samples_;
}

std::string Exposition::render() const {
    std::size_t size = 0;
    for (const auto& f : families_) {
        if (f.samples.empty()) continue;
        size += 2 * f.name.size() + f.help.size() + 24;
        for (const auto& [labels, value] : f.samples) size += f.name.size() + labels.size() + 24;
    }
    std::string out;
    out.reserve(size);
    for (const auto& f : families_) {
        if (f.samples.empty()) continue;
        out += "# HELP ";
        out += f.name;
        out += ' ';
        out += f.help;
        out += "\n# TYPE ";
        out += f.name;
        out += ' ';
        out += to_string(f.type);
        out += '\n';
        for (const auto& [labels, value] : f.samples) {
            out += f.name;
            if (!labels.empty()) {
                out += '{';
                out += labels;
                out += '}';
            }
            out += ' ';
            append_value(out, value);
            out += '\n';
        }
    }
    return out;
}

}  // namespace kgpu::exporter
