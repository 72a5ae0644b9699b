// `kgpu exporter` as a process against the simulator: flags, endpoints, promtool, load, signals,
// sim events, pod labels, and a real Prometheus server scraping it.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include <fmt/format.h>
#include <sstream>
#include <thread>

#include "metrics_text.h"
#include "tls_client.h"
#include "support/expect.h"
#include "support/fake_cri.h"
#include "support/fake_pod_resources.h"
#include "support/files.h"
#include "support/process.h"

namespace kgpu::test {
namespace {

std::string fixture(const std::string& name) { return std::string(KGPU_SOURCE_DIR) + "/sim/nodes/" + name; }

// A running `kgpu exporter` on 127.0.0.1 with a port it picked.
class Exporter {
public:
    Exporter(const std::string& node, std::vector<std::string> extra = {}, std::map<std::string, std::string> env = {}) {
        std::vector<std::string> argv = {KGPU_BINARY,           "exporter", "--address", "127.0.0.1:0",
                                         "--collect-interval", "200",      "--nvml-library", KGPU_SIM_LIBRARY};
        argv.insert(argv.end(), extra.begin(), extra.end());
        env["KGPU_SIM_NODE"] = fixture(node);
        argv.insert(argv.end(), {"--ready-file", ready_.path() + "/ready"});
        proc_ = std::make_unique<ChildProcess>(argv, env);
        port_ = wait_for_ready_port(*proc_, ready_.path() + "/ready");
        if (port_ == 0) ADD_FAILURE() << "exporter did not start; stderr:\n" << proc_->err();
    }
    int port() const { return port_; }
    ChildProcess& proc() { return *proc_; }
    HttpResult get(const std::string& path, const std::vector<std::string>& headers = {}) const {
        return http_request(port_, "GET", path, headers);
    }
    ParsedMetrics metrics() const {
        auto r = get("/metrics");
        EXPECT_EQ(r.status, 200);
        auto m = parse_metrics(r.body);
        EXPECT_TRUE(m.errors.empty()) << m.errors[0];
        return m;
    }
    bool wait_metrics(const std::function<bool(const ParsedMetrics&)>& ok, int seconds = 30) const {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
        while (std::chrono::steady_clock::now() < deadline) {
            auto r = get("/metrics");
            if (r.status == 200 && ok(parse_metrics(r.body))) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        return false;
    }

private:
    TempDir ready_;
    std::unique_ptr<ChildProcess> proc_;
    int port_ = 0;
};

TEST(ExporterCli, ReadyFileNamesTheBoundPortAndGoesBeforeTheServerStops) {
    TempDir dir;
    const std::string ready = dir.path() + "/ready";
    ChildProcess p({KGPU_BINARY, "exporter", "--address", "127.0.0.1:0", "--nvml-library", KGPU_SIM_LIBRARY, "--ready-file", ready},
                   {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}});
    const int port = wait_for_ready_port(p, ready);
    ASSERT_GT(port, 0) << p.err();
    EXPECT_EQ(slurp(ready), "127.0.0.1:" + std::to_string(port) + "\n");
    // The port in the file is the one serving (not a port picked and given back).
    EXPECT_EQ(http_request(port, "GET", "/health").status, 200);
    p.signal(SIGTERM);
    EXPECT_EQ(p.wait(30000), 0) << p.err();
    EXPECT_FALSE(std::filesystem::exists(ready));
}

// A link at the ready file's name is replaced, not written through (the directory may be shared
// and the exporter may run as root), and the exit removes what the exporter wrote, not more.
TEST(ExporterCli, ReadyFileReplacesALinkAtItsNameAndNeverWritesThroughIt) {
    TempDir dir;
    const std::string ready = dir.path() + "/ready";
    const std::string victim = dir.write("victim", "precious\n");
    std::filesystem::create_symlink(victim, ready);
    ChildProcess p({KGPU_BINARY, "exporter", "--address", "127.0.0.1:0", "--nvml-library", KGPU_SIM_LIBRARY, "--ready-file", ready},
                   {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}});
    ASSERT_TRUE(eventually([&] { return !std::filesystem::is_symlink(ready) && std::filesystem::exists(ready); },
                           std::chrono::seconds(60)))
        << p.err();
    const int port = wait_for_ready_port(p, ready);
    ASSERT_GT(port, 0) << p.err();
    EXPECT_EQ(slurp(victim), "precious\n");
    p.signal(SIGTERM);
    EXPECT_EQ(p.wait(30000), 0) << p.err();
    EXPECT_FALSE(std::filesystem::exists(ready));
    EXPECT_EQ(slurp(victim), "precious\n");
}

TEST(ExporterCli, BadFlagsExitTwoNamingTheFlag) {
    const std::map<std::string, std::string> env = {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}};
    struct Case {
        std::vector<std::string> args;
        std::string flag;
    };
    for (const auto& c : std::vector<Case>{{{"--address", "9400"}, "--address"},
                                           {{"--address", "host:99999"}, "--address"},
                                           {{"--collect-interval", "0"}, "--collect-interval"},
                                           {{"--ready-file", "/nonexistent/kgpu/ready"}, "--ready-file"},
                                           {{"--collect-interval", "fast"}, "--collect-interval"},
                                           {{"--hostname-label", "HOST"}, "--hostname-label"},
                                           {{"--kubernetes-gpu-id-type", "serial"}, "--kubernetes-gpu-id-type"},
                                           {{"--resource-name", "gpu"}, "--resource-name"},
                                           {{"--http-idle-timeout", "-1"}, "--http-idle-timeout"},
                                           {{"--http-request-timeout", "0"}, "--http-request-timeout"},
                                           {{"--http-max-connections", "many"}, "--http-max-connections"},
                                           {{"--http-max-connections-per-client", "0"}, "--http-max-connections-per-client"},
                                           {{"--max-pods-per-gpu", "0"}, "--max-pods-per-gpu"},
                                           {{"--web-config-file", "/nonexistent/web.yml"}, "/nonexistent/web.yml"},
                                           {{"-d", "x"}, "--devices"},
                                           {{"-d", "g:a"}, "--devices"},
                                           {{"--devices", "g:1:2"}, "--devices"},
                                           {{"-d", "f:0"}, "--devices"},
                                           {{"-d", "i:0"}, "--devices"},
                                           {{"-p", "cpu"}, "--cpu-devices"},
                                           {{"-s", "g:x"}, "--switch-devices"},
                                           {{"-x", "5m"}, "--xid-count-window-size"},
                                           {{"--clock-events-count-window-size", "fast"}, "--clock-events-count-window-size"},
                                           {{"--dump-retention", "1d"}, "--dump-retention"},
                                           {{"--dcgm-log-level", "LOUD"}, "--dcgm-log-level"},
                                           {{"--log-format", "xml"}, "--log-format"},
                                           {{"--debug=maybe"}, "--debug"},
                                           {{"--no-such-flag"}, "--no-such-flag"}}) {
        std::vector<std::string> argv = {KGPU_BINARY, "exporter", "--nvml-library", KGPU_SIM_LIBRARY};
        argv.insert(argv.end(), c.args.begin(), c.args.end());
        auto r = run_process(argv, env);
        EXPECT_EQ(r.exit_code, 2) << c.args[0] << ": " << r.err;
        EXPECT_NE(r.err.find(c.flag), std::string::npos) << r.err;
    }
    auto r = run_process({KGPU_BINARY, "exporter", "--nvml-library", KGPU_SIM_LIBRARY},
                         {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}, {"DCGM_EXPORTER_INTERVAL", "soon"}});
    EXPECT_EQ(r.exit_code, 2) << "env vars are validated like flags";
    EXPECT_NE(r.err.find("--collect-interval"), std::string::npos) << r.err;
}

TEST(ExporterCli, NvmlThatCannotLoadExitsOne) {
    auto r = run_process({KGPU_BINARY, "exporter", "--address", "127.0.0.1:0", "--nvml-library", "/nonexistent/libnvidia-ml.so.1"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("/nonexistent/libnvidia-ml.so.1"), std::string::npos) << r.err;
}

TEST(ExporterCli, PrintsTheMetricsDocsPage) {
    auto r = run_process({KGPU_BINARY, "exporter", "--print-metrics-markdown"});
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_EQ(r.out, slurp(std::string(KGPU_SOURCE_DIR) + "/docs/metrics.md"));
}

TEST(ExporterCli, EnvVarsInDcgmExportersNames) {
    Exporter e("t4x4.yaml", {}, {{"DCGM_EXPORTER_NO_HOSTNAME", "true"}, {"NODE_NAME", "ignored"}});
    auto m = e.metrics();
    auto s = m.find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "0"}});
    ASSERT_EQ(s.size(), 1u);
    EXPECT_FALSE(s[0]->label("Hostname"));

    Exporter named("t4x4.yaml", {"--hostname-label", "hostname"}, {{"NODE_NAME", "gpu-node-3"}});
    s = named.metrics().find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "0"}});
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0]->label("hostname"), "gpu-node-3");
}

