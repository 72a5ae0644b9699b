// The collector in-process against the simulator (and the in-memory NVML for failures): every
// catalogue metric with the fixture's values, MIG instance series, sim events at the next
// interval, lost GPUs, NVML errors on one GPU, pod and process attribution, /health.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <fstream>
#include <functional>
#include <set>
#include <thread>

#include <unistd.h>

#include "exporter/catalogue.h"
#include "exporter/collector.h"
#include "exporter/counters.h"
#include "exporter/exporter.h"
#include "exporter/kube_status.h"
#include "metrics_text.h"
#include "nvml/library.h"
#include "support/fake_cri.h"
#include "support/fake_nvml.h"
#include "support/fake_pod_resources.h"
#include "support/process.h"

namespace kgpu::exporter {
namespace {

using test::ParsedMetrics;

std::string fixture_path(const std::string& name) { return std::string(KGPU_SOURCE_DIR) + "/sim/nodes/" + name; }

nvml::Session sim_session(const std::string& fixture, const std::string& events = "") {
    ::setenv("KGPU_SIM_NODE", fixture_path(fixture).c_str(), 1);
    if (events.empty()) ::unsetenv("KGPU_SIM_EVENTS");
    else ::setenv("KGPU_SIM_EVENTS", events.c_str(), 1);
    auto s = nvml::open_session({KGPU_SIM_LIBRARY, "/"});
    if (!s) ADD_FAILURE() << s.error().message;
    return std::move(*s);
}

CollectorOptions options(std::string hostname = "node-a") {
    CollectorOptions o;
    o.interval = std::chrono::milliseconds(200);
    o.hostname = std::move(hostname);
    return o;
}

ParsedMetrics collect(Collector& c) {
    c.collect();
    auto parsed = test::parse_metrics(*c.snapshot()->text());
    EXPECT_TRUE(parsed.errors.empty()) << parsed.errors[0];
    return parsed;
}

// Polls the running collector's snapshots until `ok` holds (generous deadline: busy machine).
bool wait_for(const Collector& c, const std::function<bool(const ParsedMetrics&)>& ok, int seconds = 30) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
        if (auto s = c.snapshot(); s && ok(test::parse_metrics(*s->text()))) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
}

void append(const std::string& file, const std::string& line) {
    std::ofstream out(file, std::ios::app);
    out << line << "\n";
}

std::map<std::string, std::string> gpu(unsigned i) { return {{"gpu", std::to_string(i)}}; }

const std::vector<std::string> kDcgmLabels = {"gpu",      "UUID",     "pci_bus_id",
                                              "device",   "modelName", "Hostname",
                                              "DCGM_FI_DRIVER_VERSION"};

// Every DCGM metric of the catalogue for every GPU of `fixture`, against the YAML's values.
void check_fixture(const std::string& fixture) {
    SCOPED_TRACE(fixture);
    const YAML::Node yaml = YAML::LoadFile(fixture_path(fixture));
    Collector c(sim_session(fixture), options());
    c.collect();
    // Profiling metrics need a second GPM sample at least 100 ms after the first.
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    const ParsedMetrics m = collect(c);
    const std::string driver = yaml["driver_version"].as<std::string>();
    unsigned index = 0;
    for (const auto& g : yaml["gpus"]) {
        SCOPED_TRACE("GPU " + std::to_string(index));
        const YAML::Node t = g["telemetry"];
        auto tel = [&](const char* key, double dflt) { return t && t[key] ? t[key].as<double>() : dflt; };
        const bool mig = g["mig"] && g["mig"]["mode"] && g["mig"]["mode"].as<std::string>() == "enabled";
        const std::map<std::string, std::string> sel = {{"gpu", std::to_string(index)},
                                                        {"UUID", g["uuid"].as<std::string>()}};
        auto value = [&](Metric metric) -> std::optional<double> {
            std::vector<const test::ParsedSample*> found;
            for (const auto* s : m.find(def(metric).name, sel))
                if (!s->label("GPU_I_ID")) found.push_back(s);
            if (found.size() != 1) return std::nullopt;
            // Labels in dcgm-exporter's order, with the fixture's values.
            std::vector<std::string> names;
            for (const auto& [k, v] : found[0]->labels) names.push_back(k);
            auto want = kDcgmLabels;
            if (metric == Metric::xid_errors) {
                want.push_back("err_code");
                want.push_back("err_msg");
            }
            EXPECT_EQ(names, want) << found[0]->line;
            EXPECT_EQ(found[0]->label("pci_bus_id"), g["pci_bus_id"].as<std::string>());
            EXPECT_EQ(found[0]->label("device"), "nvidia" + std::to_string(index));
            EXPECT_EQ(found[0]->label("modelName"), g["name"].as<std::string>());
            EXPECT_EQ(found[0]->label("Hostname"), "node-a");
            EXPECT_EQ(found[0]->label("DCGM_FI_DRIVER_VERSION"), driver);
            return found[0]->value;
        };
        auto expect_near = [&](Metric metric, double want, double tolerance) {
            auto v = value(metric);
            ASSERT_TRUE(v) << def(metric).name << " missing";
            EXPECT_NEAR(*v, want, tolerance) << def(metric).name;
        };
        expect_near(Metric::sm_clock, tel("sm_clock_mhz", 1410), 0);
        expect_near(Metric::mem_clock, tel("mem_clock_mhz", 1593), 0);
        expect_near(Metric::gpu_temp, tel("temperature_c", 34), 2);
        if (t && t["memory_temperature_c"]) expect_near(Metric::memory_temp, tel("memory_temperature_c", 0), 2);
        else EXPECT_FALSE(value(Metric::memory_temp)) << "a GPU without HBM has no memory temperature series";
        const double watts = tel("power_w", 70);
        expect_near(Metric::power_usage, watts, watts * 0.05 + 0.001);
        ASSERT_TRUE(value(Metric::total_energy_consumption));
        EXPECT_GE(*value(Metric::total_energy_consumption), tel("energy_j", 0) * 1000);
        expect_near(Metric::pcie_replay_counter, tel("pcie_replay", 0), 0);
        const double util = tel("gpu_util", 0), mem_util = tel("mem_util", 0);
        if (!mig) {
            expect_near(Metric::gpu_util, util, util == 0 ? 0 : 5);
            expect_near(Metric::mem_copy_util, mem_util, mem_util == 0 ? 0 : 5);
            expect_near(Metric::enc_util, tel("enc_util", 0), 0);
            expect_near(Metric::dec_util, tel("dec_util", 0), 0);
        } else {
            // NVML does not answer utilisation on a MIG-enabled GPU (nvml.h), and DCGM leaves the
            // fields blank, which dcgm-exporter skips: no series, never a made-up 0 (issue #23).
            for (Metric u : {Metric::gpu_util, Metric::mem_copy_util, Metric::enc_util, Metric::dec_util})
                EXPECT_TRUE(m.find(def(u).name, sel).empty()) << def(u).name << " for a MIG-enabled GPU";
        }
        expect_near(Metric::xid_errors, 0, 0);
        auto xid = m.find("DCGM_FI_DEV_XID_ERRORS", sel);
        ASSERT_EQ(xid.size(), 1u);
        EXPECT_EQ(xid[0]->label("err_code"), "0");
        EXPECT_EQ(xid[0]->label("err_msg"), "No Error") << "dcgm-exporter labels the 0 of no XID too";
        // Profiling metrics: Hopper only (GPM); idle GPUs are 0, PCIe traffic is the fixture's.
        const bool hopper = g["architecture"].as<std::string>() == "hopper";
        const bool nvlink = g["nvlink"] || g["nvswitch_links"];
        if (hopper && !mig) {
            expect_near(Metric::prof_gr_engine_active, util / 100, 0.06);
            expect_near(Metric::prof_sm_active, 0.9 * util / 100, 0.06);
            expect_near(Metric::prof_pipe_tensor_active, 0.45 * util / 100, 0.06);
            expect_near(Metric::prof_dram_active, mem_util / 100, 0.06);
            expect_near(Metric::prof_pcie_tx_bytes, tel("pcie_tx_kbps", 0) * 1024, 1);
            expect_near(Metric::prof_pcie_rx_bytes, tel("pcie_rx_kbps", 0) * 1024, 1);
            ASSERT_TRUE(value(Metric::prof_sm_occupancy));
            ASSERT_TRUE(value(Metric::prof_nvlink_tx_bytes));
            ASSERT_TRUE(value(Metric::prof_nvlink_rx_bytes));
        } else {
            for (const auto& d : catalogue())
                if (d.read == Read::gpm) {
                    EXPECT_TRUE(m.find(d.name, sel).empty()) << d.name << ": no GPM before Hopper, never a sentinel";
                }
        }
        if (nvlink) {
            ASSERT_TRUE(value(Metric::nvlink_bandwidth_total)) << "NVLink bandwidth on a GPU with NVLink";
            if (util == 0) expect_near(Metric::nvlink_bandwidth_total, 0, 0);
        } else {
            EXPECT_FALSE(value(Metric::nvlink_bandwidth_total)) << "no NVLink, no series";
        }
        expect_near(Metric::ecc_sbe_vol_total, 0, 0);
        expect_near(Metric::ecc_dbe_vol_total, 0, 0);
        if (!mig) {
            expect_near(Metric::correctable_remapped_rows, 0, 0);
            expect_near(Metric::uncorrectable_remapped_rows, 0, 0);
            expect_near(Metric::row_remap_failure, 0, 0);
        } else {  // nvml.h: not supported on a MIG-enabled GPU with active instances
            for (Metric r : {Metric::correctable_remapped_rows, Metric::uncorrectable_remapped_rows, Metric::row_remap_failure})
                EXPECT_TRUE(m.find(def(r).name, sel).empty()) << def(r).name << " for a MIG-enabled GPU";
        }
        const double total = g["memory_mib"].as<double>();
        if (!mig) {
            const double used = tel("fb_used_mib", 0), reserved = g["reserved_mib"] ? g["reserved_mib"].as<double>() : 0;
            expect_near(Metric::fb_used, used, 0);
            expect_near(Metric::fb_reserved, reserved, 0);
            expect_near(Metric::fb_free, total - reserved - used, 0);
        } else {
            EXPECT_FALSE(value(Metric::fb_used)) << "MIG GPUs report memory per instance only";
            const auto& devices = g["mig"]["devices"];
            EXPECT_EQ(m.find("DCGM_FI_DEV_FB_USED", sel).size(), devices.size());
            for (const auto& d : devices) {
                auto s = m.find("DCGM_FI_DEV_FB_FREE", {{"gpu", std::to_string(index)},
                                                        {"GPU_I_ID", d["gpu_instance_id"].as<std::string>()},
                                                        {"GPU_I_PROFILE", d["profile"].as<std::string>()}});
                ASSERT_EQ(s.size(), 1u) << d["profile"].as<std::string>();
                EXPECT_EQ(s[0]->value, d["memory_mib"].as<double>());
                std::vector<std::string> names;
                for (const auto& [k, v] : s[0]->labels) names.push_back(k);
                EXPECT_EQ(names, (std::vector<std::string>{"gpu", "UUID", "pci_bus_id", "device", "modelName",
                                                           "GPU_I_PROFILE", "GPU_I_ID", "Hostname",
                                                           "DCGM_FI_DRIVER_VERSION"}));
            }
            EXPECT_TRUE(m.find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", std::to_string(index)}, {"GPU_I_ID", "7"}}).empty())
                << "device-wide metrics stay on the GPU's series";
        }
        EXPECT_EQ(m.value("kgpu_gpu_health", {{"gpu", std::to_string(index)}, {"state", "ok"}}), 1.0);
        EXPECT_EQ(m.value("kgpu_gpu_xid_events_total", sel), 0.0);
        // Every class at 0 from the start (a counter first seen at 1 has no increase in PromQL).
        for (const char* c : {"application", "recoverable", "reset-required"}) {
            auto with_class = sel;
            with_class["xid_class"] = c;
            EXPECT_EQ(m.value("kgpu_gpu_xid_class_events_total", with_class), 0.0) << c;
        }
        ++index;
    }
    EXPECT_EQ(m.value("kgpu_collections_total"), 2.0);
    EXPECT_TRUE(m.value("kgpu_collection_duration_seconds"));
    EXPECT_TRUE(m.find("kgpu_nvml_errors_total").empty()) << "no NVML call failed";
    EXPECT_TRUE(m.find("kgpu_exporter_pod_attribution_up").empty()) << "only with --kubernetes";
    // Every catalogue metric of the GPU kinds appears, where the GPUs have what it measures.
    const std::string arch = yaml["gpus"][0]["architecture"].as<std::string>();
    for (const auto& d : catalogue()) {
        const bool per_gpu = d.scope == Scope::gpu || d.scope == Scope::instance || d.scope == Scope::kgpu_gpu;
        const bool absent = (d.id == Metric::memory_temp && fixture == "t4x4.yaml") ||
                            (d.read == Read::gpm && arch != "hopper") ||
                            (d.id == Metric::nvlink_bandwidth_total && fixture == "t4x4.yaml") ||
                            d.id == Metric::pods_over_limit /* only with --kubernetes */;
        if (per_gpu && !absent) {
            EXPECT_FALSE(m.find(d.name).empty()) << d.name;
        }
    }
}

TEST(Collector, DgxH100EveryMetricWithTheFixturesValues) { check_fixture("dgx-h100.yaml"); }
TEST(Collector, T4EveryMetricExceptMemoryTemperature) { check_fixture("t4x4.yaml"); }
TEST(Collector, A100MigInstancesAreTheirOwnSeries) { check_fixture("a100-mig.yaml"); }
TEST(Collector, PcieNvlinkPairs) { check_fixture("pcie-nvlink-pairs.yaml"); }

TEST(Collector, EmptyNodeServesOnlyExporterMetrics) {
    Collector c(sim_session("empty.yaml"), options());
    auto m = collect(c);
    for (const auto& s : m.samples) EXPECT_TRUE(s.name.starts_with("kgpu_")) << s.line;
    EXPECT_EQ(m.value("kgpu_collections_total"), 1.0);
}

TEST(Collector, HostnameLabelSpellingAndNoHostname) {
    {
        auto o = options("gpu-node-7");
        o.hostname_label = "hostname";
        Collector c(sim_session("t4x4.yaml"), o);
        auto m = collect(c);
        auto s = m.find("DCGM_FI_DEV_GPU_TEMP", gpu(0));
        ASSERT_EQ(s.size(), 1u);
        EXPECT_EQ(s[0]->label("hostname"), "gpu-node-7");
        EXPECT_FALSE(s[0]->label("Hostname"));
    }
    {
        auto o = options();
        o.hostname.reset();
        Collector c(sim_session("t4x4.yaml"), o);
        auto m = collect(c);
        auto s = m.find("DCGM_FI_DEV_GPU_TEMP", gpu(0));
        ASSERT_EQ(s.size(), 1u);
        EXPECT_FALSE(s[0]->label("Hostname"));
        EXPECT_EQ(s[0]->labels.back().first, "DCGM_FI_DRIVER_VERSION");
    }
}

TEST(Collector, SimEventsShowAtTheNextInterval) {
    test::TempDir dir;
    const std::string events = dir.write("events", "");
    Collector c(sim_session("dgx-h100.yaml", events), options());
    c.collect();
    c.start();

    append(events, "util 3 77 55");
    EXPECT_TRUE(wait_for(c, [](const ParsedMetrics& m) {
        return m.value("DCGM_FI_DEV_GPU_UTIL", gpu(3)) == 77.0 && m.value("DCGM_FI_DEV_MEM_COPY_UTIL", gpu(3)) == 55.0;
    }));

    append(events, "proc 2 4242 2147483648 python3");
    EXPECT_TRUE(wait_for(c, [](const ParsedMetrics& m) {
        return m.value("kgpu_process_fb_used_bytes", {{"gpu", "2"}, {"pid", "4242"}, {"process", "python3"}}) ==
                   2147483648.0 &&
               m.value("DCGM_FI_DEV_FB_USED", gpu(2)) == 2048.0;
    }));
    append(events, "noproc 2 4242");
    EXPECT_TRUE(wait_for(c, [](const ParsedMetrics& m) {
        return m.find("kgpu_process_fb_used_bytes").empty() && m.value("DCGM_FI_DEV_FB_USED", gpu(2)) == 0.0;
    }));

    append(events, "xid 1 31");
    EXPECT_TRUE(wait_for(c, [](const ParsedMetrics& m) {
        return m.value("DCGM_FI_DEV_XID_ERRORS", gpu(1)) == 31.0 && m.value("kgpu_gpu_last_xid", gpu(1)) == 31.0 &&
               m.value("kgpu_gpu_xid_events_total", gpu(1)) == 1.0 && m.value("DCGM_FI_DEV_XID_ERRORS", gpu(0)) == 0.0 &&
               m.value("DCGM_FI_DEV_XID_ERRORS", {{"gpu", "1"}, {"err_code", "31"}, {"err_msg", "GPU memory page fault"}}) ==
                   31.0;
    }));
    // By class: 31 is the application's; then 94 (recoverable) and 48 (reset) on the same GPU.
    append(events, "xid 1 94\nxid 1 48\nxid 1 48\n");
    auto klass = [](const char* gpu, const char* c) {
        return std::map<std::string, std::string>{{"gpu", gpu}, {"xid_class", c}};
    };
    EXPECT_TRUE(wait_for(c, [&](const ParsedMetrics& m) {
        return m.value("kgpu_gpu_xid_events_total", gpu(1)) == 4.0 &&
               m.value("kgpu_gpu_xid_class_events_total", klass("1", "application")) == 1.0 &&
               m.value("kgpu_gpu_xid_class_events_total", klass("1", "recoverable")) == 1.0 &&
               m.value("kgpu_gpu_xid_class_events_total", klass("1", "reset-required")) == 2.0 &&
               m.value("kgpu_gpu_xid_class_events_total", klass("0", "reset-required")) == 0.0;
    })) << "kgpu_gpu_xid_class_events_total by class after XIDs 31, 94, 48, 48 on GPU 1";

    append(events, "lost 5");
    EXPECT_TRUE(wait_for(c, [](const ParsedMetrics& m) {
        bool gone = true;
        for (const auto& s : m.samples)
            if (s.name.starts_with("DCGM_") && s.label("gpu") == "5") gone = false;
        return gone && m.value("kgpu_gpu_health", {{"gpu", "5"}, {"state", "lost"}}) == 1.0 &&
               m.value("kgpu_gpu_health", {{"gpu", "5"}, {"state", "ok"}}) == 0.0 &&
               m.value("kgpu_gpu_last_xid", gpu(5)) == 79.0 && m.value("DCGM_FI_DEV_GPU_TEMP", gpu(4)).has_value() &&
               m.value("DCGM_FI_DEV_GPU_TEMP", gpu(6)).has_value();
    }));

    append(events, "restore 5");
    EXPECT_TRUE(wait_for(c, [](const ParsedMetrics& m) {
        return m.value("DCGM_FI_DEV_GPU_TEMP", gpu(5)).has_value() &&
               m.value("kgpu_gpu_health", {{"gpu", "5"}, {"state", "ok"}}) == 1.0;
    }));
    c.stop();
}

TEST(Collector, ProfilingMetricsFromGpmFollowTheGpuOnHopperOnly) {
  {  // (the simulator loads a new node only once the last session is gone)
    test::TempDir dir;
    const std::string events = dir.write("events", "");
    Collector c(sim_session("dgx-h100.yaml", events), options());
    auto first = collect(c);
    EXPECT_TRUE(first.find("DCGM_FI_PROF_GR_ENGINE_ACTIVE").empty()) << "one sample is not a rate yet";
    c.start();
    append(events, "util 4 80 40");
    append(events, "gpm 4 tensor_util=12.5 pcie_tx=10 nvlink_rx=3");
    EXPECT_TRUE(wait_for(c, [](const ParsedMetrics& m) {
        auto near = [&](const char* name, double want) {
            auto v = m.value(name, gpu(4));
            return v && std::abs(*v - want) < 1e-6 * std::max(1.0, want);
        };
        return near("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.8) && near("DCGM_FI_PROF_SM_ACTIVE", 0.72) &&
               near("DCGM_FI_PROF_SM_OCCUPANCY", 0.48) && near("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.125) &&
               near("DCGM_FI_PROF_DRAM_ACTIVE", 0.4) && near("DCGM_FI_PROF_PCIE_TX_BYTES", 10 * 1048576.0) &&
               near("DCGM_FI_PROF_NVLINK_RX_BYTES", 3 * 1048576.0) &&
               near("DCGM_FI_PROF_NVLINK_TX_BYTES", 0.8 * 18 * 1000 * 1048576.0) &&
               near("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.8) && m.value("DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu(3)) == 0.0;
    })) << "NVML percent -> DCGM ratio, MiB/s -> bytes/s";
    // NVLink bandwidth as DCGM computes it: (KiB now - KiB before) / s / 1000, TX + RX.
    EXPECT_TRUE(wait_for(c, [](const ParsedMetrics& m) {
        auto v = m.value("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", gpu(4));
        const double want = (0.8 * 18 * 1000 + 3) * 1024 / 1000;  // MiB/s TX + RX, in KiB/s / 1000
        return v && *v > want * 0.85 && *v < want * 1.15 && *v == std::floor(*v) &&
               m.value("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", gpu(3)) == 0.0;
    }));
    c.stop();
  }

    Collector t4(sim_session("t4x4.yaml"), options());
    t4.collect();
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    for (const auto& s : collect(t4).samples) {
        EXPECT_FALSE(s.name.starts_with("DCGM_FI_PROF_")) << s.line;
        EXPECT_NE(s.name, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL") << s.line;
    }
}

TEST(Collector, ProfilingMetricsPerMigInstance) {
    ::setenv("KGPU_SIM_NODE", (std::string(KGPU_SOURCE_DIR) + "/tests/exporter/h100-mig.yaml").c_str(), 1);
    test::TempDir dir;
    const std::string events = dir.write("events", "util 0 50 20\ngpm 0:0 sm_util=33\n");
    ::setenv("KGPU_SIM_EVENTS", events.c_str(), 1);
    auto s = nvml::open_session({KGPU_SIM_LIBRARY, "/"});
    ASSERT_TRUE(s) << s.error().message;
    Collector c(std::move(*s), options());
    c.collect();
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    auto m = collect(c);
    // The simulator integrates rates over time: equal up to rounding.
    auto near = [&](const char* name, const std::map<std::string, std::string>& sel, double want) {
        auto v = m.value(name, sel);
        ASSERT_TRUE(v) << name;
        EXPECT_NEAR(*v, want, 1e-9) << name;
    };
    near("DCGM_FI_PROF_SM_ACTIVE", {{"gpu", "0"}, {"GPU_I_ID", "1"}, {"GPU_I_PROFILE", "3g.40gb"}}, 0.33);
    near("DCGM_FI_PROF_SM_ACTIVE", {{"gpu", "0"}, {"GPU_I_ID", "9"}}, 0.45);
    near("DCGM_FI_PROF_GR_ENGINE_ACTIVE", {{"gpu", "0"}, {"GPU_I_ID", "9"}}, 0.5);
    EXPECT_EQ(m.find("DCGM_FI_PROF_SM_ACTIVE", gpu(0)).size(), 2u) << "per instance only on a MIG GPU";
    EXPECT_EQ(m.find("DCGM_FI_PROF_SM_ACTIVE", gpu(1)).size(), 1u) << "the whole GPU without MIG";
    EXPECT_TRUE(m.find("kgpu_nvml_errors_total").empty());
    // A pass sooner than NVML's 100 ms keeps the baseline and serves the last rates again.
    m = collect(c);
    near("DCGM_FI_PROF_SM_ACTIVE", {{"gpu", "0"}, {"GPU_I_ID", "1"}}, 0.33);
    EXPECT_EQ(m.find("DCGM_FI_PROF_SM_ACTIVE").size(), 3u);
}

TEST(Collector, ACountersFileLimitsWhatIsServedWithItsTypesAndHelp) {
    const std::string csv =
        "# field, type, help\n"
        "DCGM_FI_DEV_GPU_TEMP, gauge, Temperature as we call it.\n"
        "DCGM_FI_DEV_POWER_USAGE, counter, Power.\n"
        "DCGM_FI_PROF_DRAM_ACTIVE, gauge, DRAM.\n"
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU License status\n";
    auto lines = parse_counters_csv(csv, "custom.csv");
    ASSERT_TRUE(lines) << lines.error().message;
    auto o = options();
    o.counters = select_counters(*lines);
    EXPECT_EQ(o.counters.unknown, std::vector<std::string>{"DCGM_FI_DEV_VGPU_LICENSE_STATUS"});
    Collector c(sim_session("dgx-h100.yaml"), o);
    c.collect();
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    c.collect();
    const std::string text = *c.snapshot()->text();
    auto m = test::parse_metrics(text);
    ASSERT_TRUE(m.errors.empty()) << m.errors[0];
    std::set<std::string> dcgm;
    for (const auto& s : m.samples)
        if (s.name.starts_with("DCGM_")) dcgm.insert(s.name);
    EXPECT_EQ(dcgm, (std::set<std::string>{"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_DRAM_ACTIVE"}));
    EXPECT_EQ(m.help["DCGM_FI_DEV_GPU_TEMP"], "Temperature as we call it.");
    EXPECT_EQ(m.type["DCGM_FI_DEV_POWER_USAGE"], "counter") << "the file's type";
    EXPECT_FALSE(m.find("DCGM_FI_DEV_GPU_TEMP")[0]->label("DCGM_FI_DRIVER_VERSION"))
        << "the driver label only when listed as a label row";
    EXPECT_FALSE(m.find("kgpu_gpu_health").empty()) << "kgpu's own metrics stay";
}

TEST(Collector, ReplaceBlanksInModelName) {
    auto o = options();
    o.replace_blanks_in_model_name = true;
    Collector c(sim_session("dgx-h100.yaml"), o);
    auto m = collect(c);
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP", gpu(0))[0]->label("modelName"), "NVIDIA-H100-80GB-HBM3");
}

TEST(Collector, MigReconfigurationIsPickedUp) {
    test::TempDir dir;
    const std::string events = dir.write("events", "");
    Collector c(sim_session("a100-mig.yaml", events), options());
    EXPECT_EQ(collect(c).find("DCGM_FI_DEV_GPU_UTIL", gpu(2)).size(), 1u);
    c.start();
    append(events, "mig 2 3g.40gb,3g.40gb");
    // MIG on: the instances' series come, and GPU 2's utilisation goes (NVML answers NOT_SUPPORTED
    // on a MIG-enabled GPU; issue #23), without counting an NVML error.
    EXPECT_TRUE(wait_for(c, [](const ParsedMetrics& m) {
        return m.find("DCGM_FI_DEV_FB_FREE", {{"gpu", "2"}, {"GPU_I_PROFILE", "3g.40gb"}}).size() == 2 &&
               m.find("DCGM_FI_DEV_FB_FREE", {{"gpu", "2"}}).size() == 2 && m.find("DCGM_FI_DEV_GPU_UTIL", gpu(2)).empty() &&
               m.find("DCGM_FI_DEV_DEC_UTIL", gpu(2)).empty();
    }));
    // MIG off again: utilisation is answered and served again.
    append(events, "mig 2 off");
    EXPECT_TRUE(wait_for(c, [](const ParsedMetrics& m) {
        return m.find("DCGM_FI_DEV_GPU_UTIL", gpu(2)).size() == 1 && m.find("DCGM_FI_DEV_FB_FREE", {{"gpu", "2"}}).size() == 1;
    }));
    auto last = test::parse_metrics(*c.snapshot()->text());
    EXPECT_TRUE(last.find("kgpu_nvml_errors_total").empty()) << "NOT_SUPPORTED is not an error";
    c.stop();
}

TEST(Collector, AnNvmlErrorOnOneGpuLeavesTheOthersIntact) {
    test::fake_node() = {};
    test::fake_node().gpus.resize(2);
    test::fake_node().gpus[1].uuid = "GPU-11111111-1111-1111-1111-111111111111";
    test::fake_node().gpus[1].bus_id = "00000000:02:00.0";
    auto table = test::fake_table();
    table.DeviceGetPowerUsage = [](nvmlDevice_t d, unsigned* mw) {
        if (reinterpret_cast<std::uintptr_t>(d) == 2) return NVML_ERROR_UNKNOWN;  // GPU 1
        *mw = 50000;
        return NVML_SUCCESS;
    };
    table.DeviceGetTemperature = [](nvmlDevice_t, nvmlTemperatureSensors_t, unsigned* t) {
        *t = 40;
        return NVML_SUCCESS;
    };
    auto lib = nvml::Library::from_table(table, "fake");
    ASSERT_TRUE(lib);
    auto session = nvml::Session::open(*lib);
    ASSERT_TRUE(session);
    Collector c(std::move(*session), options());
    auto m = collect(c);
    EXPECT_EQ(m.value("DCGM_FI_DEV_POWER_USAGE", gpu(0)), 50.0);
    EXPECT_FALSE(m.value("DCGM_FI_DEV_POWER_USAGE", gpu(1)));
    EXPECT_EQ(m.value("DCGM_FI_DEV_GPU_TEMP", gpu(1)), 40.0) << "GPU 1's other series stay";
    EXPECT_EQ(m.value("kgpu_nvml_errors_total", {{"function", "nvmlDeviceGetPowerUsage"}}), 1.0);
    EXPECT_EQ(m.value("kgpu_gpu_health", {{"gpu", "1"}, {"state", "error"}}), 1.0);
    EXPECT_EQ(m.value("kgpu_gpu_health", {{"gpu", "0"}, {"state", "ok"}}), 1.0);
    // Unsupported entries (null in the fake table) are absent, not errors or sentinels.
    EXPECT_TRUE(m.find("DCGM_FI_DEV_SM_CLOCK").empty());
    m = collect(c);
    EXPECT_EQ(m.value("kgpu_nvml_errors_total", {{"function", "nvmlDeviceGetPowerUsage"}}), 2.0);
    EXPECT_EQ(m.value("kgpu_collections_total"), 2.0);
}

// NVML's event semantics in memory: an event reaches only the sets registered when it happens.
struct FakeEvents {
    std::mutex mu;
    std::condition_variable cv;
    bool registered = false;
    std::deque<nvmlEventData_t> queue;
};
FakeEvents& fake_events() {
    static FakeEvents e;
    return e;
}
void raise_xid(unsigned gpu_index, unsigned long long xid) {
    auto& e = fake_events();
    std::lock_guard lk(e.mu);
    if (e.registered)
        e.queue.push_back({reinterpret_cast<nvmlDevice_t>(static_cast<std::uintptr_t>(gpu_index + 1)),
                           nvmlEventTypeXidCriticalError, xid, 0xFFFFFFFFu, 0xFFFFFFFFu});
    e.cv.notify_all();
}

// An XID raised as soon as start() has returned is counted: the GPUs are registered for events
// before it returns, even with a driver slow to make an event set (issue #23: the demo's XID,
// appended right after the exporter started, showed as XID 0 "No Error" in 2 of 20 runs).
TEST(Collector, AnXidRightAfterStartIsCounted) {
    test::fake_node() = {};
    test::fake_node().gpus.resize(1);
    {
        std::lock_guard lk(fake_events().mu);
        fake_events().registered = false;
        fake_events().queue.clear();
    }
    auto table = test::fake_table();
    table.EventSetCreate = [](nvmlEventSet_t* set) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a busy driver
        *set = reinterpret_cast<nvmlEventSet_t>(1);
        return NVML_SUCCESS;
    };
    table.DeviceRegisterEvents = [](nvmlDevice_t, unsigned long long, nvmlEventSet_t) {
        std::lock_guard lk(fake_events().mu);
        fake_events().registered = true;
        return NVML_SUCCESS;
    };
    table.EventSetWait = [](nvmlEventSet_t, nvmlEventData_t* data, unsigned timeout_ms) {
        auto& e = fake_events();
        std::unique_lock lk(e.mu);
        if (!e.cv.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return !e.queue.empty(); }))
            return NVML_ERROR_TIMEOUT;
        *data = e.queue.front();
        e.queue.pop_front();
        return NVML_SUCCESS;
    };
    table.EventSetFree = [](nvmlEventSet_t) {
        std::lock_guard lk(fake_events().mu);
        fake_events().registered = false;
        return NVML_SUCCESS;
    };
    auto lib = nvml::Library::from_table(table, "fake");
    ASSERT_TRUE(lib);
    auto session = nvml::Session::open(*lib);
    ASSERT_TRUE(session);
    Collector c(std::move(*session), options());
    c.start();
    raise_xid(0, 94);
    EXPECT_TRUE(wait_for(
        c, [](const ParsedMetrics& m) { return m.value("DCGM_FI_DEV_XID_ERRORS", gpu(0)) == 94.0; }, 10))
        << "the XID raised right after start() was lost";
    c.stop();
}

TEST(Collector, GpmFailuresAreCountedAndADriverWithoutGpmBuffersIsNoError) {
    test::fake_node() = {};
    test::fake_node().gpus.resize(2);
    test::fake_node().gpus[1].uuid = "GPU-11111111-1111-1111-1111-111111111111";
    test::fake_node().gpus[1].bus_id = "00000000:02:00.0";
    auto table = test::fake_table();
    table.DeviceGetTemperature = [](nvmlDevice_t, nvmlTemperatureSensors_t, unsigned* t) {
        *t = 40;
        return NVML_SUCCESS;
    };
    table.GpmQueryDeviceSupport = [](nvmlDevice_t, nvmlGpmSupport_t* s) {
        s->isSupportedDevice = 1;
        return NVML_SUCCESS;
    };
    {
        // No nvmlGpmSampleAlloc (an old driver): no profiling series, no error.
        auto lib = nvml::Library::from_table(table, "fake");
        ASSERT_TRUE(lib);
        auto session = nvml::Session::open(*lib);
        ASSERT_TRUE(session);
        Collector c(std::move(*session), options());
        c.collect();
        std::this_thread::sleep_for(std::chrono::milliseconds(120));
        auto m = collect(c);
        EXPECT_TRUE(m.find("DCGM_FI_PROF_SM_ACTIVE").empty());
        EXPECT_TRUE(m.find("kgpu_nvml_errors_total").empty());
        EXPECT_EQ(m.value("kgpu_gpu_health", {{"gpu", "0"}, {"state", "ok"}}), 1.0);
    }
    // Sampling fails on GPU 1: counted by function, GPU 1 in state error, GPU 0's metrics intact.
    static int buffers = 0;
    table.GpmSampleAlloc = [](nvmlGpmSample_t* s) {
        s->handle = reinterpret_cast<nvmlGpmSample_st*>(static_cast<std::uintptr_t>(0x1000 + ++buffers));
        return NVML_SUCCESS;
    };
    table.GpmSampleFree = [](nvmlGpmSample_t) { return NVML_SUCCESS; };
    table.GpmSampleGet = [](nvmlDevice_t d, nvmlGpmSample_t) {
        return reinterpret_cast<std::uintptr_t>(d) == 2 ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
    };
    table.GpmMetricsGet = [](nvmlGpmMetricsGet_t* g) {
        for (unsigned i = 0; i < g->numMetrics; ++i) {
            g->metrics[i].nvmlReturn = NVML_SUCCESS;
            g->metrics[i].value = 50;
        }
        return NVML_SUCCESS;
    };
    auto lib = nvml::Library::from_table(table, "fake");
    ASSERT_TRUE(lib);
    auto session = nvml::Session::open(*lib);
    ASSERT_TRUE(session);
    Collector c(std::move(*session), options());
    c.collect();
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    auto m = collect(c);
    EXPECT_EQ(m.value("DCGM_FI_PROF_SM_ACTIVE", gpu(0)), 0.5);
    EXPECT_EQ(m.value("DCGM_FI_PROF_PCIE_TX_BYTES", gpu(0)), 50.0 * 1048576);
    EXPECT_FALSE(m.value("DCGM_FI_PROF_SM_ACTIVE", gpu(1)));
    EXPECT_EQ(m.value("DCGM_FI_DEV_GPU_TEMP", gpu(1)), 40.0);
    EXPECT_EQ(m.value("kgpu_nvml_errors_total", {{"function", "nvmlGpmSampleGet"}}), 2.0) << "one per pass";
    EXPECT_EQ(m.value("kgpu_gpu_health", {{"gpu", "1"}, {"state", "error"}}), 1.0);
    EXPECT_EQ(m.value("kgpu_gpu_health", {{"gpu", "0"}, {"state", "ok"}}), 1.0);
}

// A GPU-holding pod's cgroup under the systemd driver.
std::string cgroup_of(const std::string& container_id) {
    return "0::/kubepods.slice/kubepods-burstable.slice/"
           "kubepods-burstable-pod1f2e3d4c_5b6a_7980_1a2b_3c4d5e6f7a8b.slice/cri-containerd-" +
           container_id + ".scope\n";
}

TEST(Collector, PodLabelsFromPodResourcesAndPodsOfProcessesFromCri) {
    test::TempDir dir;
    const YAML::Node yaml = YAML::LoadFile(fixture_path("dgx-h100.yaml"));
    const std::string uuid0 = yaml["gpus"][0]["uuid"].as<std::string>();
    const std::string uuid1 = yaml["gpus"][1]["uuid"].as<std::string>();
    auto pr = std::make_unique<test::FakePodResources>(dir.path() + "/pod-resources.sock");
    ASSERT_TRUE(pr->start());
    pr->add_pod("ml", "trainer-0", "main", "nvidia.com/gpu", {uuid0});
    pr->add_pod("ml", "shared-a", "worker", "nvidia.com/gpu", {uuid1 + "::0"});
    pr->add_pod("ml", "shared-b", "worker", "nvidia.com/gpu", {uuid1 + "::3"});
    pr->add_pod("web", "by-index", "app", "nvidia.com/gpu", {"2"});
    pr->add_pod("web", "not-a-gpu", "app", "example.com/fpga", {"3"});

    const std::string id(64, 'a');
    test::FakeCri cri(dir.path() + "/cri.sock");
    ASSERT_TRUE(cri.start());
    cri.add_container(id, "ml", "shared-a", "worker");
    dir.write("proc/4242/cgroup", cgroup_of(id));
    dir.write("proc/5151/cgroup", "0::/user.slice/session-1.scope\n");  // not in a pod
    const std::string events = dir.write("events", "proc 1 4242 1073741824 train.py\nproc 1 5151 4096 Xorg\n");

    auto o = options();
    o.kubernetes = true;
    o.pod_resources.socket = dir.path() + "/pod-resources.sock";
    o.cri_endpoint = "unix://" + dir.path() + "/cri.sock";
    o.proc_root = dir.path() + "/proc";
    Collector c(sim_session("dgx-h100.yaml", events), o);
    auto m = collect(c);
    EXPECT_EQ(m.value("kgpu_exporter_pod_attribution_up"), 1.0);
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "0"}, {"pod", "trainer-0"}, {"namespace", "ml"}, {"container", "main"}}).size(), 1u);
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP", gpu(0)).size(), 1u);
    // A time-sliced GPU: labelled with one of its pods, as dcgm-exporter does without
    // --kubernetes-virtual-gpus (so sums over series count each GPU once).
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP", gpu(1)).size(), 1u);
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "1"}, {"pod", "shared-a"}}).size(), 1u);
    EXPECT_FALSE(m.find("DCGM_FI_DEV_GPU_TEMP", gpu(1))[0]->label("vgpu")) << "vgpu only with --kubernetes-virtual-gpus";
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "2"}, {"pod", "by-index"}, {"namespace", "web"}}).size(), 1u);
    auto s3 = m.find("DCGM_FI_DEV_GPU_TEMP", gpu(3));
    ASSERT_EQ(s3.size(), 1u);
    EXPECT_FALSE(s3[0]->label("pod")) << "example.com/fpga is not a GPU resource";
    // Label order: pod labels last.
    auto s0 = m.find("DCGM_FI_DEV_GPU_TEMP", gpu(0));
    ASSERT_EQ(s0.size(), 1u);
    ASSERT_EQ(s0[0]->labels.size(), 10u);
    EXPECT_EQ(s0[0]->labels[7].first, "pod");
    EXPECT_EQ(s0[0]->labels[8].first, "namespace");
    EXPECT_EQ(s0[0]->labels[9].first, "container");
    // Per-process memory named by pod.
    EXPECT_EQ(m.value("kgpu_process_fb_used_bytes",
                      {{"gpu", "1"}, {"pid", "4242"}, {"process", "train.py"}, {"pod", "shared-a"}, {"namespace", "ml"},
                       {"container", "worker"}}),
              1073741824.0);
    auto x = m.find("kgpu_process_fb_used_bytes", {{"pid", "5151"}});
    ASSERT_EQ(x.size(), 1u);
    EXPECT_FALSE(x[0]->label("pod"));

    // The kubelet goes away: scrapes continue without pod labels, and the metric says so.
    pr.reset();
    m = collect(c);
    EXPECT_EQ(m.value("kgpu_exporter_pod_attribution_up"), 0.0);
    for (const auto& s : m.samples) {
        if (s.name.starts_with("DCGM_")) {
            EXPECT_FALSE(s.label("pod")) << s.line;
        }
    }
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP").size(), 8u);
}

