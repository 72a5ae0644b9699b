// The collector in-process against the simulator (and the in-memory NVML for failures): every
// catalogue metric with the fixture's values, MIG instance series, sim events at the next
// interval, lost GPUs, NVML errors on one GPU, pod and process attribution, /health.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <thread>

#include "exporter/catalogue.h"
#include "exporter/collector.h"
#include "exporter/exporter.h"
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
            EXPECT_EQ(names, kDcgmLabels) << found[0]->line;
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
        expect_near(Metric::gpu_util, util, util == 0 ? 0 : 5);
        expect_near(Metric::mem_copy_util, mem_util, mem_util == 0 ? 0 : 5);
        expect_near(Metric::enc_util, tel("enc_util", 0), 0);
        expect_near(Metric::dec_util, tel("dec_util", 0), 0);
        expect_near(Metric::xid_errors, 0, 0);
        expect_near(Metric::ecc_sbe_vol_total, 0, 0);
        expect_near(Metric::ecc_dbe_vol_total, 0, 0);
        expect_near(Metric::correctable_remapped_rows, 0, 0);
        expect_near(Metric::uncorrectable_remapped_rows, 0, 0);
        expect_near(Metric::row_remap_failure, 0, 0);
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
        ++index;
    }
    EXPECT_EQ(m.value("kgpu_collections_total"), 1.0);
    EXPECT_TRUE(m.value("kgpu_collection_duration_seconds"));
    EXPECT_TRUE(m.find("kgpu_nvml_errors_total").empty()) << "no NVML call failed";
    EXPECT_TRUE(m.find("kgpu_exporter_pod_attribution_up").empty()) << "only with --kubernetes";
    // Every catalogue metric of the GPU kinds appears.
    for (const auto& d : catalogue()) {
        const bool per_gpu = d.scope == Scope::gpu || d.scope == Scope::instance || d.scope == Scope::kgpu_gpu;
        if (per_gpu && d.id != Metric::pods_over_limit /* only with --kubernetes */ &&
            (d.id != Metric::memory_temp || fixture != "t4x4.yaml")) {
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
               m.value("kgpu_gpu_xid_events_total", gpu(1)) == 1.0 && m.value("DCGM_FI_DEV_XID_ERRORS", gpu(0)) == 0.0;
    }));

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

TEST(Collector, MigReconfigurationIsPickedUp) {
    test::TempDir dir;
    const std::string events = dir.write("events", "");
    Collector c(sim_session("a100-mig.yaml", events), options());
    c.collect();
    c.start();
    append(events, "mig 2 3g.40gb,3g.40gb");
    EXPECT_TRUE(wait_for(c, [](const ParsedMetrics& m) {
        return m.find("DCGM_FI_DEV_FB_FREE", {{"gpu", "2"}, {"GPU_I_PROFILE", "3g.40gb"}}).size() == 2 &&
               m.find("DCGM_FI_DEV_FB_FREE", {{"gpu", "2"}}).size() == 2;
    }));
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
    // A time-sliced GPU: one series per pod.
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP", gpu(1)).size(), 2u);
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "1"}, {"pod", "shared-b"}}).size(), 1u);
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
    auto o = options();
    o.kubernetes = true;
    o.pod_resources.socket = dir.path() + "/pr.sock";
    o.pod_resources.timeout = std::chrono::milliseconds(300);
    o.cri_endpoint = "unix://" + dir.path() + "/none.sock";
    o.interval = std::chrono::hours(1);  // the thread runs (for /health) but the test makes the passes
    Collector c(sim_session("t4x4.yaml"), o);
    c.collect();
    c.start();
    auto health = [&] { return route({"GET", "/health", false}, c); };
    EXPECT_EQ(*health().body, "OK\n");
    struct Case {
        std::function<void()> breakit;
        std::string word;
    };
    for (const auto& k : std::vector<Case>{{[&] { pr.set_raw("\x0a\x7f"); }, "garbage"},
                                           {[&] { pr.set_hang(true); }, "hung"},
                                           {[&] { pr.set_raw(std::string((16u << 20) + 1, 'x')); }, "over-size"}}) {
        pr.reset();
        k.breakit();
        auto m = collect(c);
        EXPECT_EQ(m.value("kgpu_exporter_pod_attribution_up"), 0.0) << k.word;
        EXPECT_TRUE(m.find("kgpu_exporter_pods_over_limit").empty()) << "unknown while the kubelet fails";
        auto h = health();
        EXPECT_EQ(h.status, 200u) << "liveness: a broken kubelet must not get the exporter restarted";
        EXPECT_TRUE(h.body->starts_with("OK\npod attribution: " + k.word + ": PodResources List on ")) << *h.body;
        EXPECT_NE(h.body->find(dir.path() + "/pr.sock"), std::string::npos) << *h.body;
    }
    pr.reset();
    auto m = collect(c);
    EXPECT_EQ(m.value("kgpu_exporter_pod_attribution_up"), 1.0);
    EXPECT_EQ(*health().body, "OK\n");
    c.stop();
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

TEST(Snapshot, GzipIsMadeOnceAndShared) {
    Snapshot s(std::string(10000, 'a'), std::chrono::steady_clock::now());
    auto a = s.gzip(), b = s.gzip();
    EXPECT_EQ(a.get(), b.get());
    EXPECT_LT(a->size(), 200u);
    EXPECT_EQ(test::gunzip(*a), *s.text());
}

}  // namespace
}  // namespace kgpu::exporter
