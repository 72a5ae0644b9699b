// dcgm-exporter's counters CSV (its `-f`/`--collectors` file, as its Helm chart mounts it): which
// metrics to serve, with which Prometheus type and help text (issue #15, item 10).
//
// The parser is a pure function of the text and a file name (for messages), so a fuzz target can
// drive it; select_counters maps the parsed lines onto the catalogue.
#pragma once

#include <array>
#include <bitset>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "exporter/catalogue.h"

namespace kgpu::exporter {

struct CounterLine {
    std::string field;  // "DCGM_FI_DEV_GPU_UTIL"
    std::string type;   // gauge, counter, histogram, summary or label
    std::string help;
    unsigned line = 0;  // 1-based line of the file where the record starts
    bool operator==(const CounterLine&) const = default;
};

// Reads the file as dcgm-exporter does (Go's encoding/csv with '#' as the comment character):
//  - a line whose first character is '#' is a comment, an empty line is skipped, "\r\n" is "\n";
//  - fields are separated by ','; a field that starts with '"' is quoted: it may hold ',', line
//    breaks and '""' (one quote), and must be followed by ',' or the end of the line; a '"'
//    anywhere else is an error (so is a quoted field that never ends);
//  - spaces (not tabs) around each field are trimmed;
//  - every record has exactly three fields (field, type, help), a non-empty field name and one of
//    the types gauge, counter, histogram, summary, label.
// A UTF-8 byte-order mark at the start is skipped. Errors (Code::parse) read
// "<file>:<line>: <what was wrong>; expected <what was expected>".
Result<std::vector<CounterLine>> parse_counters_csv(std::string_view text, std::string_view file_name);

// What the exporter serves.
struct CounterSelection {
    std::bitset<kMetricCount> metrics;                         // rows served (kgpu_* rows always)
    std::array<std::string, kMetricCount> help;                // the file's help text; empty: the catalogue's
    std::array<std::optional<MetricType>, kMetricCount> type;  // the file's type; nullopt: the catalogue's
    bool driver_version_label = true;                          // the DCGM_FI_DRIVER_VERSION label
    // Listed fields kgpu does not serve (in file order, each once), and those listed as histogram
    // or summary, which a single value cannot be (served with the catalogue's type).
    std::vector<std::string> unknown, retyped;

    bool enabled(Metric m) const { return metrics.test(static_cast<std::size_t>(m)); }
    std::string_view help_of(const MetricDef& d) const;
    MetricType type_of(const MetricDef& d) const;
};

// Every catalogue metric with its own type and help: what is served without --collectors.
CounterSelection all_counters();

// The metrics `lines` ask for: each DCGM_FI_* catalogue row listed, with the file's type and help;
// every kgpu_* row; the DCGM_FI_DRIVER_VERSION label only when listed as a `label` row. The last
// line naming a field wins.
CounterSelection select_counters(std::span<const CounterLine> lines);

}  // namespace kgpu::exporter