// The pods of PodLabelsFromPodResourcesAndPodsOfProcessesFromCri with --kubernetes-virtual-gpus,
// pod UIDs and pod labels, and the per-pod compute share.
TEST(Collector, VirtualGpusPodUidsPodLabelsAndComputeShares) {
    test::TempDir dir;
    const YAML::Node yaml = YAML::LoadFile(fixture_path("dgx-h100.yaml"));
    const std::string uuid1 = yaml["gpus"][1]["uuid"].as<std::string>();
    test::FakePodResources pr(dir.path() + "/pod-resources.sock");
    ASSERT_TRUE(pr.start());
    pr.add_pod("ml", "trainer-0", "main", "nvidia.com/gpu", {yaml["gpus"][0]["uuid"].as<std::string>()});
    pr.add_pod("ml", "shared-a", "worker", "nvidia.com/gpu", {uuid1 + "::0"});
    pr.add_pod("ml", "shared-b", "worker", "nvidia.com/gpu", {uuid1 + "::3"});

    test::FakeCri cri(dir.path() + "/cri.sock");
    ASSERT_TRUE(cri.start());
    const std::string a(64, 'a'), b(64, 'b'), x(64, 'c');
    cri.add_container(a, "ml", "shared-a", "worker");
    cri.add_container(b, "ml", "shared-b", "worker");
    cri.add_container(x, "web", "sneaky", "app");  // not allocated a GPU, but its process runs on GPU 5
    cri.add_sandbox("ml", "trainer-0", "0b1c2d3e-0000-4000-8000-000000000001",
                    {{"app.kubernetes.io/name", "trainer"}, {"team", "vision"}, {"gpu", "collides"}});
    cri.add_sandbox("ml", "shared-a", "old-uid", {}, /*ready=*/false);
    cri.add_sandbox("ml", "shared-a", "0b1c2d3e-0000-4000-8000-00000000000a", {{"team", "nlp"}});
    cri.add_sandbox("ml", "shared-b", "0b1c2d3e-0000-4000-8000-00000000000b");
    dir.write("proc/4242/cgroup", cgroup_of(a));
    dir.write("proc/4343/cgroup", cgroup_of(b));
    dir.write("proc/5151/cgroup", cgroup_of(x));
    const std::string events = dir.write("events",
                                         "proc 1 4242 1073741824 train.py sm=30 mem=7\n"
                                         "proc 1 4343 10485760 idle.py\n"
                                         "proc 5 5151 1048576 mine.py sm=55\n");
    auto o = options();
    o.kubernetes = true;
    o.kubernetes_virtual_gpus = true;
    o.kubernetes_pod_uid = true;
    o.kubernetes_pod_labels = true;
    o.pod_resources.socket = dir.path() + "/pod-resources.sock";
    o.cri_endpoint = "unix://" + dir.path() + "/cri.sock";
    o.proc_root = dir.path() + "/proc";
    Collector c(sim_session("dgx-h100.yaml", events), o);
    auto m = collect(c);

    // One series per pod sharing GPU 1, each with its replica number.
    auto temp = m.find("DCGM_FI_DEV_GPU_TEMP", gpu(1));
    ASSERT_EQ(temp.size(), 2u);
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "1"}, {"pod", "shared-a"}, {"vgpu", "0"}}).size(), 1u);
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "1"}, {"pod", "shared-b"}, {"vgpu", "3"}}).size(), 1u);
    // GPU_UTIL and FB_USED: the GPU's own series plus each pod's share.
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_UTIL", gpu(1)).size(), 3u);
    std::optional<double> device_util;
    for (const auto* s : m.find("DCGM_FI_DEV_GPU_UTIL", gpu(1)))
        if (!s->label("pod")) device_util = s->value;
    EXPECT_TRUE(device_util) << "the device-level series stays";
    EXPECT_EQ(m.value("DCGM_FI_DEV_GPU_UTIL", {{"gpu", "1"}, {"pod", "shared-a"}}), 30.0);
    EXPECT_EQ(m.value("DCGM_FI_DEV_GPU_UTIL", {{"gpu", "1"}, {"pod", "shared-b"}}), 0.0) << "an idle pod is 0";
    EXPECT_EQ(m.value("DCGM_FI_DEV_FB_USED", {{"gpu", "1"}, {"pod", "shared-a"}}), 1024.0);
    EXPECT_EQ(m.value("DCGM_FI_DEV_FB_USED", {{"gpu", "1"}, {"pod", "shared-b"}}), 10.0);
    // pod_uid from the ready sandbox; the pod's labels, sanitised, never replacing a series label.
    auto t0 = m.find("DCGM_FI_DEV_GPU_TEMP", gpu(0));
    ASSERT_EQ(t0.size(), 1u);
    EXPECT_EQ(t0[0]->label("pod_uid"), "0b1c2d3e-0000-4000-8000-000000000001");
    EXPECT_EQ(t0[0]->label("app_kubernetes_io_name"), "trainer");
    EXPECT_EQ(t0[0]->label("team"), "vision");
    EXPECT_EQ(t0[0]->label("gpu"), "0") << "a pod label named like a series label is left out";
    EXPECT_FALSE(t0[0]->label("vgpu")) << "not a replica";
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP", {{"pod", "shared-a"}, {"pod_uid", "0b1c2d3e-0000-4000-8000-00000000000a"},
                                              {"team", "nlp"}})
                  .size(),
              1u);
    // kgpu_pod_*: the pods' share of the SMs and of the memory bandwidth, as ratios.
    EXPECT_EQ(m.value("kgpu_pod_sm_util_ratio", {{"gpu", "1"}, {"pod", "shared-a"}, {"container", "worker"}}), 0.3);
    EXPECT_EQ(m.value("kgpu_pod_mem_util_ratio", {{"gpu", "1"}, {"pod", "shared-a"}}), 0.07);
    EXPECT_EQ(m.value("kgpu_pod_sm_util_ratio", {{"gpu", "1"}, {"pod", "shared-b"}}), 0.0);
    EXPECT_EQ(m.value("kgpu_pod_sm_util_ratio", {{"gpu", "0"}, {"pod", "trainer-0"}}), 0.0);
    EXPECT_EQ(m.value("kgpu_pod_sm_util_ratio", {{"gpu", "5"}, {"pod", "sneaky"}, {"namespace", "web"}}), 0.55)
        << "a process in a pod the kubelet did not give the GPU still counts";
    EXPECT_EQ(cri.sandbox_calls(), 1);
    m = collect(c);
    EXPECT_EQ(cri.sandbox_calls(), 1) << "pod metadata is cached";
    EXPECT_TRUE(m.find("kgpu_nvml_errors_total").empty());

    // Without the flags: no vgpu, no pod_uid, no pod labels, one pod per GPU; kgpu_pod_* stay.
    auto plain = options();
    plain.kubernetes = true;
    plain.pod_resources = o.pod_resources;
    plain.cri_endpoint = o.cri_endpoint;
    plain.proc_root = o.proc_root;
    Collector d(sim_session("dgx-h100.yaml", events), plain);
    m = collect(d);
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_UTIL", gpu(1)).size(), 1u);
    for (const auto& s : m.samples) {
        EXPECT_FALSE(s.label("vgpu") || s.label("pod_uid") || s.label("team")) << s.line;
    }
    EXPECT_EQ(m.value("kgpu_pod_sm_util_ratio", {{"gpu", "1"}, {"pod", "shared-a"}}), 0.3);
}

