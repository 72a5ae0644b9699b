// dcgm-exporter's counters CSV (--collectors): the parser's rules (those of Go's encoding/csv as
// dcgm-exporter configures it), its file:line errors, and the mapping onto the catalogue.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "exporter/counters.h"
#include "nvml/brand.h"

namespace kgpu::exporter {
namespace {

std::string data_file(const std::string& name) {
    std::ifstream in(std::string(KGPU_SOURCE_DIR) + "/tests/exporter/data/" + name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string parse_error(std::string_view text) {
    auto r = parse_counters_csv(text, "counters.csv");
    if (r) return "(parsed " + std::to_string(r->size()) + " lines)";
    EXPECT_EQ(r.error().code, Code::parse);
    return r.error().message;
}

TEST(CountersCsv, TheDefaultCountersShapeParses) {
    auto lines = parse_counters_csv(data_file("default-counters.csv"), "default-counters.csv");
    ASSERT_TRUE(lines) << lines.error().message;
    ASSERT_EQ(lines->size(), 26u);
    EXPECT_EQ((*lines)[0], (CounterLine{"DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock (MHz).", 6}));
    // "DCGM_FI_DEV_DEC_UTIL ,     gauge, ..." : spaces around fields are trimmed.
    auto dec = std::ranges::find(*lines, std::string("DCGM_FI_DEV_DEC_UTIL"), &CounterLine::field);
    ASSERT_NE(dec, lines->end());
    EXPECT_EQ(dec->type, "gauge");
    EXPECT_EQ(lines->back().field, "DCGM_FI_PROF_PCIE_RX_BYTES");

    const CounterSelection sel = select_counters(*lines);
    EXPECT_EQ(sel.unknown, std::vector<std::string>{"DCGM_FI_DEV_VGPU_LICENSE_STATUS"})
        << "every other field of dcgm-exporter's defaults is one kgpu serves";
    EXPECT_TRUE(sel.retyped.empty());
    EXPECT_TRUE(sel.label(LabelField::driver_version));
    EXPECT_EQ(sel.labels.count(), 1u) << "the other label rows are commented out";
    for (Metric m : {Metric::sm_clock, Metric::nvlink_bandwidth_total, Metric::prof_pipe_tensor_active,
                     Metric::prof_pcie_rx_bytes, Metric::xid_errors, Metric::fb_reserved, Metric::gpu_health,
                     Metric::pod_sm_util_ratio})
        EXPECT_TRUE(sel.enabled(m)) << def(m).name;
    for (Metric m : {Metric::ecc_sbe_vol_total, Metric::prof_sm_active, Metric::prof_nvlink_tx_bytes})
        EXPECT_FALSE(sel.enabled(m)) << def(m).name << " is commented out";
    EXPECT_EQ(sel.help_of(def(Metric::gpu_temp)), "GPU die temperature (C).");
    EXPECT_EQ(sel.type_of(def(Metric::nvlink_bandwidth_total)), MetricType::counter);
}

TEST(CountersCsv, CsvRulesOfEncodingCsv) {
    auto lines = parse_counters_csv(
        "\xEF\xBB\xBF"
        "# comment\r\n"
        "\r\n"
        "DCGM_FI_DEV_GPU_TEMP,gauge,\"Temperature, in C; \"\"die\"\"\"\r\n"
        "DCGM_FI_DEV_POWER_USAGE, counter ,\"two\n"
        "# not a comment inside quotes\n"
        "lines\"\n"
        "  DCGM_FI_DEV_SM_CLOCK  ,gauge,   \n"
        "DCGM_FI_DEV_MEM_CLOCK,gauge,no newline at the end",
        "c.csv");
    ASSERT_TRUE(lines) << lines.error().message;
    ASSERT_EQ(lines->size(), 4u);
    EXPECT_EQ((*lines)[0], (CounterLine{"DCGM_FI_DEV_GPU_TEMP", "gauge", "Temperature, in C; \"die\"", 3}));
    EXPECT_EQ((*lines)[1], (CounterLine{"DCGM_FI_DEV_POWER_USAGE", "counter", "two\n# not a comment inside quotes\nlines", 4}));
    EXPECT_EQ((*lines)[2], (CounterLine{"DCGM_FI_DEV_SM_CLOCK", "gauge", "", 7}));
    EXPECT_EQ((*lines)[3].line, 8u);
    EXPECT_TRUE(parse_counters_csv("", "empty.csv").value().empty());
    EXPECT_TRUE(parse_counters_csv("# only comments\n\n#\n", "c.csv").value().empty());
}

TEST(CountersCsv, MalformedLinesAreRejectedWithFileAndLine) {
    EXPECT_EQ(parse_error("# ok\nDCGM_FI_DEV_GPU_TEMP, gauge\n"),
              "counters.csv:2: 2 fields instead of 3; expected field, type, help (e.g. DCGM_FI_DEV_GPU_UTIL, gauge, "
              "GPU utilization)");
    EXPECT_NE(parse_error("DCGM_FI_DEV_GPU_TEMP, gauge, help, with a comma\n").find("counters.csv:1: 4 fields instead of 3"),
              std::string::npos);
    EXPECT_NE(parse_error("DCGM_FI_DEV_GPU_TEMP, gauge, ok\nDCGM_FI_DEV_POWER_USAGE\n").find("counters.csv:2: 1 field "),
              std::string::npos);
    EXPECT_NE(parse_error("\n\nDCGM_FI_DEV_GPU_TEMP, gauges, x\n")
                  .find("counters.csv:3: unknown Prometheus metric type 'gauges' for DCGM_FI_DEV_GPU_TEMP; expected gauge, "
                        "counter, histogram, summary or label"),
              std::string::npos);
    EXPECT_NE(parse_error("DCGM_FI_DEV_GPU_TEMP, gauge, 5\" display\n").find("counters.csv:1: a '\"' inside a field"),
              std::string::npos)
        << "a bare quote, as encoding/csv rejects it";
    EXPECT_NE(parse_error("DCGM_FI_DEV_GPU_TEMP, gauge, \"quoted after a space\"\n").find("counters.csv:1: a '\"' inside"),
              std::string::npos)
        << "a quote after a blank does not start a quoted field";
    EXPECT_NE(parse_error("a,gauge,ok\nDCGM_FI_DEV_GPU_TEMP, gauge,\"never\nclosed\n").find("counters.csv:2: a quoted field is never closed"),
              std::string::npos);
    EXPECT_NE(parse_error("DCGM_FI_DEV_GPU_TEMP, gauge,\"x\"y\n").find("counters.csv:1: text after the closing"),
              std::string::npos);
    EXPECT_NE(parse_error(" , gauge, x\n").find("counters.csv:1: an empty field name"), std::string::npos);
    EXPECT_NE(parse_error("   \n").find("counters.csv:1: 1 field instead of 3"), std::string::npos)
        << "a line of blanks is a record, as encoding/csv reads it";
    EXPECT_NE(parse_error(" # indented comment\n").find("counters.csv:1:"), std::string::npos)
        << "only a '#' in the first column starts a comment";
}

TEST(CountersCsv, SelectionNamesWhatKgpuDoesNotServe) {
    const std::vector<CounterLine> lines = {
        {"DCGM_FI_DEV_GPU_UTIL", "gauge", "mine", 1},
        {"DCGM_FI_DEV_POWER_VIOLATION", "counter", "x", 2},
        {"DCGM_EXP_XID_ERRORS_COUNT", "gauge", "x", 3},
        {"DCGM_FI_DEV_POWER_VIOLATION", "counter", "again", 4},
        {"DCGM_FI_DEV_SERIAL", "label", "x", 5},
        {"DCGM_FI_DEV_NO_SUCH_THING", "label", "x", 5},
        {"DCGM_FI_DEV_FB_USED", "histogram", "x", 6},
        {"DCGM_FI_DEV_GPU_TEMP", "counter", "first", 7},
        {"DCGM_FI_DEV_GPU_TEMP", "gauge", "", 8},
        {"kgpu_gpu_health", "gauge", "x", 9},
    };
    const CounterSelection s = select_counters(lines);
    EXPECT_EQ(s.unknown, (std::vector<std::string>{"DCGM_FI_DEV_POWER_VIOLATION", "DCGM_EXP_XID_ERRORS_COUNT",
                                                   "DCGM_FI_DEV_NO_SUCH_THING"}));
    EXPECT_EQ(s.retyped, std::vector<std::string>{"DCGM_FI_DEV_FB_USED"});
    EXPECT_TRUE(s.enabled(Metric::fb_used));
    EXPECT_EQ(s.type_of(def(Metric::fb_used)), MetricType::gauge) << "a single value is served with its own type";
    EXPECT_EQ(s.help_of(def(Metric::gpu_util)), "mine");
    EXPECT_EQ(s.type_of(def(Metric::gpu_temp)), MetricType::gauge) << "the last line naming a field wins";
    EXPECT_EQ(s.help_of(def(Metric::gpu_temp)), def(Metric::gpu_temp).help) << "an empty help keeps the catalogue's";
    EXPECT_FALSE(s.enabled(Metric::sm_clock));
    EXPECT_TRUE(s.label(LabelField::serial));
    EXPECT_FALSE(s.label(LabelField::driver_version)) << "only the label rows listed";
    EXPECT_TRUE(s.enabled(Metric::collections_total)) << "kgpu_* always";

    const CounterSelection all = all_counters();
    for (const auto& m : catalogue()) EXPECT_TRUE(all.enabled(m.id)) << m.name;
    EXPECT_TRUE(all.label(LabelField::driver_version));
    EXPECT_EQ(all.labels.count(), 1u) << "without a file, the driver version alone (as dcgm-exporter's defaults)";
}

TEST(CountersCsv, EveryLabelRowOfDcgmExportersDefaultsIsALabelField) {
    // The `label` rows of dcgm-exporter 4.5.3-4.8.2's default-counters.csv (all but the driver
    // version commented out there).
    for (const char* name : {"DCGM_FI_DRIVER_VERSION", "DCGM_FI_NVML_VERSION", "DCGM_FI_DEV_BRAND", "DCGM_FI_DEV_SERIAL",
                             "DCGM_FI_DEV_OEM_INFOROM_VER", "DCGM_FI_DEV_ECC_INFOROM_VER", "DCGM_FI_DEV_POWER_INFOROM_VER",
                             "DCGM_FI_DEV_INFOROM_IMAGE_VER", "DCGM_FI_DEV_VBIOS_VERSION"}) {
        const LabelFieldDef* f = find_label_field(name);
        ASSERT_NE(f, nullptr) << name;
        EXPECT_EQ(f->name, name);
    }
    EXPECT_EQ(find_label_field("DCGM_FI_DEV_GPU_TEMP"), nullptr);
    EXPECT_EQ(nvml::brand_name(2).dcgm, "Tesla");
    EXPECT_EQ(nvml::brand_name(14).dcgm, "NVIDIA");
    EXPECT_EQ(nvml::brand_name(11).dcgm, "NVIDIA vGaming");
    EXPECT_EQ(nvml::brand_name(0).dcgm, "Unknown");
    EXPECT_EQ(nvml::brand_name(99).dcgm, "Unknown");
}

TEST(CountersCsv, TheBuiltInDefaultsAreDcgmExportersDefaultsLessVgpu) {
    // What `-f /etc/dcgm-exporter/default-counters.csv` serves where that file is missing: the
    // same selection as the list written in the shape of dcgm-exporter's file (tests/exporter/data).
    auto builtin = parse_counters_csv(default_counters_csv(), "built-in");
    ASSERT_TRUE(builtin) << builtin.error().message;
    auto shaped = parse_counters_csv(data_file("default-counters.csv"), "default-counters.csv");
    ASSERT_TRUE(shaped) << shaped.error().message;
    const CounterSelection a = select_counters(*builtin), b = select_counters(*shaped);
    EXPECT_EQ(a.metrics, b.metrics);
    EXPECT_EQ(a.labels, b.labels);
    EXPECT_TRUE(a.unknown.empty()) << a.unknown.front();
    EXPECT_TRUE(a.retyped.empty());
    for (const auto& m : catalogue()) {
        if (!a.enabled(m.id)) continue;
        EXPECT_EQ(a.type_of(m), b.type_of(m)) << m.name;
        EXPECT_EQ(a.help_of(m), m.help) << m.name << ": the catalogue's help";
    }
}

}  // namespace
}  // namespace kgpu::exporter
