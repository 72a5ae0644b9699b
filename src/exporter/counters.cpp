#include "exporter/counters.h"

#include <algorithm>

#include <fmt/format.h>

namespace kgpu::exporter {

namespace {

constexpr std::string_view kExpected = "expected field, type, help (e.g. DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization)";

std::string_view trim_spaces(std::string_view s) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
    return s;
}

bool known_type(std::string_view t) {
    return t == "gauge" || t == "counter" || t == "histogram" || t == "summary" || t == "label";
}

// A cursor over the text that reports the 1-based line of the current position.
class Reader {
public:
    explicit Reader(std::string_view text) : text_(text) {}
    bool done() const { return pos_ >= text_.size(); }
    char peek() const { return text_[pos_]; }
    // The next character, with "\r\n" read as one "\n".
    char next() {
        char c = text_[pos_++];
        if (c == '\r' && pos_ < text_.size() && text_[pos_] == '\n') c = text_[pos_++];
        if (c == '\n') ++line_;
        return c;
    }
    bool at_line_end() const {
        return done() || text_[pos_] == '\n' || (text_[pos_] == '\r' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '\n');
    }
    void skip_line() {
        while (!done() && next() != '\n') {
        }
    }
    unsigned line() const { return line_; }

private:
    std::string_view text_;
    std::size_t pos_ = 0;
    unsigned line_ = 1;
};

}  // namespace

Result<std::vector<CounterLine>> parse_counters_csv(std::string_view text, std::string_view file_name) {
    if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
    auto error = [&](unsigned line, std::string what) -> std::unexpected<Error> {
        return fail(Code::parse, "{}:{}: {}; {}", file_name, line, what, kExpected);
    };
    std::vector<CounterLine> out;
    Reader r(text);
    while (!r.done()) {
        // Comment and empty lines, as encoding/csv skips them.
        if (r.peek() == '#') {
            r.skip_line();
            continue;
        }
        if (r.at_line_end()) {
            r.next();
            continue;
        }
        const unsigned start = r.line();
        std::vector<std::string> fields;
        bool end_of_record = false;
        while (!end_of_record) {
            std::string field;
            if (!r.done() && r.peek() == '"') {
                r.next();
                const unsigned quote_line = r.line();
                for (;;) {
                    if (r.done()) return error(quote_line, "a quoted field is never closed");
                    char c = r.next();
                    if (c != '"') {
                        field += c;
                        continue;
                    }
                    if (!r.done() && r.peek() == '"') {  // "" is one quote
                        field += r.next();
                        continue;
                    }
                    break;  // the closing quote
                }
                if (r.at_line_end()) {
                    end_of_record = true;
                    if (!r.done()) r.next();
                } else if (r.peek() == ',') {
                    r.next();
                } else {
                    return error(r.line(), "text after the closing '\"' of a quoted field");
                }
            } else {
                for (;;) {
                    if (r.at_line_end()) {
                        end_of_record = true;
                        if (!r.done()) r.next();
                        break;
                    }
                    char c = r.next();
                    if (c == ',') break;
                    if (c == '"') return error(r.line(), "a '\"' inside a field that does not start with one");
                    field += c;
                }
            }
            fields.push_back(std::move(field));
        }
        if (fields.size() != 3)
            return error(start, fmt::format("{} field{} instead of 3", fields.size(), fields.size() == 1 ? "" : "s"));
        CounterLine l{std::string(trim_spaces(fields[0])), std::string(trim_spaces(fields[1])),
                      std::string(trim_spaces(fields[2])), start};
        if (l.field.empty()) return error(start, "an empty field name");
        if (!known_type(l.type))
            return fail(Code::parse,
                        "{}:{}: unknown Prometheus metric type '{}' for {}; expected gauge, counter, histogram, summary "
                        "or label",
                        file_name, start, l.type, l.field);
        out.push_back(std::move(l));
    }
    return out;
}

namespace {

// The enumerators unqualified only in here (a namespace-scope `using enum` would put `count_` next
// to other enums' in a unity build).
constexpr auto kLabelFields = [] {
    using enum LabelField;
    return std::array<LabelFieldDef, kLabelFieldCount>{{
        {brand, "DCGM_FI_DEV_BRAND", "nvmlDeviceGetBrand, in DCGM's words (Tesla, Quadro, NVIDIA, ...)"},
        {ecc_inforom, "DCGM_FI_DEV_ECC_INFOROM_VER", "nvmlDeviceGetInforomVersion(NVML_INFOROM_ECC)"},
        {inforom_image, "DCGM_FI_DEV_INFOROM_IMAGE_VER", "nvmlDeviceGetInforomImageVersion"},
        {oem_inforom, "DCGM_FI_DEV_OEM_INFOROM_VER", "nvmlDeviceGetInforomVersion(NVML_INFOROM_OEM)"},
        {power_inforom, "DCGM_FI_DEV_POWER_INFOROM_VER", "nvmlDeviceGetInforomVersion(NVML_INFOROM_POWER)"},
        {serial, "DCGM_FI_DEV_SERIAL", "nvmlDeviceGetSerial"},
        {vbios, "DCGM_FI_DEV_VBIOS_VERSION", "nvmlDeviceGetVbiosVersion"},
        {driver_version, "DCGM_FI_DRIVER_VERSION", "nvmlSystemGetDriverVersion"},
        {nvml_version, "DCGM_FI_NVML_VERSION", "nvmlSystemGetNVMLVersion"},
    }};
}();

constexpr bool label_fields_in_order() {
    for (std::size_t i = 0; i < kLabelFields.size(); ++i) {
        if (static_cast<std::size_t>(kLabelFields[i].id) != i) return false;
        if (i > 0 && !(kLabelFields[i - 1].name < kLabelFields[i].name)) return false;
    }
    return true;
}
static_assert(label_fields_in_order(), "kLabelFields: in LabelField order, which is by name");

}  // namespace

