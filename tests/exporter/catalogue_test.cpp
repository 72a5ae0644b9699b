// The metric catalogue: the facts table's names and types, lint-clean kgpu_* names, and the
// generated docs page kept in step.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "deviceplugin/config.h"
#include "exporter/catalogue.h"
#include "exporter/exposition.h"

namespace kgpu::exporter {
namespace {

TEST(Catalogue, ServesEveryMetricOfTheFactsTableUnderItsDcgmNameAndType) {
    // facts/metrics-and-exposition.md, "The names dashboards expect".
    const std::map<std::string, MetricType> facts = {
        {"DCGM_FI_DEV_GPU_UTIL", MetricType::gauge},
        {"DCGM_FI_DEV_MEM_COPY_UTIL", MetricType::gauge},
        {"DCGM_FI_DEV_ENC_UTIL", MetricType::gauge},
        {"DCGM_FI_DEV_DEC_UTIL", MetricType::gauge},
        {"DCGM_FI_DEV_GPU_TEMP", MetricType::gauge},
        {"DCGM_FI_DEV_MEMORY_TEMP", MetricType::gauge},
        {"DCGM_FI_DEV_POWER_USAGE", MetricType::gauge},
        {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", MetricType::counter},
        {"DCGM_FI_DEV_SM_CLOCK", MetricType::gauge},
        {"DCGM_FI_DEV_MEM_CLOCK", MetricType::gauge},
        {"DCGM_FI_DEV_FB_USED", MetricType::gauge},
        {"DCGM_FI_DEV_FB_FREE", MetricType::gauge},
        {"DCGM_FI_DEV_FB_RESERVED", MetricType::gauge},
        {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", MetricType::counter},
        {"DCGM_FI_DEV_XID_ERRORS", MetricType::gauge},
        {"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", MetricType::counter},
        {"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", MetricType::counter},
        {"DCGM_FI_DEV_ROW_REMAP_FAILURE", MetricType::gauge},
        {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", MetricType::counter},
        {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", MetricType::counter},
    };
    std::map<std::string, MetricType> have;
    for (const auto& m : catalogue()) have[std::string(m.name)] = m.type;
    for (const auto& [name, type] : facts) {
        ASSERT_TRUE(have.count(name)) << name;
        EXPECT_EQ(have[name], type) << name;
    }
}

TEST(Catalogue, RowsAreWellFormed) {
    std::set<std::string_view> names;
    for (std::size_t i = 0; i < catalogue().size(); ++i) {
        const MetricDef& m = catalogue()[i];
        SCOPED_TRACE(std::string(m.name));
        EXPECT_EQ(static_cast<std::size_t>(m.id), i);
        EXPECT_EQ(&def(m.id), &m);
        EXPECT_TRUE(valid_metric_name(m.name));
        EXPECT_TRUE(names.insert(m.name).second) << "name used twice";
        EXPECT_FALSE(m.help.empty());
        EXPECT_FALSE(m.source.empty());
        EXPECT_FALSE(m.unit.empty());
        EXPECT_GT(m.scale, 0.0);
        const bool dcgm = m.name.starts_with("DCGM_FI_DEV_") || m.name.starts_with("DCGM_FI_PROF_");
        EXPECT_TRUE(dcgm || m.name.starts_with("kgpu_"));
        EXPECT_EQ(dcgm, m.scope == Scope::gpu || m.scope == Scope::instance);
        EXPECT_EQ(m.name.starts_with("DCGM_FI_PROF_"), m.read == Read::gpm) << "profiling metrics come from GPM";
        if (m.read != Read::none) {
            EXPECT_TRUE(dcgm);
            EXPECT_TRUE(nvml_function(m.read).starts_with("nvml")) << "errors are counted by NVML function";
            if (m.read != Read::gpm) {
                EXPECT_LT(m.part, 3u);
            }
        }
        EXPECT_EQ(find_metric(m.name), &m);
        if (!dcgm) {
            // promtool's lint: counters end in _total, nothing else does; lower-case snake_case.
            EXPECT_EQ(m.type == MetricType::counter, m.name.ends_with("_total"));
            for (char c : m.name) EXPECT_FALSE(c >= 'A' && c <= 'Z');
        }
    }
}

TEST(Catalogue, UnitsAndScalesFollowDcgm) {
    EXPECT_DOUBLE_EQ(def(Metric::power_usage).scale, 0.001);  // NVML mW -> W
    EXPECT_DOUBLE_EQ(def(Metric::fb_used).scale * 1024 * 1024, 1.0);  // bytes -> MiB
    EXPECT_TRUE(def(Metric::fb_used).whole);
    EXPECT_EQ(def(Metric::fb_used).scope, Scope::instance);   // per MIG instance on MIG GPUs
    EXPECT_EQ(def(Metric::gpu_temp).scope, Scope::gpu);
    EXPECT_EQ(def(Metric::gpu_util).read, def(Metric::mem_copy_util).read);  // one NVML call for both
}

TEST(Catalogue, ProfilingMetricsReadTheGpmMetricsDcgmDocuments) {
    // dcgm-exporter's names; NVML GPM metric ids from nvml.h (nvmlGpmMetricId_t); DCGM's units.
    const std::map<Metric, std::pair<unsigned, double>> want = {
        {Metric::prof_gr_engine_active, {1, 0.01}},   // GRAPHICS_UTIL, percent -> ratio
        {Metric::prof_sm_active, {2, 0.01}},          // SM_UTIL
        {Metric::prof_sm_occupancy, {3, 0.01}},       // SM_OCCUPANCY
        {Metric::prof_pipe_tensor_active, {7, 0.01}}, // HMMA_TENSOR_UTIL, "tensor (HMMA) pipe"
        {Metric::prof_dram_active, {10, 0.01}},       // DRAM_BW_UTIL
        {Metric::prof_pcie_tx_bytes, {20, 1048576}},  // PCIE_TX_PER_SEC, MiB/s -> bytes/s
        {Metric::prof_pcie_rx_bytes, {21, 1048576}},  // PCIE_RX_PER_SEC
        {Metric::prof_nvlink_rx_bytes, {60, 1048576}},  // NVLINK_TOTAL_RX_PER_SEC
        {Metric::prof_nvlink_tx_bytes, {61, 1048576}},  // NVLINK_TOTAL_TX_PER_SEC
    };
    for (const auto& [m, v] : want) {
        SCOPED_TRACE(std::string(def(m).name));
        EXPECT_EQ(def(m).read, Read::gpm);
        EXPECT_EQ(def(m).part, v.first);
        EXPECT_DOUBLE_EQ(def(m).scale, v.second);
        EXPECT_EQ(def(m).type, MetricType::gauge);
        EXPECT_EQ(def(m).scope, Scope::instance) << "per MIG instance on MIG GPUs, as DCGM serves GPU_I entities";
    }
    EXPECT_EQ(def(Metric::nvlink_bandwidth_total).type, MetricType::counter) << "dcgm-exporter's default CSV says counter";
    EXPECT_EQ(def(Metric::nvlink_bandwidth_total).read, Read::nvlink_throughput);
    EXPECT_EQ(find_metric("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"), &def(Metric::prof_pipe_tensor_active));
    EXPECT_EQ(find_metric("DCGM_FI_DEV_VGPU_LICENSE_STATUS"), nullptr);
}

TEST(Catalogue, XidClassesAreTheDevicePluginsDefaults) {
    const deviceplugin::HealthConfig defaults;
    for (unsigned xid = 0; xid < 300; ++xid) {
        const auto c = defaults.classify(xid);
        const std::string_view want = c == deviceplugin::XidClass::ignored       ? "application"
                                      : c == deviceplugin::XidClass::recoverable ? "recoverable"
                                                                                 : "reset-required";
        EXPECT_EQ(kXidClasses[xid_class(xid)], want) << "XID " << xid;
    }
    EXPECT_EQ(kXidClasses[xid_class(79)], "reset-required");
    EXPECT_EQ(kXidClasses[xid_class(13)], "application");
    EXPECT_EQ(kXidClasses[xid_class(94)], "recoverable");
}

TEST(Catalogue, XidErrorMessagesAreDcgmExportersTexts) {
    EXPECT_EQ(xid_error_message(0), "No Error");
    EXPECT_EQ(xid_error_message(1), "Invalid or corrupted push buffer stream");
    EXPECT_EQ(xid_error_message(4), "Invalid or corrupted push buffer stream");
    EXPECT_EQ(xid_error_message(5), "Unused");
    EXPECT_EQ(xid_error_message(13), "Graphics Engine Exception");
    EXPECT_EQ(xid_error_message(31), "GPU memory page fault");
    EXPECT_EQ(xid_error_message(48), "Double Bit ECC Error");
    EXPECT_EQ(xid_error_message(63), "ECC page retirement or row remapping recording event");
    EXPECT_EQ(xid_error_message(79), "GPU has fallen off the bus");
    EXPECT_EQ(xid_error_message(94), "Contained ECC error");
    EXPECT_EQ(xid_error_message(119), "GSP RPC Timeout");
    EXPECT_EQ(xid_error_message(154), "GPU Recovery Action Changed");
    EXPECT_EQ(xid_error_message(172), "Uncorrectable SRAM Error");
    EXPECT_EQ(xid_error_message(173), "Unknown Error");
    EXPECT_EQ(xid_error_message(4000000000u), "Unknown Error");
}

TEST(Catalogue, DocsPageIsTheGeneratedOne) {
    std::ifstream in(KGPU_SOURCE_DIR "/docs/metrics.md");
    ASSERT_TRUE(in) << "docs/metrics.md is missing: kgpu exporter --print-metrics-markdown > docs/metrics.md";
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(ss.str(), metrics_markdown())
        << "docs/metrics.md is stale: regenerate with kgpu exporter --print-metrics-markdown > docs/metrics.md";
    for (const auto& m : catalogue()) EXPECT_NE(ss.str().find(m.name), std::string::npos) << m.name;
    EXPECT_NE(ss.str().find("| `kgpu_nvml_errors_total` | counter | errors | function |"), std::string::npos)
        << "an exporter metric's own labels replace the dash";
    EXPECT_NE(ss.str().find("--collectors"), std::string::npos) << "the docs say how to choose what is served";
}

}  // namespace
}  // namespace kgpu::exporter