TEST(Collector, PodsOnMigDevicesLabelTheirInstance) {
    test::TempDir dir;
    test::FakePodResources pr(dir.path() + "/pr.sock");
    ASSERT_TRUE(pr.start());
    // GPU 0's first MIG device (GPU instance 7) in a100-mig.yaml.
    pr.add_pod("ml", "mig-pod", "main", "nvidia.com/mig-1g.10gb", {"MIG-4b69808b-66a3-1662-f86c-3b76eedd0860"});
    auto o = options();
    o.kubernetes = true;
    o.pod_resources.socket = dir.path() + "/pr.sock";
    o.cri_endpoint = "unix://" + dir.path() + "/none.sock";
    Collector c(sim_session("a100-mig.yaml"), o);
    auto m = collect(c);
    auto s = m.find("DCGM_FI_DEV_FB_FREE", {{"gpu", "0"}, {"GPU_I_ID", "7"}});
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0]->label("pod"), "mig-pod");
    EXPECT_EQ(m.find("DCGM_FI_DEV_FB_FREE", {{"pod", "mig-pod"}}).size(), 1u);
}

TEST(Collector, HealthAndRoutes) {
    Collector c(sim_session("t4x4.yaml"), options());
    const auto now = std::chrono::steady_clock::now();
    EXPECT_EQ(route({"GET", "/metrics", false}, c).status, 503u) << "no snapshot yet";
    c.collect();
    auto h = route({"GET", "/health", false}, c);
    EXPECT_EQ(h.status, 503u) << "the collector thread is not running";
    EXPECT_NE(h.body->find("not running"), std::string::npos);
    c.start();
    EXPECT_EQ(route({"GET", "/health", false}, c).status, 200u);
    h = route({"GET", "/health", false}, c, now + std::chrono::seconds(5));
    EXPECT_EQ(h.status, 503u) << "last pass more than 3 intervals ago";
    EXPECT_NE(h.body->find("more than 3 intervals"), std::string::npos) << *h.body;

    auto r = route({"GET", "/metrics", false}, c);
    EXPECT_EQ(r.status, 200u);
    EXPECT_EQ(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
    EXPECT_FALSE(r.gzip);
    auto z = route({"HEAD", "/metrics", true}, c);
    EXPECT_TRUE(z.gzip);
    auto plain = test::gunzip(*z.body);
    ASSERT_TRUE(plain);
    EXPECT_TRUE(test::parse_metrics(*plain).errors.empty());
    EXPECT_EQ(route({"POST", "/metrics", false}, c).status, 405u);
    EXPECT_EQ(route({"DELETE", "/", false}, c).status, 405u);
    EXPECT_EQ(route({"GET", "/nope", false}, c).status, 404u);
    auto landing = route({"GET", "/", false}, c);
    EXPECT_EQ(landing.status, 200u);
    EXPECT_NE(landing.body->find("/metrics"), std::string::npos);
    c.stop();
}

TEST(Collector, PodsBeyondThePerGpuLimitAreCountedNotServed) {
    test::TempDir dir;
    const YAML::Node yaml = YAML::LoadFile(fixture_path("dgx-h100.yaml"));
    const std::string uuid0 = yaml["gpus"][0]["uuid"].as<std::string>();
    test::FakePodResources pr(dir.path() + "/pr.sock");
    ASSERT_TRUE(pr.start());
    for (int i = 0; i < 5; ++i) pr.add_pod("ml", fmt::format("shared-{}", i), "main", "nvidia.com/gpu", {fmt::format("{}::{}", uuid0, i)});
    pr.add_pod("ml", "alone", "main", "nvidia.com/gpu", {"1"});
    auto o = options();
    o.kubernetes = true;
    o.pod_resources.socket = dir.path() + "/pr.sock";
    o.pod_resources.max_pods_per_gpu = 2;
    o.kubernetes_virtual_gpus = true;  // one series per pod: what the limit bounds
    o.cri_endpoint = "unix://" + dir.path() + "/none.sock";
    Collector c(sim_session("dgx-h100.yaml"), o);
    auto m = collect(c);
    auto temps = m.find("DCGM_FI_DEV_GPU_TEMP", gpu(0));
    ASSERT_EQ(temps.size(), 2u);
    EXPECT_EQ(temps[0]->label("pod"), "shared-0");
    EXPECT_EQ(temps[1]->label("pod"), "shared-1");
    EXPECT_EQ(m.value("kgpu_exporter_pods_over_limit", {{"gpu", "0"}}), 3.0);
    EXPECT_EQ(m.value("kgpu_exporter_pods_over_limit", {{"gpu", "1"}}), 0.0);
    EXPECT_EQ(m.find("kgpu_exporter_pods_over_limit").size(), 8u) << "every GPU, 0 when under the limit";
}

TEST(Collector, HealthStaysUpButNamesWhatIsWrongWithPodResources) {
    test::TempDir dir;
    test::FakePodResources pr(dir.path() + "/pr.sock");
    ASSERT_TRUE(pr.start());
    pr.add_pod("ml", "p", "main", "nvidia.com/gpu", {"1"});
    // Each case has its own collector: only the hung kubelet needs a short deadline; the others
    // answer at once, and a 16 MiB answer must not race a short one (issue #24 item 7: on a
    // loaded machine it came after 300 ms and was reported as "hung").
    struct Case {
        std::function<void()> breakit;
        std::string word;
        std::chrono::milliseconds timeout;
    };
    for (const auto& k : std::vector<Case>{{[&] { pr.set_raw("\x0a\x7f"); }, "garbage", std::chrono::seconds(30)},
                                           {[&] { pr.set_hang(true); }, "hung", std::chrono::milliseconds(300)},
                                           {[&] { pr.set_raw(std::string((16u << 20) + 1, 'x')); }, "over-size",
                                            std::chrono::seconds(30)}}) {
        auto o = options();
        o.kubernetes = true;
        o.pod_resources.socket = dir.path() + "/pr.sock";
        o.pod_resources.timeout = k.timeout;
        o.cri_endpoint = "unix://" + dir.path() + "/none.sock";
        o.interval = std::chrono::hours(1);  // the thread runs (for /health) but the test makes the passes
        pr.reset();
        Collector c(sim_session("t4x4.yaml"), o);
        c.collect();
        c.start();
        auto health = [&] { return route({"GET", "/health", false}, c); };
        EXPECT_EQ(*health().body, "OK\n") << k.word;
        k.breakit();
        auto m = collect(c);
        EXPECT_EQ(m.value("kgpu_exporter_pod_attribution_up"), 0.0) << k.word;
        EXPECT_TRUE(m.find("kgpu_exporter_pods_over_limit").empty()) << "unknown while the kubelet fails";
        auto h = health();
        EXPECT_EQ(h.status, 200u) << "liveness: a broken kubelet must not get the exporter restarted";
        EXPECT_TRUE(h.body->starts_with("OK\npod attribution: " + k.word + ": PodResources List on ")) << *h.body;
        EXPECT_NE(h.body->find(dir.path() + "/pr.sock"), std::string::npos) << *h.body;
        pr.reset();
        m = collect(c);
        EXPECT_EQ(m.value("kgpu_exporter_pod_attribution_up"), 1.0) << k.word;
        EXPECT_EQ(*health().body, "OK\n") << k.word;
        c.stop();
    }
}

TEST(Collector, HttpServerCountersWhenGiven) {
    Collector c(sim_session("t4x4.yaml"), options());
    auto m = collect(c);
    EXPECT_TRUE(m.find("kgpu_exporter_http_connections").empty());
    c.set_http_stats([] {
        HttpServerStats s;
        s.open = 7;
        s.evicted = 3;
        return s;
    });
    m = collect(c);
    EXPECT_EQ(m.value("kgpu_exporter_http_connections"), 7.0);
    EXPECT_EQ(m.value("kgpu_exporter_http_connections_closed_total", {{"reason", "evicted"}}), 3.0);
    EXPECT_EQ(m.value("kgpu_exporter_http_connections_closed_total", {{"reason", "timeout"}}), 0.0);
    EXPECT_EQ(m.find("kgpu_exporter_http_connections_closed_total").size(), 6u);
}

// kgpu_kube_api_* and kgpu_node_events_total come from the status files of kgpu's other
// processes (kube/api_stats.h writes them); each file is checked, and one that is not a status is
// left out without taking the others (or the scrape) with it.
TEST(Collector, KubeApiCountsFromTheStatusFilesOfKgpusOtherProcesses) {
    test::TempDir dir;
    CollectorOptions o = options();
    o.kube_api_status_dir = dir.path() + "/status";  // absent at first: no series, no problem
    Collector c(sim_session("t4x4.yaml"), o);
    auto m = collect(c);
    EXPECT_TRUE(m.find("kgpu_kube_api_requests_total").empty());

    dir.write("status/device-plugin.json",
              R"({"component":"device-plugin","requests":[{"method":"GET","code":"200","count":3},)"
              R"({"method":"WATCH","code":"<error>","count":2},{"method":"POST","code":"401","count":1}],)"
              R"("errors":[{"kind":"unreachable","count":2},{"kind":"unauthorized","count":1}],)"
              R"("events":[{"result":"created","count":1},{"result":"rate_limited","count":4}],)"
              R"("last_success":1764700000.5,"last_failure":1764700100})");
    dir.write("status/labels.json", R"({"component":"labels","requests":[{"method":"PATCH","code":"200","count":9}]})");
    // Left out, each for its own reason:
    dir.write("status/zz-again.json", R"({"component":"labels","requests":[]})");             // labels again
    dir.write("status/garbage.json", "{\"component\": ");                                   // not JSON
    dir.write("status/negative.json", R"({"component":"x","errors":[{"kind":"tls","count":-1}]})");
    dir.write("status/repeat.json", R"({"component":"y","errors":[{"kind":"tls","count":1},{"kind":"tls","count":2}]})");
    dir.write("status/label.json", R"({"component":"Bad\"Name","requests":[]})");
    dir.write("status/big.json", std::string(70 << 10, ' '));
    dir.write("status/notes.txt", "not a status file");
    ASSERT_EQ(::symlink((dir.path() + "/status/labels.json").c_str(), (dir.path() + "/status/link.json").c_str()), 0);

    m = collect(c);
    const std::map<std::string, std::string> dp = {{"component", "device-plugin"}};
    EXPECT_EQ(m.value("kgpu_kube_api_requests_total", {{"component", "device-plugin"}, {"method", "GET"}, {"code", "200"}}), 3.0);
    EXPECT_EQ(m.value("kgpu_kube_api_requests_total", {{"component", "device-plugin"}, {"method", "WATCH"}, {"code", "<error>"}}), 2.0);
    EXPECT_EQ(m.value("kgpu_kube_api_errors_total", {{"component", "device-plugin"}, {"kind", "unauthorized"}}), 1.0);
    EXPECT_EQ(m.value("kgpu_kube_api_last_success_timestamp_seconds", dp), 1764700000.5);
    EXPECT_EQ(m.value("kgpu_node_events_total", {{"component", "device-plugin"}, {"result", "rate_limited"}}), 4.0);
    EXPECT_EQ(m.value("kgpu_kube_api_requests_total", {{"component", "labels"}}), 9.0);
    EXPECT_TRUE(m.find("kgpu_kube_api_last_success_timestamp_seconds", {{"component", "labels"}}).empty());
    EXPECT_EQ(m.find("kgpu_kube_api_requests_total").size(), 4u);  // nothing from the files left out
    EXPECT_EQ(m.find("kgpu_kube_api_errors_total").size(), 2u);
    EXPECT_EQ(m.type["kgpu_kube_api_requests_total"], "counter");
    EXPECT_EQ(m.type["kgpu_kube_api_last_success_timestamp_seconds"], "gauge");

    std::vector<std::string> problems;
    auto statuses = read_kube_api_statuses(dir.path() + "/status", &problems);
    ASSERT_EQ(statuses.size(), 2u);
    std::string all;
    for (const auto& p : problems) all += p + "\n";
    EXPECT_EQ(problems.size(), 7u) << all;
    for (const char* what : {"zz-again.json: component labels is already", "garbage.json: kube API status: not JSON",
                             "negative.json: kube API status: .errors[0].count: expected a whole number",
                             "repeat.json: kube API status: .: expected errors without repeats",
                             "label.json: kube API status: .: expected a member \"component\"", "big.json: over 64 KiB",
                             "link.json: Too many levels of symbolic links"})
        EXPECT_NE(all.find(what), std::string::npos) << what << "\n" << all;
}

