// The Prometheus text exposition format 0.0.4 (facts/metrics-and-exposition.md), written directly:
// samples are collected per family and rendered family by family, so a family's lines are always
// contiguous and its # HELP / # TYPE lines appear once, before its first sample, whatever order
// the samples were added in.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "exporter/catalogue.h"

namespace kgpu::exporter {

inline constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

// `[a-zA-Z_:][a-zA-Z0-9_:]*`
bool valid_metric_name(std::string_view name);
// `[a-zA-Z_][a-zA-Z0-9_]*`, not starting with "__" (reserved).
bool valid_label_name(std::string_view name);

// Label values escape backslash, double quote and newline; HELP text escapes backslash and newline.
void append_escaped_label_value(std::string& out, std::string_view value);
std::string escape_help(std::string_view help);

// A sample value: integers (up to 2^53) without a fraction, other numbers in the shortest form
// that reads back to the same double, NaN, +Inf, -Inf.
void append_value(std::string& out, double value);

// A label set rendered as `name="value",name2="value2"` (no braces), built in the order the
// labels are added. Names are the caller's (constants); values are escaped here.
class LabelSet {
public:
    LabelSet() = default;
    LabelSet& add(std::string_view name, std::string_view value);
    // Appends another rendered set.
    LabelSet& append(const LabelSet& other);
    const std::string& str() const { return text_; }
    bool empty() const { return text_.empty(); }

private:
    std::string text_;
};

class Exposition {
public:
    // Declares a family; families are rendered in declaration order. Declaring a name twice
    // returns the first declaration's handle (its HELP/TYPE win).
    std::size_t family(std::string_view name, std::string_view help, MetricType type);
    std::size_t family(const MetricDef& def) { return family(def.name, def.help, def.type); }
    void add(std::size_t family, const LabelSet& labels, double value);
    void add(std::size_t family, std::string labels, double value);

    // The text: per family with samples, # HELP, # TYPE, then its samples in the order added.
    // Families without samples are left out. Ends with "\n" (or is empty).
    std::string render() const;
    std::size_t samples() const { return samples_; }

private:
    struct Family {
        std::string name, help;
        MetricType type;
        std::vector<std::pair<std::string, double>> samples;
    };
    std::vector<Family> families_;
    std::size_t samples_ = 0;
};

}  // namespace kgpu::exporter
