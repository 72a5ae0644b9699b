// `kgpu info` end to end: the built binary, the real dlopen of the simulator, every fixture.
// Expected values come from two places: facts the fixtures were written to model (8 H100s all
// NV18, NVLink pairs 0-1 and 2-3, ...) and the fixture files themselves (UUIDs, bus ids), read
// here independently with yaml-cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/process.h"

using kgpu::test::run_process;
using kgpu::test::RunResult;
using kgpu::test::TempDir;
using ::testing::HasSubstr;

namespace {

std::string fixture(const std::string& name) { return std::string(KGPU_SOURCE_DIR) + "/sim/nodes/" + name; }

struct Info {
    RunResult run;
    nlohmann::json json;
};

RunResult kgpu_info(const std::string& node, std::vector<std::string> extra = {},
                    std::map<std::string, std::string> env = {}) {
    static TempDir empty_sysfs;  // no numa_node files: NUMA comes from NVML
    std::vector<std::string> argv = {KGPU_BINARY, "info", "--nvml-library", KGPU_SIM_LIBRARY, "--sysfs-root",
                                     empty_sysfs.path()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    env["KGPU_SIM_NODE"] = node;
    return run_process(argv, env);
}

Info info_json(const std::string& node, std::map<std::string, std::string> env = {}) {
    Info i{kgpu_info(node, {"--json"}, std::move(env)), {}};
    if (i.run.exit_code == 0) i.json = nlohmann::json::parse(i.run.out);
    return i;
}

const nlohmann::json& pair(const nlohmann::json& j, unsigned a, unsigned b) {
    for (const auto& p : j["topology"]["pairs"])
        if (p["gpu_a"] == a && p["gpu_b"] == b) return p;
    throw std::runtime_error("no such pair");
}

// Every GPU in the JSON matches its fixture entry.
void expect_matches_fixture(const nlohmann::json& j, const std::string& path) {
    YAML::Node y = YAML::LoadFile(path);
    EXPECT_EQ(j["driver_version"], y["driver_version"].as<std::string>());
    const int cuda = y["cuda_driver_version"].as<int>();
    EXPECT_EQ(j["cuda_version"], fmt::format("{}.{}", cuda / 1000, (cuda % 1000) / 10));
    ASSERT_EQ(j["gpus"].size(), y["gpus"].size());
    EXPECT_EQ(j["gpu_count"], y["gpus"].size());
    for (size_t i = 0; i < y["gpus"].size(); ++i) {
        const auto& g = j["gpus"][i];
        const YAML::Node f = y["gpus"][i];
        SCOPED_TRACE(fmt::format("GPU {}", i));
        EXPECT_EQ(g["index"], i);
        EXPECT_EQ(g["uuid"], f["uuid"].as<std::string>());
        EXPECT_EQ(g["name"], f["name"].as<std::string>());
        EXPECT_EQ(g["serial"], f["serial"].as<std::string>());
        EXPECT_EQ(g["minor"], f["minor"].as<unsigned>());
        EXPECT_EQ(g["pci_bus_id"], f["pci_bus_id"].as<std::string>());
        EXPECT_EQ(g["memory_total_mib"], f["memory_mib"].as<unsigned>());
        EXPECT_EQ(g["compute_capability"], f["compute_capability"].as<std::string>());
        EXPECT_EQ(g["architecture"], f["architecture"].as<std::string>());
        EXPECT_EQ(g["power_limit_w"], f["power_limit_w"].as<unsigned>());
        EXPECT_EQ(g["numa_node"], f["numa_node"].as<int>());
        EXPECT_EQ(g["numa_source"], "nvml");
        EXPECT_EQ(g["state"], "ok");
        // A GPU without a `mig` block is not MIG capable; with one, MIG is in the fixture's mode.
        EXPECT_EQ(g["mig"]["mode"], f["mig"] ? f["mig"]["mode"].as<std::string>() : "unsupported");
        if (f["mig"] && f["mig"]["devices"]) {
            ASSERT_EQ(g["mig"]["devices"].size(), f["mig"]["devices"].size());
            for (size_t m = 0; m < f["mig"]["devices"].size(); ++m) {
                const auto& fm = f["mig"]["devices"][m];
                const auto& jm = g["mig"]["devices"][m];
                EXPECT_EQ(jm["uuid"], fm["uuid"].as<std::string>());
                EXPECT_EQ(jm["profile"], fm["profile"].as<std::string>());
                EXPECT_EQ(jm["gpu_instance_id"], fm["gpu_instance_id"].as<unsigned>());
                EXPECT_EQ(jm["compute_instance_id"], fm["compute_instance_id"].as<unsigned>());
                EXPECT_EQ(jm["memory_mib"], fm["memory_mib"].as<unsigned>());
                EXPECT_EQ(jm["sm_count"], fm["sm_count"].as<unsigned>());
            }
        } else {
            EXPECT_TRUE(g["mig"]["devices"].empty());
        }
    }
}

// KGPU_NVML_TRACE (nvml/trace.h): every NVML call of `kgpu info`, through the real dlopen of the
// simulator, logged with its arguments and result; nothing without the variable.
TEST(NvmlTrace, EveryCallIsLoggedWithItsArgumentsAndResult) {
    const std::string uuid0 = "GPU-27c6c8a0-651e-182c-6150-bb899bab8d15";  // t4x4's GPU 0
    auto traced = run_process({KGPU_BINARY, "--log-level", "debug", "info", "--json", "--nvml-library", KGPU_SIM_LIBRARY},
                              {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}, {"KGPU_NVML_TRACE", "1"}});
    ASSERT_EQ(traced.exit_code, 0) << traced.err;
    EXPECT_THAT(traced.err, HasSubstr("nvml: nvmlInit_v2() = SUCCESS"));
    EXPECT_THAT(traced.err, HasSubstr("nvml: nvmlDeviceGetCount_v2(&4) = SUCCESS"));
    EXPECT_THAT(traced.err, HasSubstr("nvml: nvmlDeviceGetHandleByIndex_v2(0, "));
    EXPECT_THAT(traced.err, HasSubstr(", \"" + uuid0 + "\", "));  // nvmlDeviceGetUUID's buffer, after the call
    EXPECT_THAT(traced.err, HasSubstr("nvml: nvmlShutdown() = SUCCESS"));
    EXPECT_EQ(nlohmann::json::parse(traced.out)["gpus"][0]["uuid"], uuid0);  // the answers are unchanged
    auto plain = run_process({KGPU_BINARY, "--log-level", "debug", "info", "--json", "--nvml-library", KGPU_SIM_LIBRARY},
                             {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}});
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    EXPECT_THAT(plain.err, ::testing::Not(HasSubstr("nvml: nvml")));
    EXPECT_EQ(plain.out, traced.out);
}