// The MPS daemons' status files are read on every pass: one that kgpu did not write (or that was
// cut short) is left out and said once, not on every pass; the good one's series stay.
TEST(Collector, AnMpsStatusFileThatDoesNotParseIsLoggedOnceAndLeftOut) {
    test::TempDir dir;
    CollectorOptions o = options();
    o.mps_root = dir.path() + "/mps";
    dir.write("mps/nvidia.com/gpu/status.json", R"({"resource":"nvidia.com/gpu","state":"stopped","restarts":2})");
    dir.write("mps/nvidia.com/bad/status.json", "{\"resource\": ");
    Collector c(sim_session("t4x4.yaml"), o);
    ::testing::internal::CaptureStderr();
    ParsedMetrics m;
    for (int pass = 0; pass < 3; ++pass) m = collect(c);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(m.value("kgpu_mps_daemon_up", {{"resource", "nvidia.com/gpu"}}), 0.0);
    EXPECT_EQ(m.value("kgpu_mps_daemon_restarts_total", {{"resource", "nvidia.com/gpu"}}), 2.0);
    EXPECT_EQ(m.find("kgpu_mps_daemon_up").size(), 1u);
    std::size_t said = 0;
    for (std::size_t at = 0; (at = err.find("nvidia.com/bad/status.json: not a status file", at)) != std::string::npos; ++at)
        ++said;
    EXPECT_EQ(said, 1u) << err;
}

TEST(Snapshot, GzipIsMadeOnceAndShared) {
    Snapshot s(std::string(10000, 'a'), std::chrono::steady_clock::now());
    auto a = s.gzip(), b = s.gzip();
    EXPECT_EQ(a.get(), b.get());
    EXPECT_LT(a->size(), 200u);
    EXPECT_EQ(test::gunzip(*a), *s.text());
}

}  // namespace
}  // namespace kgpu::exporter