// The fields enabled in dcgm-exporter 4.5.3-4.8.2's etc/default-counters.csv (tests/exporter/data/
// default-counters.csv is a list written in its shape), without DCGM_FI_DEV_VGPU_LICENSE_STATUS
// (vGPU only) and the DCGM_FI_DRIVER_VERSION label row.
const std::set<std::string> kDefaultCounterFields = {
    "DCGM_FI_DEV_SM_CLOCK",          "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",       "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",       "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",     "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",          "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE",           "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_RESERVED",       "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",    "DCGM_FI_PROF_PCIE_RX_BYTES",
};

std::string default_counters() { return std::string(KGPU_SOURCE_DIR) + "/tests/exporter/data/default-counters.csv"; }

// The DCGM_* metric names served once the profiling metrics have had their second sample.
std::set<std::string> dcgm_names(const Exporter& e) {
    std::set<std::string> names;
    e.wait_metrics([](const ParsedMetrics& m) { return m.value("kgpu_collections_total").value_or(0) >= 3; });
    for (const auto& s : e.metrics().samples)
        if (s.name.starts_with("DCGM_")) names.insert(s.name);
    return names;
}

TEST(ExporterCounters, EveryNonVgpuFieldOfDcgmExportersDefaultsIsServedOnDgxH100) {
    // Without --collectors: all of them (and more).
    {
        Exporter e("dgx-h100.yaml");
        const auto names = dcgm_names(e);
        for (const auto& f : kDefaultCounterFields) EXPECT_TRUE(names.contains(f)) << f << " is not served";
        EXPECT_EQ(e.metrics().find("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE").size(), 8u) << "every H100 has GPM";
    }
    // With the list as --collectors: exactly those, with the file's help, the driver label, and
    // one warning naming the field kgpu does not serve.
    Exporter e("dgx-h100.yaml", {"-f", default_counters()});
    EXPECT_EQ(dcgm_names(e), kDefaultCounterFields);
    const auto m = e.metrics();
    EXPECT_EQ(m.help.at("DCGM_FI_DEV_GPU_TEMP"), "GPU die temperature (C).");
    EXPECT_EQ(m.type.at("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"), "counter");
    ASSERT_FALSE(m.find("DCGM_FI_DEV_GPU_TEMP").empty());
    EXPECT_TRUE(m.find("DCGM_FI_DEV_GPU_TEMP")[0]->label("DCGM_FI_DRIVER_VERSION"));
    const std::string err = e.proc().err();
    EXPECT_NE(err.find("lists 1 field(s) kgpu does not serve, left out: DCGM_FI_DEV_VGPU_LICENSE_STATUS"), std::string::npos)
        << err;
}

TEST(ExporterCounters, DcgmExportersDefaultPathServesItsDefaultsWhenTheFileIsNotThere) {
    // dcgm-exporter's Helm chart passes `-f /etc/dcgm-exporter/default-counters.csv`, a file of
    // dcgm-exporter's image. Where it does not exist, kgpu serves the same defaults, and says so.
    const std::string path = "/etc/dcgm-exporter/default-counters.csv";
    if (::access(path.c_str(), F_OK) == 0) GTEST_SKIP() << path << " exists on this machine";
    Exporter e("dgx-h100.yaml", {"-f", path});
    ASSERT_NE(e.port(), 0);
    EXPECT_EQ(dcgm_names(e), kDefaultCounterFields);
    const auto m = e.metrics();
    EXPECT_EQ(m.type.at("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"), "counter");
    EXPECT_EQ(m.help.at("DCGM_FI_DEV_GPU_TEMP"), "GPU temperature (in C).");
    ASSERT_FALSE(m.find("DCGM_FI_DEV_GPU_TEMP").empty());
    EXPECT_TRUE(m.find("DCGM_FI_DEV_GPU_TEMP")[0]->label("DCGM_FI_DRIVER_VERSION"));
    const std::string err = e.proc().err();
    EXPECT_NE(err.find(path + " does not exist (a file of dcgm-exporter's image): serving kgpu's built-in copy of "
                              "dcgm-exporter's default counters"),
              std::string::npos)
        << err;
    // Any other missing file is still an error.
    TempDir dir;
    auto r = run_process({KGPU_BINARY, "exporter", "--nvml-library", KGPU_SIM_LIBRARY, "-f", dir.path() + "/default-counters.csv"},
                         {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}});
    EXPECT_EQ(r.exit_code, 2) << r.err;
}

TEST(ExporterCli, ConfigMapDataIsAcceptedAndExplained) {
    // dcgm-exporter's `-m NAMESPACE:NAME` reads the counters from a ConfigMap through the API
    // server; kgpu reads files only: it says what to do instead and serves the -f file.
    TempDir dir;
    const std::string csv = dir.write("counters.csv", "DCGM_FI_DEV_GPU_TEMP, gauge, temp\n");
    Exporter e("t4x4.yaml", {"-m", "gpu-operator:exporter-metrics-config-map", "-f", csv});
    ASSERT_NE(e.port(), 0);
    const auto m = e.metrics();
    EXPECT_FALSE(m.find("DCGM_FI_DEV_GPU_TEMP").empty());
    EXPECT_TRUE(m.find("DCGM_FI_DEV_POWER_USAGE").empty()) << "the -f file's counters are served";
    const std::string err = e.proc().err();
    EXPECT_NE(err.find("--configmap-data gpu-operator:exporter-metrics-config-map: kgpu does not read ConfigMaps"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("mount the ConfigMap"), std::string::npos) << err;
    // The environment variable too; "none" (dcgm-exporter's default) says nothing.
    Exporter env("t4x4.yaml", {}, {{"DCGM_EXPORTER_CONFIGMAP_DATA", "none"}});
    ASSERT_NE(env.port(), 0);
    EXPECT_EQ(env.proc().err().find("configmap"), std::string::npos) << env.proc().err();
    // A malformed value is refused as dcgm-exporter refuses it.
    auto r = run_process({KGPU_BINARY, "exporter", "--nvml-library", KGPU_SIM_LIBRARY, "--configmap-data", "just-a-name"},
                         {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("expected NAMESPACE:NAME"), std::string::npos) << r.err;
}

TEST(ExporterCounters, LabelRowsBecomeLabelsOnEverySeries) {
    // The `label` rows dcgm-exporter's default-counters.csv has (most commented out): each listed
    // one is a label named after the field on every series of the GPU, as dcgm-exporter writes
    // them; one NVML does not answer (no power infoROM object on these boards) is left out.
    TempDir dir;
    const std::string csv = dir.write("labels.csv",
                                      "DCGM_FI_DEV_GPU_TEMP, gauge, temp\n"
                                      "DCGM_FI_DEV_FB_USED, gauge, used\n"
                                      "DCGM_FI_DRIVER_VERSION,        label, Driver Version\n"
                                      "DCGM_FI_NVML_VERSION,          label, NVML Version\n"
                                      "DCGM_FI_DEV_BRAND,             label, Device Brand\n"
                                      "DCGM_FI_DEV_SERIAL,            label, Device Serial Number\n"
                                      "DCGM_FI_DEV_OEM_INFOROM_VER,   label, OEM inforom version\n"
                                      "DCGM_FI_DEV_ECC_INFOROM_VER,   label, ECC inforom version\n"
                                      "DCGM_FI_DEV_POWER_INFOROM_VER, label, Power management object inforom version\n"
                                      "DCGM_FI_DEV_INFOROM_IMAGE_VER, label, Inforom image version\n"
                                      "DCGM_FI_DEV_VBIOS_VERSION,     label, VBIOS version of the device\n");
    Exporter e("dgx-h100.yaml", {"-f", csv});
    ASSERT_NE(e.port(), 0);
    const auto m = e.metrics();
    const auto temp = m.find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "1"}});
    ASSERT_EQ(temp.size(), 1u);
    const std::map<std::string, std::string> want = {
        {"DCGM_FI_DRIVER_VERSION", "550.54.15"},       {"DCGM_FI_NVML_VERSION", "12.550.54.15"},
        {"DCGM_FI_DEV_BRAND", "Tesla"},                {"DCGM_FI_DEV_SERIAL", "1654922000002"},
        {"DCGM_FI_DEV_OEM_INFOROM_VER", "2.1"},        {"DCGM_FI_DEV_ECC_INFOROM_VER", "7.0"},
        {"DCGM_FI_DEV_INFOROM_IMAGE_VER", "G000.0000.00.00"}, {"DCGM_FI_DEV_VBIOS_VERSION", "96.00.99.00.01"}};
    for (const auto& [k, v] : want) EXPECT_EQ(temp[0]->label(k), v) << k << " in " << temp[0]->line;
    EXPECT_FALSE(temp[0]->label("DCGM_FI_DEV_POWER_INFOROM_VER")) << temp[0]->line;
    // In dcgm-exporter's order: after Hostname, sorted by name.
    std::vector<std::string> names;
    for (const auto& [k, v] : temp[0]->labels)
        if (k.starts_with("DCGM_FI_")) names.push_back(k);
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end())) << temp[0]->line;
    EXPECT_EQ(names.size(), want.size());
    const auto used = m.find("DCGM_FI_DEV_FB_USED", {{"gpu", "0"}});
    ASSERT_EQ(used.size(), 1u);
    EXPECT_EQ(used[0]->label("DCGM_FI_DEV_SERIAL"), "1654922000001");
    EXPECT_EQ(e.proc().err().find("does not serve"), std::string::npos) << "no label row is unknown: " << e.proc().err();
}