TEST(InfoJson, DgxH100) {
    auto i = info_json(fixture("dgx-h100.yaml"));
    ASSERT_EQ(i.run.exit_code, 0) << i.run.err;
    expect_matches_fixture(i.json, fixture("dgx-h100.yaml"));
    ASSERT_EQ(i.json["gpu_count"], 8);
    EXPECT_EQ(i.json["gpus"][0]["name"], "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(i.json["topology"]["pairs"].size(), 28u);
    for (const auto& p : i.json["topology"]["pairs"]) {
        EXPECT_EQ(p["nvlink_count"], 18) << p.dump();
        EXPECT_EQ(p["connection"], "NV18");
    }
    EXPECT_EQ(pair(i.json, 0, 1)["pcie_level"], "PXB");
    EXPECT_EQ(pair(i.json, 0, 2)["pcie_level"], "NODE");
    EXPECT_EQ(pair(i.json, 0, 4)["pcie_level"], "SYS");
    EXPECT_EQ(i.json["gpus"][0]["numa_node"], 0);
    EXPECT_EQ(i.json["gpus"][7]["numa_node"], 1);
    for (const auto& g : i.json["gpus"]) {  // every H100 SXM5 is MIG capable; the fixture has MIG off
        EXPECT_EQ(g["mig"]["mode"], "disabled");
        EXPECT_EQ(g["mig"]["pending_mode"], "disabled");
        EXPECT_TRUE(g["mig"]["devices"].empty());
    }
    EXPECT_TRUE(i.json["warnings"].empty()) << i.json["warnings"].dump();
}

TEST(InfoJson, PcieNvlinkPairs) {
    auto i = info_json(fixture("pcie-nvlink-pairs.yaml"));
    ASSERT_EQ(i.run.exit_code, 0) << i.run.err;
    expect_matches_fixture(i.json, fixture("pcie-nvlink-pairs.yaml"));
    ASSERT_EQ(i.json["gpu_count"], 4);
    EXPECT_EQ(pair(i.json, 0, 1)["nvlink_count"], 12);
    EXPECT_EQ(pair(i.json, 2, 3)["nvlink_count"], 12);
    EXPECT_EQ(pair(i.json, 0, 2)["nvlink_count"], 0);
    EXPECT_EQ(pair(i.json, 1, 3)["nvlink_count"], 0);
    EXPECT_EQ(pair(i.json, 0, 1)["pcie_level"], "PIX");
    EXPECT_EQ(pair(i.json, 0, 2)["pcie_level"], "SYS");
    EXPECT_EQ(pair(i.json, 0, 2)["connection"], "SYS");
    EXPECT_EQ(i.json["topology"]["matrix"][0][1], "NV12");
    EXPECT_EQ(i.json["topology"]["matrix"][1][1], "X");
}

TEST(InfoJson, T4x4) {
    auto i = info_json(fixture("t4x4.yaml"));
    ASSERT_EQ(i.run.exit_code, 0) << i.run.err;
    expect_matches_fixture(i.json, fixture("t4x4.yaml"));
    ASSERT_EQ(i.json["gpu_count"], 4);
    for (const auto& p : i.json["topology"]["pairs"]) EXPECT_EQ(p["nvlink_count"], 0) << p.dump();
    EXPECT_EQ(pair(i.json, 0, 1)["pcie_level"], "PIX");
    EXPECT_EQ(pair(i.json, 2, 3)["pcie_level"], "PIX");
    EXPECT_EQ(pair(i.json, 1, 2)["pcie_level"], "SYS");
    for (const auto& g : i.json["gpus"]) {
        EXPECT_EQ(g["mig"]["mode"], "unsupported");
        EXPECT_EQ(g["name"], "Tesla T4");
    }
}

TEST(InfoJson, A100Mig) {
    auto i = info_json(fixture("a100-mig.yaml"));
    ASSERT_EQ(i.run.exit_code, 0) << i.run.err;
    expect_matches_fixture(i.json, fixture("a100-mig.yaml"));
    const auto& gpus = i.json["gpus"];
    ASSERT_EQ(gpus.size(), 4u);
    EXPECT_EQ(gpus[0]["mig"]["mode"], "enabled");
    ASSERT_EQ(gpus[0]["mig"]["devices"].size(), 7u);
    for (const auto& m : gpus[0]["mig"]["devices"]) EXPECT_EQ(m["profile"], "1g.10gb");
    EXPECT_EQ(gpus[0]["mig"]["devices"][3]["id"], "0:3");
    std::vector<std::string> profiles;
    for (const auto& m : gpus[1]["mig"]["devices"]) profiles.push_back(m["profile"]);
    EXPECT_EQ(profiles, (std::vector<std::string>{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}));
    EXPECT_EQ(gpus[2]["mig"]["mode"], "disabled");
    EXPECT_TRUE(gpus[2]["mig"]["devices"].empty());
    for (const auto& p : i.json["topology"]["pairs"]) EXPECT_EQ(p["nvlink_count"], 12) << p.dump();
    // UUIDs are plain strings.
    EXPECT_TRUE(gpus[0]["mig"]["devices"][0]["uuid"].get<std::string>().starts_with("MIG-"));
}

TEST(InfoJson, EmptyNodeIsNotAnError) {
    auto i = info_json(fixture("empty.yaml"));
    ASSERT_EQ(i.run.exit_code, 0) << i.run.err;
    EXPECT_EQ(i.json["gpu_count"], 0);
    EXPECT_TRUE(i.json["gpus"].empty());
    auto text = kgpu_info(fixture("empty.yaml"));
    EXPECT_EQ(text.exit_code, 0);
    EXPECT_THAT(text.out, HasSubstr("No NVIDIA GPUs found"));
}

TEST(InfoJson, SchemaKeysOtherToolsRely) {
    auto i = info_json(fixture("pcie-nvlink-pairs.yaml"));
    ASSERT_EQ(i.run.exit_code, 0) << i.run.err;
    const auto& j = i.json;
    EXPECT_EQ(j["schema"], "kgpu.info/v1");
    // Exactly one top-level key mentions the driver without CUDA, and one mentions CUDA.
    int driver_keys = 0, cuda_keys = 0;
    for (const auto& [k, v] : j.items()) {
        if (k.find("driver") != std::string::npos && k.find("cuda") == std::string::npos) {
            ++driver_keys;
            EXPECT_TRUE(v.is_string());
        }
        if (k.find("cuda") != std::string::npos) {
            ++cuda_keys;
            EXPECT_EQ(v, "12.4");
        }
    }
    EXPECT_EQ(driver_keys, 1);
    EXPECT_EQ(cuda_keys, 1);
    for (const auto& p : j["topology"]["pairs"]) EXPECT_TRUE(p["nvlink_count"].is_number_unsigned());
    EXPECT_TRUE(j["gpus"][0]["uuid"].is_string());
}

TEST(InfoJson, NumaFromSysfsWhenPresent) {
    TempDir sysfs;
    sysfs.write("bus/pci/devices/0000:18:00.0/numa_node", "1\n");  // GPU 0 of dgx-h100; NVML says 0
    auto r = run_process({KGPU_BINARY, "info", "--json", "--nvml-library", KGPU_SIM_LIBRARY, "--sysfs-root", sysfs.path()},
                         {{"KGPU_SIM_NODE", fixture("dgx-h100.yaml")}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["gpus"][0]["numa_node"], 1);
    EXPECT_EQ(j["gpus"][0]["numa_source"], "sysfs");
    EXPECT_EQ(j["gpus"][1]["numa_source"], "nvml");
}

TEST(InfoText, TopologyMatrixLikeNvidiaSmi) {
    auto r = kgpu_info(fixture("pcie-nvlink-pairs.yaml"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("Driver version:"));
    EXPECT_THAT(r.out, HasSubstr("GPU0   GPU1   GPU2   GPU3   NUMA"));
    EXPECT_THAT(r.out, HasSubstr("GPU0    X      NV12   SYS    SYS    0"));
    EXPECT_THAT(r.out, HasSubstr("NV#  = Connection traversing a bonded set of # NVLinks"));
}

TEST(InfoErrors, LostGpuIsReportedAndOthersListed) {
    TempDir tmp;
    auto events = tmp.write("events", "lost 2\n");
    auto i = info_json(fixture("t4x4.yaml"), {{"KGPU_SIM_EVENTS", events}});
    ASSERT_EQ(i.run.exit_code, 0) << i.run.err;
    const auto& gpus = i.json["gpus"];
    ASSERT_EQ(gpus.size(), 4u);
    EXPECT_EQ(gpus[2]["state"], "lost");
    EXPECT_THAT(gpus[2]["error"].get<std::string>(), HasSubstr("GPU_IS_LOST"));
    for (int g : {0, 1, 3}) EXPECT_EQ(gpus[g]["state"], "ok");
    EXPECT_FALSE(i.json["warnings"].empty());
    auto text = kgpu_info(fixture("t4x4.yaml"), {}, {{"KGPU_SIM_EVENTS", events}});
    EXPECT_THAT(text.out, HasSubstr("GPU 2: LOST"));
}

TEST(InfoErrors, NoLibrary) {
    auto r = run_process({KGPU_BINARY, "info", "--nvml-library", "/nonexistent/libnvidia-ml.so.1"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("/nonexistent/libnvidia-ml.so.1"));
    EXPECT_THAT(r.err, HasSubstr("kgpu doctor"));
}

TEST(InfoErrors, DriverRootSearchNamesEveryPath) {
    TempDir root;
    auto r = run_process({KGPU_BINARY, "info", "--nvidia-driver-root", root.path()});
    if (r.exit_code == 0) GTEST_SKIP() << "a system libnvidia-ml.so.1 is installed";
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr(root.path() + "/usr/lib64/libnvidia-ml.so.1"));
    EXPECT_THAT(r.err, HasSubstr(root.path() + "/lib/x86_64-linux-gnu/libnvidia-ml.so.1"));
}

TEST(InfoErrors, LibraryWithoutInit) {
    auto r = run_process({KGPU_BINARY, "info", "--nvml-library", KGPU_NOINIT_LIBRARY});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("nvmlInit_v2 (or nvmlInit)"));
}

TEST(InfoErrors, DriverNotLoaded) {
    TempDir tmp;
    auto node = tmp.write("node.yaml", "driver_version: \"550.54.15\"\ncuda_driver_version: 12040\n"
                                       "init_error: DRIVER_NOT_LOADED\ngpus: []\n");
    auto r = kgpu_info(node);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("DRIVER_NOT_LOADED"));
    EXPECT_THAT(r.err, HasSubstr("kernel module"));
    EXPECT_THAT(r.err, HasSubstr("kgpu doctor"));
}

TEST(InfoErrors, MalformedFixtureNamesFileLineAndKey) {
    TempDir tmp;
    auto node = tmp.write("bad.yaml", "driver_version: \"550.54.15\"\ncuda_driver_version: 12040\n"
                                      "gpus:\n  - name: \"X\"\n    uuid: \"GPU-64bbca15-1776-feaf-35c7-c0761cd05691\"\n"
                                      "    colour: blue\n");
    auto r = kgpu_info(node);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr(node + ":6: gpus[0].colour: unknown key"));
    EXPECT_THAT(r.err, HasSubstr("kgpu doctor"));
}

TEST(InfoErrors, UsageErrorsExitTwo) {
    EXPECT_EQ(run_process({KGPU_BINARY, "info", "--no-such-flag"}).exit_code, 2);
    EXPECT_EQ(run_process({KGPU_BINARY}).exit_code, 2);
    EXPECT_EQ(run_process({KGPU_BINARY, "no-such-command"}).exit_code, 2);
    auto help = run_process({KGPU_BINARY, "info", "--help"});
    EXPECT_EQ(help.exit_code, 0);
    EXPECT_THAT(help.out, HasSubstr("--nvml-library"));
}

}  // namespace
