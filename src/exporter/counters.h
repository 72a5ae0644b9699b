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

// The DCGM fields a counters file may list as `label`: each becomes a label named after the field
// on every DCGM series of the GPU (its MIG instances too), with the field's text value, as
// dcgm-exporter adds them; a GPU whose NVML does not answer one has no such label. In the order
// dcgm-exporter writes them (by name).
enum class LabelField : unsigned {
    brand,              // DCGM_FI_DEV_BRAND: nvmlDeviceGetBrand, as DCGM names it ("Tesla", ...)
    ecc_inforom,        // DCGM_FI_DEV_ECC_INFOROM_VER: nvmlDeviceGetInforomVersion(ECC)
    inforom_image,      // DCGM_FI_DEV_INFOROM_IMAGE_VER: nvmlDeviceGetInforomImageVersion
    oem_inforom,        // DCGM_FI_DEV_OEM_INFOROM_VER: nvmlDeviceGetInforomVersion(OEM)
    power_inforom,      // DCGM_FI_DEV_POWER_INFOROM_VER: nvmlDeviceGetInforomVersion(POWER)
    serial,             // DCGM_FI_DEV_SERIAL: nvmlDeviceGetSerial
    vbios,              // DCGM_FI_DEV_VBIOS_VERSION: nvmlDeviceGetVbiosVersion
    driver_version,     // DCGM_FI_DRIVER_VERSION: nvmlSystemGetDriverVersion
    nvml_version,       // DCGM_FI_NVML_VERSION: nvmlSystemGetNVMLVersion
    count_
};
inline constexpr std::size_t kLabelFieldCount = static_cast<std::size_t>(LabelField::count_);
struct LabelFieldDef {
    LabelField id;
    std::string_view name;    // the DCGM field name, which is also the label's name
    std::string_view source;  // the NVML call (for the docs)
};
std::span<const LabelFieldDef> label_fields();  // in LabelField order
const LabelFieldDef* find_label_field(std::string_view name);

// What the exporter serves.
struct CounterSelection {
    std::bitset<kMetricCount> metrics;                         // rows served (kgpu_* rows always)
    std::array<std::string, kMetricCount> help;                // the file's help text; empty: the catalogue's
    std::array<std::optional<MetricType>, kMetricCount> type;  // the file's type; nullopt: the catalogue's
    // Label fields added to the DCGM series: DCGM_FI_DRIVER_VERSION alone without a file.
    std::bitset<kLabelFieldCount> labels{1u << static_cast<unsigned>(LabelField::driver_version)};
    // Listed fields kgpu does not serve (in file order, each once), and those listed as histogram
    // or summary, which a single value cannot be (served with the catalogue's type).
    std::vector<std::string> unknown, retyped;

    bool enabled(Metric m) const { return metrics.test(static_cast<std::size_t>(m)); }
    bool label(LabelField f) const { return labels.test(static_cast<std::size_t>(f)); }
    std::string_view help_of(const MetricDef& d) const;
    MetricType type_of(const MetricDef& d) const;
};

// Every catalogue metric with its own type and help: what is served without --collectors.
CounterSelection all_counters();

// dcgm-exporter's -f default, a file of dcgm-exporter's image. Its Helm chart passes it
// explicitly (`arguments: ["-f", "/etc/dcgm-exporter/default-counters.csv"]`).
inline constexpr std::string_view kDcgmExporterDefaultCountersPath = "/etc/dcgm-exporter/default-counters.csv";
// The counters dcgm-exporter 4.5.3-4.8.2's etc/default-counters.csv enables, as a counters CSV
// of the same shape: its fields in its order, with its types (DCGM_FI_DRIVER_VERSION as its one
// label row), help texts from kgpu's catalogue; without DCGM_FI_DEV_VGPU_LICENSE_STATUS (vGPU
// only, which kgpu does not serve). parse_counters_csv takes it; kgpu's image ships it at
// kDcgmExporterDefaultCountersPath (`kgpu exporter --print-default-counters`).
std::string default_counters_csv();

// The metrics `lines` ask for: each DCGM_FI_* catalogue row listed, with the file's type and help;
// every kgpu_* row; the label fields listed as `label` rows (only those: DCGM_FI_DRIVER_VERSION
// too). The last line naming a field wins.
CounterSelection select_counters(std::span<const CounterLine> lines);

}  // namespace kgpu::exporter