TEST(ExporterCounters, GpmMetricsOnHopperNotOnT4) {
    Exporter t4("t4x4.yaml", {"--collectors", default_counters()});
    const auto names = dcgm_names(t4);
    for (const auto& n : names) EXPECT_FALSE(n.starts_with("DCGM_FI_PROF_")) << n;
    EXPECT_FALSE(names.contains("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")) << "no NVLink on T4 PCIe";
    EXPECT_TRUE(names.contains("DCGM_FI_DEV_GPU_UTIL"));

    TempDir dir;
    const std::string events = dir.write("events", "util 3 90 50\n");
    Exporter h100("dgx-h100.yaml", {}, {{"KGPU_SIM_EVENTS", events}, {"DCGM_EXPORTER_COLLECTORS", default_counters()}});
    EXPECT_TRUE(h100.wait_metrics([](const ParsedMetrics& m) {
        auto near = [&](const char* name, double want) {
            auto v = m.value(name, {{"gpu", "3"}});
            return v && std::abs(*v - want) < 1e-9;
        };
        return near("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.9) && near("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.405) &&
               near("DCGM_FI_PROF_DRAM_ACTIVE", 0.5) && m.find("DCGM_FI_PROF_SM_ACTIVE").empty();
    })) << "GPM values as ratios, and only the fields of DCGM_EXPORTER_COLLECTORS' file";
}

TEST(ExporterCli, BadCountersFilesExitTwoNamingFileAndLine) {
    TempDir dir;
    const std::map<std::string, std::string> env = {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}};
    const std::string bad = dir.write("bad.csv", "# header\nDCGM_FI_DEV_GPU_TEMP, gauge, ok\nDCGM_FI_DEV_FB_USED, gauge\n");
    auto r = run_process({KGPU_BINARY, "exporter", "--nvml-library", KGPU_SIM_LIBRARY, "-f", bad}, env);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("--collectors"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(bad + ":3: 2 fields instead of 3"), std::string::npos) << r.err;
    auto type = dir.write("type.csv", "DCGM_FI_DEV_GPU_TEMP, gage, typo\n");
    r = run_process({KGPU_BINARY, "exporter", "--nvml-library", KGPU_SIM_LIBRARY, "--collectors", type}, env);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find(type + ":1: unknown Prometheus metric type 'gage'"), std::string::npos) << r.err;
    r = run_process({KGPU_BINARY, "exporter", "--nvml-library", KGPU_SIM_LIBRARY}, {{"KGPU_SIM_NODE", fixture("t4x4.yaml")},
                                                                                   {"DCGM_EXPORTER_COLLECTORS", dir.path() + "/none.csv"}});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find(dir.path() + "/none.csv"), std::string::npos) << r.err;
    r = run_process({KGPU_BINARY, "exporter", "--nvml-library", KGPU_SIM_LIBRARY, "-f", dir.path()}, env);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
}

TEST(ExporterCli, DcgmExportersKubernetesAndModelNameFlagsAreAccepted) {
    TempDir dir;
    Exporter e("dgx-h100.yaml",
               {"--kubernetes", "--kubernetes-virtual-gpus", "--kubernetes-enable-pod-uid", "--kubernetes-enable-pod-labels",
                "--pod-resources-kubelet-socket", dir.path() + "/none.sock", "--container-runtime-endpoint",
                "unix://" + dir.path() + "/none-cri.sock"},
               {{"DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME", "true"}});
    ASSERT_NE(e.port(), 0);
    const auto m = e.metrics();
    auto s = m.find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "0"}});
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0]->label("modelName"), "NVIDIA-H100-80GB-HBM3");
    Exporter rbmn("t4x4.yaml", {"--rbmn"}, {{"KUBERNETES_VIRTUAL_GPUS", "true"}});
    const auto t4 = rbmn.metrics();
    EXPECT_EQ(t4.find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "0"}})[0]->label("modelName"), "Tesla-T4");
    EXPECT_NE(rbmn.proc().err().find("have no effect without --kubernetes"), std::string::npos) << rbmn.proc().err();
}