std::span<const LabelFieldDef> label_fields() { return kLabelFields; }

const LabelFieldDef* find_label_field(std::string_view name) {
    for (const auto& f : kLabelFields)
        if (f.name == name) return &f;
    return nullptr;
}

std::string_view CounterSelection::help_of(const MetricDef& d) const {
    const auto& h = help[static_cast<std::size_t>(d.id)];
    return h.empty() ? d.help : std::string_view(h);
}

MetricType CounterSelection::type_of(const MetricDef& d) const {
    return type[static_cast<std::size_t>(d.id)].value_or(d.type);
}

std::string default_counters_csv() {
    // dcgm-exporter's default-counters.csv, enabled lines, in its order; only field and type come
    // from there.
    static constexpr std::pair<std::string_view, std::string_view> kFields[] = {
        {"DCGM_FI_DEV_SM_CLOCK", "gauge"},
        {"DCGM_FI_DEV_MEM_CLOCK", "gauge"},
        {"DCGM_FI_DEV_MEMORY_TEMP", "gauge"},
        {"DCGM_FI_DEV_GPU_TEMP", "gauge"},
        {"DCGM_FI_DEV_POWER_USAGE", "gauge"},
        {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter"},
        {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter"},
        {"DCGM_FI_DEV_GPU_UTIL", "gauge"},
        {"DCGM_FI_DEV_MEM_COPY_UTIL", "gauge"},
        {"DCGM_FI_DEV_ENC_UTIL", "gauge"},
        {"DCGM_FI_DEV_DEC_UTIL", "gauge"},
        {"DCGM_FI_DEV_XID_ERRORS", "gauge"},
        {"DCGM_FI_DEV_FB_FREE", "gauge"},
        {"DCGM_FI_DEV_FB_USED", "gauge"},
        {"DCGM_FI_DEV_FB_RESERVED", "gauge"},
        {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter"},
        {"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter"},
        {"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter"},
        {"DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge"},
        {"DCGM_FI_DRIVER_VERSION", "label"},
        {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge"},
        {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge"},
        {"DCGM_FI_PROF_DRAM_ACTIVE", "gauge"},
        {"DCGM_FI_PROF_PCIE_TX_BYTES", "gauge"},
        {"DCGM_FI_PROF_PCIE_RX_BYTES", "gauge"},
    };
    std::string out =
        "# dcgm-exporter's default counters (its 4.5.3-4.8.2 etc/default-counters.csv enables these), as kgpu\n"
        "# serves them; written by `kgpu exporter --print-default-counters`. Not listed: its\n"
        "# DCGM_FI_DEV_VGPU_LICENSE_STATUS (vGPU only). Lines starting with '#' are comments; every other line\n"
        "# is: DCGM field, Prometheus type (gauge, counter or label), help text.\n";
    for (const auto& [field, type] : kFields) {
        std::string_view help;
        if (const MetricDef* m = find_metric(field)) help = m->help;
        else if (find_label_field(field)) help = "label on every series of the GPU";
        std::string text(help);
        if (text.find_first_of(",\"\n") != std::string::npos) {  // quoted, as encoding/csv reads it
            std::string quoted = "\"";
            for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
            text = quoted + "\"";
        }
        out += fmt::format("{}, {}, {}\n", field, type, text);
    }
    return out;
}

CounterSelection all_counters() {
    CounterSelection s;
    s.metrics.set();
    return s;
}

CounterSelection select_counters(std::span<const CounterLine> lines) {
    CounterSelection s;
    s.labels.reset();
    for (const auto& m : catalogue())
        if (!m.name.starts_with("DCGM_")) s.metrics.set(static_cast<std::size_t>(m.id));
    auto note = [](std::vector<std::string>& v, const std::string& name) {
        if (std::ranges::find(v, name) == v.end()) v.push_back(name);
    };
    for (const auto& l : lines) {
        if (l.type == "label") {
            if (const LabelFieldDef* f = find_label_field(l.field)) s.labels.set(static_cast<std::size_t>(f->id));
            else note(s.unknown, l.field);
            continue;
        }
        const MetricDef* d = find_metric(l.field);
        if (!d) {
            note(s.unknown, l.field);
            continue;
        }
        const auto i = static_cast<std::size_t>(d->id);
        s.metrics.set(i);
        s.help[i] = l.help;
        if (l.type == "gauge") s.type[i] = MetricType::gauge;
        else if (l.type == "counter") s.type[i] = MetricType::counter;
        else {
            s.type[i].reset();
            note(s.retyped, l.field);
        }
    }
    return s;
}

}  // namespace kgpu::exporter