// dcgm-exporter 4.5.3-4.8.2's whole command line (pkg/cmd/app.go: every flag, with a typical
// value, spelled as its users do): the exporter starts and serves, acts on what it implements and
// says once per flag which ones it ignores.
TEST(ExporterCli, EveryDcgmExporterFlagIsAccepted) {
    TempDir dir;
    Exporter e("t4x4.yaml",
               {"-f", default_counters(), "-k", "-o", "-p", "f", "-m", "none", "-r", "10.0.0.9:5555",
                "--kubernetes-enable-pod-labels", "--kubernetes-enable-pod-uid", "--kubernetes-gpu-id-type", "uid",
                "--kubernetes-pod-label-allowlist-regex", "^app$,team", "-d", "f", "-n", "-s", "f", "--fake-gpus",
                "--web-systemd-socket", "-x", "60000", "--rbmn", "--debug", "--clock-events-count-window-size=60000",
                "--enable-dcgm-log", "--dcgm-log-level", "ERROR", "--log-format", "json", "--pod-resources-kubelet-socket",
                dir.path() + "/kubelet.sock", "--hpc-job-mapping-dir", "/var/lib/hpc-jobs", "--nvidia-resource-names",
                "nvidia.com/t4", "--kubernetes-virtual-gpus", "--dump-enabled", "--dump-directory", dir.path() + "/dumps",
                "--dump-retention", "12", "--dump-compression=false", "--kubernetes-enable-dra",
                "--disable-startup-validate", "--enable-gpu-bind-unbind-watch", "--gpu-bind-unbind-poll-interval", "2s",
                "--enable-pprof", "--container-runtime-endpoint", "unix://" + dir.path() + "/cri.sock"});
    ASSERT_NE(e.port(), 0) << e.proc().err();
    const auto m = e.metrics();
    auto s = m.find("DCGM_FI_DEV_GPU_TEMP");
    ASSERT_EQ(s.size(), 4u);
    EXPECT_TRUE(s[0]->label("uuid")) << "-o: the 1.x namespace's uuid label";
    EXPECT_FALSE(s[0]->label("UUID"));
    EXPECT_FALSE(s[0]->label("Hostname")) << "-n";
    EXPECT_EQ(s[0]->label("modelName"), "Tesla-T4") << "--rbmn";
    EXPECT_TRUE(m.find("DCGM_FI_DEV_MEMORY_TEMP").empty()) << "-f: T4 has no memory temperature anyway";
    EXPECT_TRUE(m.find("kgpu_nvml_errors_total").empty());
    // --log-format json: every line is an object with log/slog's keys; --debug: debug lines too.
    const std::string err = e.proc().err();
    std::istringstream lines(err);
    std::set<std::string> levels;
    std::string all_messages;
    for (std::string line; std::getline(lines, line);) {
        auto j = nlohmann::json::parse(line, nullptr, false);
        ASSERT_TRUE(j.is_object()) << "not a JSON line: " << line;
        ASSERT_TRUE(j.contains("time") && j.contains("level") && j.contains("msg")) << line;
        levels.insert(j["level"].get<std::string>());
        all_messages += j["msg"].get<std::string>() + "\n";
    }
    EXPECT_TRUE(levels.contains("DEBUG")) << err;
    for (const std::string flag :
         {"--remote-hostengine-info 10.0.0.9:5555", "--fake-gpus", "--web-systemd-socket", "--xid-count-window-size 60000",
          "--clock-events-count-window-size 60000", "--enable-dcgm-log", "--dcgm-log-level ERROR",
          "--hpc-job-mapping-dir /var/lib/hpc-jobs", "--dump-*", "--kubernetes-enable-dra", "--disable-startup-validate",
          "--enable-gpu-bind-unbind-watch 2s", "--enable-pprof"})
        EXPECT_NE(all_messages.find(flag + ": ignored: "), std::string::npos) << flag << "\n" << all_messages;
    EXPECT_EQ(all_messages.find("--cpu-devices"), std::string::npos) << "a flag at its default does not warn";
    // Flags of one concern warn once together (four --dump-* flags, the two bind/unbind ones).
    auto count = [&](std::string_view text) {
        size_t n = 0;
        for (auto at = all_messages.find(text); at != std::string::npos; at = all_messages.find(text, at + 1)) ++n;
        return n;
    };
    EXPECT_EQ(count("--dump-*: ignored: "), 1u) << all_messages;
    EXPECT_EQ(count("bind-unbind"), 1u) << all_messages;
    EXPECT_EQ(all_messages.find("--switch-devices"), std::string::npos);
    EXPECT_EQ(all_messages.find("--devices"), std::string::npos);

    // The same through dcgm-exporter's env vars; the defaults (no flag, no env var) warn about nothing.
    Exporter env("t4x4.yaml", {},
                 {{"DCGM_EXPORTER_USE_OLD_NAMESPACE", "true"}, {"DCGM_EXPORTER_DEVICES_STR", "g:2"},
                  {"DCGM_EXPORTER_CPU_DEVICES_STR", "g"}, {"DCGM_EXPORTER_OTHER_DEVICES_STR", "i"},
                  {"DCGM_REMOTE_HOSTENGINE_INFO", "dcgm:5555"}, {"DCGM_EXPORTER_USE_FAKE_GPUS", "true"},
                  {"DCGM_EXPORTER_SYSTEMD_SOCKET", "true"}, {"DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE", "1000"},
                  {"DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE", "1000"}, {"DCGM_EXPORTER_DEBUG", "true"},
                  {"DCGM_EXPORTER_ENABLE_DCGM_LOG", "true"}, {"DCGM_EXPORTER_DCGM_LOG_LEVEL", "VERB"},
                  {"DCGM_EXPORTER_LOG_FORMAT", "text"}, {"DCGM_HPC_JOB_MAPPING_DIR", "/x"},
                  {"DCGM_EXPORTER_DUMP_ENABLED", "true"}, {"DCGM_EXPORTER_DUMP_DIRECTORY", "/y"},
                  {"DCGM_EXPORTER_DUMP_RETENTION", "0"}, {"DCGM_EXPORTER_DUMP_COMPRESSION", "false"},
                  {"KUBERNETES_ENABLE_DRA", "true"}, {"DISABLE_STARTUP_VALIDATE", "true"},
                  {"DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH", "true"},
                  {"DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL", "5s"}, {"DCGM_EXPORTER_ENABLE_PPROF", "true"},
                  {"DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX", "app"}});
    ASSERT_NE(env.port(), 0) << env.proc().err();
    const auto env_metrics = env.metrics();
    s = env_metrics.find("DCGM_FI_DEV_GPU_TEMP");
    ASSERT_EQ(s.size(), 1u) << "DCGM_EXPORTER_DEVICES_STR=g:2";
    EXPECT_EQ(s[0]->label("gpu"), "2");
    EXPECT_TRUE(s[0]->label("uuid"));
    const std::string env_err = env.proc().err();
    for (const std::string flag : {"--cpu-devices g", "--switch-devices i", "--remote-hostengine-info dcgm:5555",
                                   "--dcgm-log-level VERB", "--enable-pprof", "--dump-*"})
        EXPECT_NE(env_err.find(flag + ": ignored: "), std::string::npos) << flag << "\n" << env_err;
    EXPECT_NE(env_err.find(" debug "), std::string::npos) << "DCGM_EXPORTER_DEBUG: debug lines, as text";
    EXPECT_NE(env_err.find("has no effect without --kubernetes-enable-pod-labels"), std::string::npos) << env_err;

    Exporter plain("t4x4.yaml");
    EXPECT_EQ(plain.proc().err().find("ignored"), std::string::npos) << plain.proc().err();
    EXPECT_EQ(plain.proc().err().find(" debug "), std::string::npos) << plain.proc().err();
}

// -d g:<ids>: only those GPUs' series, as dcgm-exporter's GPU index selection; an index the node
// lacks is named.
TEST(ExporterCli, DevicesSelectGpusByIndex) {
    Exporter one("t4x4.yaml", {"-d", "g:1"});
    ASSERT_NE(one.port(), 0);
    auto m = one.metrics();
    std::set<std::string> gpus;
    for (const auto& s : m.samples)
        if (s.name.starts_with("DCGM_") || s.name.starts_with("kgpu_gpu_"))
            if (auto g = s.label("gpu")) gpus.insert(std::string(*g));
    EXPECT_EQ(gpus, (std::set<std::string>{"1"}));
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP").size(), 1u);

    Exporter some("t4x4.yaml", {"--devices=g:0,2-3,7"});
    ASSERT_NE(some.port(), 0);
    gpus.clear();
    const auto some_metrics = some.metrics();
    for (const auto* s : some_metrics.find("DCGM_FI_DEV_GPU_TEMP")) gpus.insert(std::string(*s->label("gpu")));
    EXPECT_EQ(gpus, (std::set<std::string>{"0", "2", "3"}));
    EXPECT_NE(some.proc().err().find("--devices: this node has no GPU 7"), std::string::npos) << some.proc().err();

    Exporter all("t4x4.yaml", {"-d", "g"});
    EXPECT_EQ(all.metrics().find("DCGM_FI_DEV_GPU_TEMP").size(), 4u);
}

// --kubernetes-pod-label-allowlist-regex through the real binary, a fake kubelet and a fake CRI
// runtime: only the pod labels whose (unsanitised) name a pattern finds.
TEST(ExporterPods, PodLabelAllowlistKeepsOnlyMatchingLabels) {
    TempDir dir;
    FakePodResources pr(dir.path() + "/kubelet.sock");
    ASSERT_TRUE(pr.start());
    pr.add_pod("ml", "trainer-0", "main", "nvidia.com/gpu", {"0"});
    FakeCri cri(dir.path() + "/cri.sock");
    ASSERT_TRUE(cri.start());
    cri.add_sandbox("ml", "trainer-0", "0b1c2d3e-0000-4000-8000-000000000001",
                    {{"app.kubernetes.io/name", "trainer"}, {"team", "vision"}, {"app", "train"}, {"tier", "gold"}});
    const std::vector<std::string> base = {"--kubernetes", "--kubernetes-enable-pod-labels", "--pod-resources-kubelet-socket",
                                           dir.path() + "/kubelet.sock", "--container-runtime-endpoint",
                                           "unix://" + dir.path() + "/cri.sock", "--proc-root", dir.path()};
    auto labels_of = [](const Exporter& e) {
        std::set<std::string> names;
        e.wait_metrics([](const ParsedMetrics& m) { return !m.find("DCGM_FI_DEV_GPU_TEMP", {{"pod", "trainer-0"}}).empty(); });
        const auto m = e.metrics();
        for (const auto* s : m.find("DCGM_FI_DEV_GPU_TEMP", {{"pod", "trainer-0"}}))
            for (const auto& [k, v] : s->labels) names.insert(k);
        return names;
    };
    auto args = base;
    args.insert(args.end(), {"--kubernetes-pod-label-allowlist-regex", "^app\\.kubernetes\\.io/", 
                             "--kubernetes-pod-label-allowlist-regex", "^te.m$,(", "-d", "g:0"});
    Exporter e("t4x4.yaml", args);
    ASSERT_NE(e.port(), 0) << e.proc().err();
    auto names = labels_of(e);
    EXPECT_TRUE(names.contains("app_kubernetes_io_name")) << "matched before sanitising (a '/' in the pattern)";
    EXPECT_TRUE(names.contains("team"));
    EXPECT_FALSE(names.contains("app")) << "^app\\.kubernetes\\.io/ does not find 'app'";
    EXPECT_FALSE(names.contains("tier"));
    EXPECT_NE(e.proc().err().find("skipping '('"), std::string::npos) << "a bad pattern is skipped, as dcgm-exporter does";

    Exporter unanchored("t4x4.yaml", [&] {
        auto a = base;
        a.insert(a.end(), {"--kubernetes-pod-label-allowlist-regex", "ie"});
        return a;
    }());
    names = labels_of(unanchored);
    EXPECT_TRUE(names.contains("tier")) << "unanchored, as Go's MatchString";
    EXPECT_FALSE(names.contains("team"));
    EXPECT_FALSE(names.contains("app"));

    Exporter every("t4x4.yaml", base);
    names = labels_of(every);
    for (const char* n : {"app_kubernetes_io_name", "team", "app", "tier"}) EXPECT_TRUE(names.contains(n)) << n;
}

TEST(ExporterServe, EndpointsContentTypesAndGzip) {
    Exporter e("dgx-h100.yaml");
    auto r = e.get("/metrics");
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
    EXPECT_FALSE(r.headers.count("content-encoding"));
    auto m = parse_metrics(r.body);
    EXPECT_TRUE(m.errors.empty());
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP").size(), 8u);

    auto z = e.get("/metrics", {"Accept-Encoding: gzip"});
    ASSERT_EQ(z.status, 200);
    EXPECT_EQ(z.headers["content-encoding"], "gzip");
    EXPECT_EQ(z.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
    auto plain = gunzip(z.body);
    ASSERT_TRUE(plain);
    EXPECT_EQ(parse_metrics(*plain).find("DCGM_FI_DEV_GPU_TEMP").size(), 8u);

    auto head = http_request(e.port(), "HEAD", "/metrics");
    EXPECT_EQ(head.status, 200);
    EXPECT_TRUE(head.body.empty());
    auto health = e.get("/health");
    EXPECT_EQ(health.status, 200);
    EXPECT_EQ(health.body, "OK\n");
    EXPECT_EQ(e.get("/").status, 200);
    EXPECT_EQ(e.get("/metrics/extra").status, 404);
    EXPECT_EQ(e.get("/favicon.ico").status, 404);
    auto post = http_request(e.port(), "POST", "/metrics", {"Content-Length: 3"});
    EXPECT_EQ(post.status, 405);
    EXPECT_EQ(post.headers["allow"], "GET, HEAD");
    EXPECT_EQ(http_request(e.port(), "PUT", "/health").status, 405);
}

TEST(ExporterServe, PromtoolAcceptsTheOutputWithLintFindingsOnlyForDcgmNames) {
    if (::access("/usr/bin/promtool", X_OK) != 0) GTEST_SKIP() << "/usr/bin/promtool is missing (Debian package prometheus)";
    for (const char* node : {"dgx-h100.yaml", "a100-mig.yaml", "t4x4.yaml"}) {
        SCOPED_TRACE(node);
        Exporter e(node);
        TempDir dir;
        auto r = e.get("/metrics");
        ASSERT_EQ(r.status, 200);
        const std::string file = dir.write("metrics.txt", r.body);
        auto check = run_process({"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + file});
        // 0: clean, 3: lint findings; 1 would be a parse error.
        EXPECT_TRUE(check.exit_code == 0 || check.exit_code == 3) << check.exit_code << "\n" << check.out << check.err;
        std::istringstream lines(check.out + check.err);
        std::string line;
        int findings = 0;
        while (std::getline(lines, line)) {
            if (line.empty()) continue;
            ++findings;
            EXPECT_EQ(line.find("kgpu_"), std::string::npos) << "lint finding for our own metric: " << line;
            EXPECT_NE(line.find("DCGM_FI_"), std::string::npos) << line;
        }
        EXPECT_GT(findings, 0) << "promtool flags the dcgm names' camelCase labels / counters without _total; "
                                  "no findings at all means promtool did not read the text";
    }
}

// Two real kgpu processes: `kgpu labels` fails to reach its API server and counts it in its status
// file; the exporter serves that as kgpu_kube_api_* (lint-clean for promtool).
TEST(ExporterServe, TheKubeApiCountsOfKgpuLabelsAreServed) {
    TempDir dir;
    std::filesystem::create_directories(dir.path() + "/status");
    const std::string kubeconfig = dir.write(
        "kubeconfig", "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                      "clusters: [{name: k, cluster: {server: \"https://127.0.0.1:1\", insecure-skip-tls-verify: true}}]\n"
                      "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n");
    const std::vector<std::string> oneshot = {KGPU_BINARY, "labels", "--oneshot", "--write-node-labels", "--node-name", "node-a",
                                              "--kubeconfig", kubeconfig, "--nvml-library", KGPU_SIM_LIBRARY};
    // A one-off run takes the flag, not the container's variable (which the running labels use).
    auto one_off = run_process(oneshot, {{"KGPU_SIM_NODE", fixture("t4x4.yaml")},
                                         {"KGPU_KUBE_API_STATUS_FILE", dir.path() + "/status/labels.json"}});
    EXPECT_NE(one_off.exit_code, 0) << one_off.err;  // nothing listens on port 1
    EXPECT_FALSE(std::filesystem::exists(dir.path() + "/status/labels.json"));
    std::vector<std::string> argv = oneshot;
    argv.insert(argv.end(), {"--kube-api-status-file", dir.path() + "/status/labels.json"});
    auto labels = run_process(argv, {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}});
    EXPECT_NE(labels.exit_code, 0) << labels.err;
    ASSERT_TRUE(std::filesystem::exists(dir.path() + "/status/labels.json")) << labels.err;

    Exporter e("t4x4.yaml", {"--kube-api-status-dir", dir.path() + "/status"});
    ASSERT_TRUE(e.wait_metrics([](const ParsedMetrics& m) {
        return m.value("kgpu_kube_api_errors_total", {{"component", "labels"}, {"kind", "unreachable"}}).value_or(0) >= 1;
    })) << slurp(dir.path() + "/status/labels.json");
    auto m = e.metrics();
    EXPECT_GE(m.value("kgpu_kube_api_requests_total", {{"component", "labels"}, {"method", "GET"}, {"code", "<error>"}}).value_or(0), 1.0);
    EXPECT_TRUE(m.find("kgpu_kube_api_last_success_timestamp_seconds").empty());
    if (::access("/usr/bin/promtool", X_OK) == 0) {
        const std::string file = dir.write("metrics.txt", e.get("/metrics").body);
        auto check = run_process({"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + file});
        EXPECT_EQ((check.out + check.err).find("kgpu_kube"), std::string::npos) << check.out << check.err;
    }
}

TEST(ExporterServe, SixtyFourIdleConnectionsAndHundredsOfConcurrentScrapes) {
    Exporter e("dgx-h100.yaml", {"--http-idle-timeout", "120"});
    std::vector<int> idle;
    for (int i = 0; i < 64; ++i) {
        int fd = connect_loopback(e.port());
        ASSERT_GE(fd, 0);
        idle.push_back(fd);
    }
    auto r = http_request(e.port(), "GET", "/metrics", {}, 20000);
    EXPECT_EQ(r.status, 200) << "a scrape must not wait behind idle connections";
    for (int fd : idle) ::close(fd);

    constexpr int kThreads = 16, kPerThread = 20;
    std::atomic<int> ok{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < kPerThread; ++i) {
                auto x = http_request(e.port(), "GET", "/metrics", t % 2 ? std::vector<std::string>{"Accept-Encoding: gzip"}
                                                                           : std::vector<std::string>{});
                if (x.status == 200 && !x.body.empty()) ++ok;
            }
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(ok.load(), kThreads * kPerThread);
    EXPECT_EQ(e.get("/health").status, 200);
}

TEST(ExporterServe, SigtermAndSigintExitCleanly) {
    for (int sig : {SIGTERM, SIGINT}) {
        Exporter e("t4x4.yaml");
        ASSERT_EQ(e.get("/metrics").status, 200);
        e.proc().signal(sig);
        EXPECT_EQ(e.proc().wait(30000), 0) << e.proc().err();
    }
}

TEST(ExporterServe, SimEventsAtTheNextInterval) {
    TempDir dir;
    const std::string events = dir.write("events", "");
    Exporter e("dgx-h100.yaml", {}, {{"KGPU_SIM_EVENTS", events}});
    auto append = [&](const std::string& line) {
        std::ofstream out(events, std::ios::app);
        out << line << "\n";
    };
    append("util 0 91 12");
    EXPECT_TRUE(e.wait_metrics([](const ParsedMetrics& m) { return m.value("DCGM_FI_DEV_GPU_UTIL", {{"gpu", "0"}}) == 91.0; }));
    append("proc 4 777 1048576 infer");
    EXPECT_TRUE(e.wait_metrics([](const ParsedMetrics& m) {
        return m.value("kgpu_process_fb_used_bytes", {{"gpu", "4"}, {"pid", "777"}}) == 1048576.0;
    }));
    append("xid 6 63");
    EXPECT_TRUE(e.wait_metrics([](const ParsedMetrics& m) { return m.value("DCGM_FI_DEV_XID_ERRORS", {{"gpu", "6"}}) == 63.0; }));
    append("lost 7");
    EXPECT_TRUE(e.wait_metrics([](const ParsedMetrics& m) {
        return m.find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "7"}}).empty() &&
               m.value("kgpu_gpu_health", {{"gpu", "7"}, {"state", "lost"}}) == 1.0 &&
               m.find("DCGM_FI_DEV_GPU_TEMP").size() == 7;
    }));
    EXPECT_EQ(e.get("/health").status, 200) << "a lost GPU shows in the metrics, not in /health";
}

TEST(ExporterPrometheus, ARealPrometheusScrapesGpuMetricsWithPodLabels) {
    if (::access("/usr/bin/prometheus", X_OK) != 0) GTEST_SKIP() << "/usr/bin/prometheus is missing (Debian package prometheus)";
    TempDir dir;
    FakePodResources pr(dir.path() + "/kubelet.sock");
    ASSERT_TRUE(pr.start());
    pr.add_pod("ml", "trainer-0", "main", "nvidia.com/gpu", {"GPU-64bbca15-1776-feaf-35c7-c0761cd05691", "1"});
    Exporter e("dgx-h100.yaml",
               {"--kubernetes", "--pod-resources-kubelet-socket", dir.path() + "/kubelet.sock",
                "--container-runtime-endpoint", "unix://" + dir.path() + "/no-cri.sock", "--proc-root", dir.path()});
    ASSERT_NE(e.port(), 0);
    ASSERT_TRUE(e.wait_metrics([](const ParsedMetrics& m) {
        return !m.find("DCGM_FI_DEV_GPU_UTIL", {{"pod", "trainer-0"}}).empty();
    })) << "pod labels never showed up";

    const std::string config = dir.write("prometheus.yml",
                                         "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                                         "scrape_configs:\n  - job_name: kgpu\n    static_configs:\n"
                                         "      - targets: ['127.0.0.1:" + std::to_string(e.port()) + "']\n");
    ChildProcess prom({"/usr/bin/prometheus", "--config.file=" + config, "--storage.tsdb.path=" + dir.path() + "/tsdb",
                       "--web.listen-address=127.0.0.1:0", "--log.level=warn"});
    const int prom_port = wait_for_listening_port(prom);
    ASSERT_GT(prom_port, 0) << "Prometheus never listened; its log:\n" << prom.err();
    const std::string query = "/api/v1/query?query=" + url_encode("DCGM_FI_DEV_GPU_UTIL{pod=\"trainer-0\",namespace=\"ml\"}");
    nlohmann::json result;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline && prom.running()) {
        auto r = http_request(prom_port, "GET", query, {}, 5000);
        if (r.status == 200) {
            auto j = nlohmann::json::parse(r.body, nullptr, false);
            if (!j.is_discarded() && j["status"] == "success" && j["data"]["result"].size() == 2) {
                result = j["data"]["result"];
                break;
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    ASSERT_EQ(result.size(), 2u) << "Prometheus never returned the series; its log:\n" << prom.err();
    std::set<std::string> gpus;
    for (const auto& s : result) {
        EXPECT_EQ(s["metric"]["container"], "main");
        EXPECT_EQ(s["metric"]["job"], "kgpu");
        EXPECT_TRUE(s["metric"].contains("UUID"));
        EXPECT_TRUE(s["metric"].contains("modelName"));
        gpus.insert(s["metric"]["gpu"].get<std::string>());
    }
    EXPECT_EQ(gpus, (std::set<std::string>{"0", "1"}));
    // The scrape itself was healthy.
    auto up = http_request(prom_port, "GET", "/api/v1/query?query=up", {}, 5000);
    EXPECT_NE(up.body.find("\"1\""), std::string::npos) << up.body;
    prom.signal(SIGTERM);
    prom.wait(30000);
}

// grafana/dcgm-exporter-dashboard.json of dcgm-exporter 4.5.3-4.8.2: its two template variables and
// every panel's expression, written here from the dashboard's shape. Graph panels are range
// queries; the "instant" gauge an instant query.
struct Panel {
    std::string title, expr;
    bool instant = false;
};
const std::vector<Panel> kDashboardPanels = {
    {"GPU Temperature", "DCGM_FI_DEV_GPU_TEMP{instance=~\"$instance\", gpu=~\"$gpu\"}"},
    {"GPU Avg. Temp", "avg(DCGM_FI_DEV_GPU_TEMP{instance=~\"$instance\", gpu=~\"$gpu\"})"},
    {"GPU Power Usage", "DCGM_FI_DEV_POWER_USAGE{instance=~\"$instance\", gpu=~\"$gpu\"}"},
    {"GPU Power Total", "sum(DCGM_FI_DEV_POWER_USAGE{instance=~\"$instance\", gpu=~\"$gpu\"})", true},
    {"GPU SM Clocks", "DCGM_FI_DEV_SM_CLOCK{instance=~\"$instance\", gpu=~\"$gpu\"} * 1000000"},
    {"GPU Utilization", "DCGM_FI_DEV_GPU_UTIL{instance=~\"$instance\", gpu=~\"$gpu\"}"},
    {"GPU Framebuffer Mem Used", "DCGM_FI_DEV_FB_USED{instance=~\"$instance\", gpu=~\"$gpu\"}"},
    {"Tensor Core Utilization", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{instance=~\"$instance\", gpu=~\"$gpu\"}"},
};

// Grafana's value for a multi-value variable set to "All" without a custom all value, in a
// Prometheus query: every value regex-escaped, joined as (a|b|c).
std::string grafana_all(const std::vector<std::string>& values) {
    std::string out = "(";
    for (std::size_t i = 0; i < values.size(); ++i) {
        if (i) out += "|";
        for (char c : values[i]) {
            if (std::string_view("\\^$*+?.()|{}[]/").find(c) != std::string_view::npos) out += "\\\\";
            out += c;
        }
    }
    return out + ")";
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (std::size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
    return s;
}

// A Prometheus HTTP API answer's data, or null when the call failed.
nlohmann::json prometheus_api(int port, const std::string& path) {
    auto r = http_request(port, "GET", path, {}, 5000);
    if (r.status != 200) return nullptr;
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (j.is_discarded() || j["status"] != "success") return nullptr;
    return j["data"];
}

TEST(ExporterPrometheus, EveryPanelOfDcgmExportersGrafanaDashboardHasData) {
    if (::access("/usr/bin/prometheus", X_OK) != 0) GTEST_SKIP() << "/usr/bin/prometheus is missing (Debian package prometheus)";
    TempDir dir;
    // Busy GPUs, so the tensor panel shows work (the panel needs a series either way).
    const std::string events = dir.write("events", "util 0 90 60\nutil 5 40 20\ngpm 6 tensor_util=70\n");
    Exporter e("dgx-h100.yaml", {}, {{"KGPU_SIM_EVENTS", events}});
    ASSERT_NE(e.port(), 0);
    const std::string config = dir.write("prometheus.yml",
                                         "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                                         "scrape_configs:\n  - job_name: dcgm\n    static_configs:\n"
                                         "      - targets: ['127.0.0.1:" + std::to_string(e.port()) + "']\n");
    ChildProcess prom({"/usr/bin/prometheus", "--config.file=" + config, "--storage.tsdb.path=" + dir.path() + "/tsdb",
                       "--web.listen-address=127.0.0.1:0", "--log.level=warn"});
    const int prom_port = wait_for_listening_port(prom);
    ASSERT_GT(prom_port, 0) << "Prometheus never listened; its log:\n" << prom.err();

    // The template variables, as Grafana fills them: label_values(DCGM_FI_DEV_GPU_TEMP, instance|gpu).
    auto label_values = [&](const std::string& label) {
        std::vector<std::string> values;
        auto data = prometheus_api(prom_port, "/api/v1/label/" + label + "/values?match[]=DCGM_FI_DEV_GPU_TEMP");
        if (data.is_array())
            for (const auto& v : data) values.push_back(v.get<std::string>());
        std::ranges::sort(values);  // the variables' "sort": 1
        return values;
    };
    std::vector<std::string> instances, gpus;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    std::map<std::string, nlohmann::json> results;
    while (std::chrono::steady_clock::now() < deadline && prom.running()) {
        instances = label_values("instance");
        gpus = label_values("gpu");
        results.clear();
        if (!instances.empty() && gpus.size() == 8) {
            const auto now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
            for (const auto& p : kDashboardPanels) {
                const std::string expr = replace_all(replace_all(p.expr, "$instance", grafana_all(instances)), "$gpu",
                                                     grafana_all(gpus));
                const std::string q = url_encode(expr);
                auto data = p.instant ? prometheus_api(prom_port, "/api/v1/query?query=" + q)
                                      : prometheus_api(prom_port, fmt::format("/api/v1/query_range?query={}&start={:.3f}"
                                                                              "&end={:.3f}&step=1",
                                                                              q, now - 60, now));
                if (!data.is_null() && !data["result"].empty()) results[p.title] = data["result"];
            }
            // The tensor panel has a sample with work in it for every GPU.
            bool tensor = false;
            if (auto it = results.find("Tensor Core Utilization"); it != results.end() && it->second.size() == 8)
                for (const auto& series : it->second)
                    if (series["metric"]["gpu"] == "6" && !series["values"].empty() &&
                        std::stod(series["values"].back()[1].get<std::string>()) > 0.69)
                        tensor = true;
            if (results.size() == kDashboardPanels.size() && tensor) break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    EXPECT_EQ(instances, std::vector<std::string>{"127.0.0.1:" + std::to_string(e.port())});
    EXPECT_EQ(gpus, (std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7"}));
    for (const auto& p : kDashboardPanels) {
        auto it = results.find(p.title);
        ASSERT_NE(it, results.end()) << "panel '" << p.title << "' has no data: " << p.expr << "\nPrometheus log:\n"
                                     << prom.err();
        if (p.expr.starts_with("avg(") || p.expr.starts_with("sum(")) {
            EXPECT_EQ(it->second.size(), 1u) << p.title;
        } else {
            EXPECT_EQ(it->second.size(), 8u) << p.title << ": one series per GPU";
        }
    }
    const auto& tensor = results["Tensor Core Utilization"];
    for (const auto& series : tensor) {
        ASSERT_FALSE(series["values"].empty());
        const double last = std::stod(series["values"].back()[1].get<std::string>());
        const std::string g = series["metric"]["gpu"];
        if (g == "6") {
            EXPECT_NEAR(last, 0.70, 1e-6);
        } else if (g == "0") {
            EXPECT_NEAR(last, 0.405, 1e-6) << "0.45 x 90 % HMMA from the simulator's model";
        }
        EXPECT_GE(last, 0.0);
        EXPECT_LE(last, 1.0) << "a ratio, as DCGM serves it";
    }
    prom.signal(SIGTERM);
    prom.wait(30000);
}


// ---- Floods of idle and slow clients (issue #14) ------------------------------------------------

int count(const std::string& text, std::string_view what) {
    int n = 0;
    for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
    return n;
}

// The test holds thousands of sockets: lift its own soft limit (as the exporter does).
bool enough_fds(rlim_t need) {
    rlimit rl{};
    ::getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &rl);
    }
    ::getrlimit(RLIMIT_NOFILE, &rl);
    return rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need;
}

// Scrapes from 127.0.0.1 (the flood comes from other addresses) and returns the slowest, in ms;
// a failed scrape counts as 1e9.
double slowest_scrape(int port, int scrapes, std::chrono::milliseconds gap) {
    double worst = 0;
    for (int i = 0; i < scrapes; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        auto r = http_request(port, "GET", "/metrics", {"Accept-Encoding: gzip"}, 20000);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        worst = std::max(worst, r.status == 200 && !r.body.empty() ? ms : 1e9);
        std::this_thread::sleep_for(gap);
    }
    return worst;
}

std::string source_ip(int i, int per_address) { return fmt::format("127.0.0.{}", 2 + i / per_address); }

TEST(ExporterFlood, TwoThousandIdleConnectionsFromOtherClientsDoNotDelayAScrape) {
    if (!enough_fds(2500)) GTEST_SKIP() << "needs 2500 file descriptors";
    // Timeouts far beyond the test: only taking connections and making room can keep scrapes fast.
    Exporter e("dgx-h100.yaml", {"--http-idle-timeout", "300", "--http-request-timeout", "300"});
    ASSERT_NE(e.port(), 0);
    std::vector<int> idle;
    for (int i = 0; i < 2000; ++i) {
        const int fd = connect_loopback(e.port(), source_ip(i, 100).c_str());
        ASSERT_GE(fd, 0) << "connection " << i;
        idle.push_back(fd);
    }
    const double worst = slowest_scrape(e.port(), 20, std::chrono::milliseconds(50));
    RecordProperty("slowest_scrape_ms", std::to_string(worst));
    EXPECT_LT(worst, 1000.0) << "a scrape waited behind 2000 idle connections";
    EXPECT_TRUE(e.wait_metrics([](const ParsedMetrics& m) {
        return m.value("kgpu_exporter_http_connections_closed_total", {{"reason", "evicted"}}).value_or(0) >= 1000;
    })) << "the oldest idle connections made room, and the metric says so";
    EXPECT_EQ(count(e.proc().err(), "the limit: closing the oldest"), 1) << "logged once:\n" << e.proc().err();
    for (int fd : idle) ::close(fd);
}

TEST(ExporterFlood, AThousandClientsSendingAHeaderByteASecondDoNotDelayAScrape) {
    if (!enough_fds(2500)) GTEST_SKIP() << "needs 2500 file descriptors";
    Exporter e("dgx-h100.yaml", {"--http-idle-timeout", "300", "--http-request-timeout", "300"});
    ASSERT_NE(e.port(), 0);
    constexpr int kSlow = 1000;
    const std::string head = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(100, 'z');
    std::vector<int> fds(kSlow, -1);
    std::vector<size_t> sent(kSlow, 0);
    std::atomic<bool> stop{false};
    std::atomic<int> reconnects{0}, rounds{0};
    auto connect_one = [&](int i) {
        fds[static_cast<size_t>(i)] = connect_loopback(e.port(), source_ip(i, 100).c_str());
        sent[static_cast<size_t>(i)] = 0;
    };
    for (int i = 0; i < kSlow; ++i) connect_one(i);
    // Every second, one more byte of the head on every connection; a connection the server
    // closed is opened again (an attacker would).
    std::thread trickle([&] {
        while (!stop) {
            for (int i = 0; i < kSlow && !stop; ++i) {
                int& fd = fds[static_cast<size_t>(i)];
                size_t& n = sent[static_cast<size_t>(i)];
                if (fd < 0 || ::send(fd, head.data() + n % head.size(), 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) {
                    if (fd >= 0) ::close(fd);
                    connect_one(i);
                    ++reconnects;
                    continue;
                }
                ++n;
            }
            ++rounds;
            std::this_thread::sleep_for(std::chrono::seconds(1));
        }
    });
    // Scrapes start after two rounds of the trickle: every connection partway into its head (or
    // just opened again).
    for (int i = 0; i < 3000 && rounds < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (rounds < 2) {
        stop = true;
        trickle.join();
        for (int fd : fds)
            if (fd >= 0) ::close(fd);
        FAIL() << "the slow clients' second round never came";
    }
    const double worst = slowest_scrape(e.port(), 20, std::chrono::milliseconds(200));
    stop = true;
    trickle.join();
    for (int fd : fds)
        if (fd >= 0) ::close(fd);
    RecordProperty("slowest_scrape_ms", std::to_string(worst));
    EXPECT_LT(worst, 1000.0) << "a scrape waited behind " << kSlow << " slow clients";
    EXPECT_EQ(e.get("/health").status, 200);
}

// ---- Bounded pod attribution (issue #14) --------------------------------------------------------

long status_kib(int pid, const char* key) { return kgpu::test::proc_status_kib(pid, key); }

TEST(ExporterPods, AHundredThousandPodsOnOneGpuStayWithinMemoryAndScrapeBudgets) {
    TempDir dir;
    FakePodResources pr(dir.path() + "/kubelet.sock");
    ASSERT_TRUE(pr.start());
    const std::string uuid0 = "GPU-64bbca15-1776-feaf-35c7-c0761cd05691";  // dgx-h100.yaml's GPU 0
    v1::ListPodResourcesResponse list;
    for (int i = 0; i < 100000; ++i) {
        auto* p = list.add_pod_resources();
        p->set_name(fmt::format("inference-{:06}", i));
        p->set_namespace_(fmt::format("team-{}", i % 50));
        auto* c = p->add_containers();
        c->set_name("server");
        auto* d = c->add_devices();
        d->set_resource_name("nvidia.com/gpu");
        d->add_device_ids(fmt::format("{}::{}", uuid0, i));
    }
    pr.set(std::move(list));
    Exporter e("dgx-h100.yaml",
               {"--kubernetes", "--kubernetes-virtual-gpus", "--pod-resources-kubelet-socket", dir.path() + "/kubelet.sock",
                "--container-runtime-endpoint", "unix://" + dir.path() + "/no-cri.sock", "--proc-root", dir.path()});
    ASSERT_NE(e.port(), 0);
    ASSERT_TRUE(e.wait_metrics([](const ParsedMetrics& m) {
        return m.value("kgpu_exporter_pods_over_limit", {{"gpu", "0"}}) == 100000.0 - 64 &&
               m.value("kgpu_collections_total").value_or(0) >= 5;
    }, 120)) << e.proc().err().substr(0, 4000);
    const auto r = e.get("/metrics");
    ASSERT_EQ(r.status, 200);
    const auto m = parse_metrics(r.body);
    EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP", {{"gpu", "0"}}).size(), 64u);
    const long rss = status_kib(e.proc().pid(), "VmRSS:"), peak = status_kib(e.proc().pid(), "VmHWM:");
    RecordProperty("scrape_bytes", std::to_string(r.body.size()));
    RecordProperty("rss_kib", std::to_string(rss));
    RecordProperty("peak_rss_kib", std::to_string(peak));
    EXPECT_LT(r.body.size(), 20u << 20) << "scrape size";
    EXPECT_LT(rss, 96 * 1024) << "RSS in KiB";
    EXPECT_LT(peak, 96 * 1024) << "peak RSS in KiB";
    // One line names the GPU over the limit and some of its pods, however many passes ran.
    const std::string err = e.proc().err();
    EXPECT_EQ(count(err, "more than 64 containers hold a GPU"), 1) << err.substr(0, 4000);
    EXPECT_NE(err.find("GPU 0: 99936 left out (team-"), std::string::npos) << err.substr(0, 4000);
    EXPECT_LT(err.size(), 20000u) << "no flood of log lines";
}

TEST(ExporterPods, HealthNamesAPodResourcesSocketThatDoesNotAnswer) {
    TempDir dir;
    FakePodResources pr(dir.path() + "/kubelet.sock");
    ASSERT_TRUE(pr.start());
    pr.set_hang(true);
    Exporter e("t4x4.yaml", {"--kubernetes", "--pod-resources-kubelet-socket", dir.path() + "/kubelet.sock",
                             "--container-runtime-endpoint", "unix://" + dir.path() + "/no-cri.sock", "--proc-root",
                             dir.path()});
    ASSERT_NE(e.port(), 0);
    auto h = e.get("/health");
    EXPECT_EQ(h.status, 200);
    EXPECT_NE(h.body.find("pod attribution: hung: PodResources List on " + dir.path() + "/kubelet.sock"),
              std::string::npos)
        << h.body;
    EXPECT_EQ(e.metrics().value("kgpu_exporter_pod_attribution_up"), 0.0);
}

// ---- TLS and basic auth (--web-config-file, as dcgm-exporter) ------------------------------------

std::string mapped_libraries(int pid) {
    std::string out;
    std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
    std::string line;
    while (std::getline(in, line))
        for (const char* lib : {"libssl", "libcrypto", "libgnutls", "libmicrohttpd", "libcrypt.so"})
            if (line.find(lib) != std::string::npos && out.find(lib) == std::string::npos) out += std::string(lib) + " ";
    return out;
}

TEST(ExporterTls, NoTlsLibraryIsLinkedOrMappedWithoutAWebConfig) {
    auto ldd = run_process({"/usr/bin/ldd", KGPU_BINARY});
    ASSERT_EQ(ldd.exit_code, 0) << ldd.err;
    for (const char* lib : {"libgnutls", "libmicrohttpd", "libssl", "libcrypto", "libcrypt.so"})
        EXPECT_EQ(ldd.out.find(lib), std::string::npos) << lib << " is linked:\n" << ldd.out;
    Exporter e("t4x4.yaml");
    ASSERT_EQ(e.get("/metrics").status, 200);
    EXPECT_EQ(mapped_libraries(e.proc().pid()), "");
}

TEST(ExporterTls, APrometheusWithTlsAndBasicAuthScrapesAndAWrongPasswordDoesNot) {
    if (::access("/usr/bin/prometheus", X_OK) != 0) GTEST_SKIP() << "/usr/bin/prometheus is missing (Debian package prometheus)";
    if (::access("/usr/bin/openssl", X_OK) != 0) GTEST_SKIP() << "/usr/bin/openssl is missing (Debian package openssl)";
    TempDir dir;
    std::string err;
    auto pki = make_pki(dir.path(), err);
    ASSERT_TRUE(pki) << err;
    const std::string web = dir.write("web-config.yml", "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                                                        "basic_auth_users:\n  alice: " + bcrypt_hash("secret", 6) + "\n");
    // The env var dcgm-exporter's Helm chart sets.
    Exporter e("dgx-h100.yaml", {}, {{"DCGM_EXPORTER_WEB_CONFIG_FILE", web}});
    ASSERT_NE(e.port(), 0);
    EXPECT_NE(e.proc().err().find("(TLS)"), std::string::npos) << e.proc().err();
    EXPECT_NE(mapped_libraries(e.proc().pid()).find("libssl"), std::string::npos) << "OpenSSL is loaded for TLS";
    EXPECT_EQ(http_request(e.port(), "GET", "/metrics").status, 400) << "plain HTTP on the TLS port";

    auto job = [&](const std::string& name, const std::string& password) {
        return "  - job_name: " + name + "\n    scheme: https\n    tls_config:\n      ca_file: " + pki->ca_cert +
               "\n    basic_auth:\n      username: alice\n      password: " + password +
               "\n    static_configs:\n      - targets: ['127.0.0.1:" + std::to_string(e.port()) + "']\n";
    };
    const std::string config = dir.write("prometheus.yml", "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                                                           "scrape_configs:\n" + job("kgpu", "secret") + job("intruder", "guess"));
    ChildProcess prom({"/usr/bin/prometheus", "--config.file=" + config, "--storage.tsdb.path=" + dir.path() + "/tsdb",
                       "--web.listen-address=127.0.0.1:0", "--log.level=warn"});
    const int prom_port = wait_for_listening_port(prom);
    ASSERT_GT(prom_port, 0) << "Prometheus never listened; its log:\n" << prom.err();
    std::map<std::string, std::string> up;
    std::size_t temps = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline && prom.running()) {
        auto r = http_request(prom_port, "GET", "/api/v1/query?query=up", {}, 5000);
        auto t = http_request(prom_port, "GET", "/api/v1/query?query=" + url_encode("DCGM_FI_DEV_GPU_TEMP{job=\"kgpu\"}"), {}, 5000);
        if (r.status == 200 && t.status == 200) {
            auto j = nlohmann::json::parse(r.body, nullptr, false);
            auto jt = nlohmann::json::parse(t.body, nullptr, false);
            up.clear();
            if (!j.is_discarded())
                for (const auto& s : j["data"]["result"]) up[s["metric"]["job"].get<std::string>()] = s["value"][1].get<std::string>();
            temps = jt.is_discarded() ? 0 : jt["data"]["result"].size();
            if (up.size() == 2 && temps == 8) break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    EXPECT_EQ(up["kgpu"], "1") << prom.err();
    EXPECT_EQ(up["intruder"], "0") << "a wrong password must not scrape";
    EXPECT_EQ(temps, 8u);
    prom.signal(SIGTERM);
    prom.wait(30000);
}

TEST(ExporterTls, ABadWebConfigExitsTwoNamingFileAndLine) {
    TempDir dir;
    const std::string web = dir.write("web.yml", "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  min_version: TLS9\n");
    dir.write("a.crt", "x");
    dir.write("a.key", "y");
    auto r = run_process({KGPU_BINARY, "exporter", "--nvml-library", KGPU_SIM_LIBRARY, "--web-config-file", web},
                         {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find(web + ":4: key 'tls_server_config.min_version'"), std::string::npos) << r.err;
    // Parses, but the certificate does not load.
    const std::string web2 = dir.write("web2.yml", "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n");
    r = run_process({KGPU_BINARY, "exporter", "--nvml-library", KGPU_SIM_LIBRARY, "--web-config-file", web2},
                    {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("a.crt"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kgpu::test
