// `kgpu doctor` end to end: the built binary on fake hosts, the real dlopen of the simulator, and
// this machine's own / (no GPU here: shape and exit code only).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "deviceplugin/server.h"
#include "fake_host.h"

using kgpu::test::FakeHost;
using kgpu::test::run_process;
using ::testing::HasSubstr;

namespace {

std::string sim_node(const std::string& name) { return std::string(KGPU_SOURCE_DIR) + "/sim/nodes/" + name; }

std::map<std::string, std::string> status_by_id(const nlohmann::json& j) {
    std::map<std::string, std::string> out;
    for (const auto& c : j["checks"]) out[c["id"]] = c["status"];
    return out;
}

TEST(DoctorCli, HealthySimulatedNodeExitsZero) {
    FakeHost host;
    host.live_kubelet();
    // dgx-h100 has 8 GPUs; the fake host has /dev/nvidia0-3 only, so add the rest.
    for (int i = 4; i < 8; ++i) host.write("/dev/nvidia" + std::to_string(i), "");
    for (int i = 4; i < 8; ++i) std::filesystem::permissions(host.path("/dev/nvidia" + std::to_string(i)), std::filesystem::perms(0666));
    // The healthy host's kernel module is 535.161.08, the simulator's library 550.54.15: a module
    // version the check cannot read is no mismatch.
    host.write("/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  x  \n");
    auto r = run_process({KGPU_BINARY, "doctor", "--root", host.root(), "--nvml-library", KGPU_SIM_LIBRARY, "--json"},
                         {{"KGPU_SIM_NODE", sim_node("dgx-h100.yaml")}});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    auto h100 = nlohmann::json::parse(r.out);
    EXPECT_EQ(h100["summary"]["fail"], 0);
    for (const auto& c : h100["checks"])
        if (c["id"] == "nvml.mig_pending") {  // MIG capable with MIG off: nothing pending, nothing to do
            EXPECT_EQ(c["status"], "ok");
            EXPECT_THAT(c["evidence"].get<std::string>(), HasSubstr("GPU 7: MIG current disabled, pending disabled"));
        }
    r = run_process({KGPU_BINARY, "doctor", "--root", host.root(), "--nvml-library", KGPU_SIM_LIBRARY, "--json"},
                    {{"KGPU_SIM_NODE", sim_node("t4x4.yaml")}});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    auto j = nlohmann::json::parse(r.out);
    auto s = status_by_id(j);
    EXPECT_EQ(s["nvml.init"], "ok");
    EXPECT_EQ(s["nvml.devices"], "ok");
    EXPECT_EQ(j["summary"]["fail"], 0);
}

TEST(DoctorCli, LostGpuExitsOneAndNamesIt) {
    FakeHost host;
    kgpu::test::TempDir tmp;
    auto r = run_process({KGPU_BINARY, "doctor", "--root", host.root(), "--nvml-library", KGPU_SIM_LIBRARY},
                         {{"KGPU_SIM_NODE", sim_node("t4x4.yaml")}, {"KGPU_SIM_EVENTS", tmp.write("ev", "lost 1\n")}});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.out, HasSubstr("[FAIL] nvml.gpu_reachable"));
    EXPECT_THAT(r.out, HasSubstr("GPU 1"));
    EXPECT_EQ(r.out.find('\x1b'), std::string::npos);  // not a TTY: no colour
}

TEST(DoctorCli, DriverNotLoaded) {
    FakeHost host;
    kgpu::test::TempDir tmp;
    auto node = tmp.write("n.yaml", "driver_version: \"550.54.15\"\ncuda_driver_version: 12040\ninit_error: DRIVER_NOT_LOADED\ngpus: []\n");
    auto r = run_process({KGPU_BINARY, "doctor", "--root", host.root(), "--nvml-library", KGPU_SIM_LIBRARY, "--json"},
                         {{"KGPU_SIM_NODE", node}});
    EXPECT_EQ(r.exit_code, 1);
    auto j = nlohmann::json::parse(r.out);
    for (const auto& c : j["checks"])
        if (c["id"] == "nvml.init") {
            EXPECT_EQ(c["status"], "fail");
            EXPECT_THAT(c["evidence"].get<std::string>(), HasSubstr("DRIVER_NOT_LOADED"));
            EXPECT_THAT(c["fix"].get<std::string>(), HasSubstr("modprobe nvidia"));
        }
}

TEST(DoctorCli, FakeEmptyHostWithoutLibrary) {
    FakeHost host(/*healthy=*/false);
    auto r = run_process({KGPU_BINARY, "doctor", "--root", host.root(), "--json"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    auto j = nlohmann::json::parse(r.out);
    auto s = status_by_id(j);
    EXPECT_EQ(s["nvml.load"], "fail");
    EXPECT_EQ(s["nvml.init"], "skipped");
    EXPECT_EQ(s["driver.modules"], "fail");
}

TEST(DoctorCli, ThisMachineGivesAReportNotACrash) {
    auto r = run_process({KGPU_BINARY, "doctor", "--json"});
    EXPECT_EQ(r.exit_code, 1) << r.err;  // no GPU and no driver here
    auto j = nlohmann::json::parse(r.out);
    ASSERT_TRUE(j["checks"].is_array());
    EXPECT_GE(j["checks"].size(), 20u);
    for (const auto& c : j["checks"]) {
        for (const char* k : {"id", "layer", "status", "evidence", "fix"}) EXPECT_TRUE(c.contains(k)) << k;
    }
    auto text = run_process({KGPU_BINARY, "doctor"});
    EXPECT_EQ(text.exit_code, 1);
    EXPECT_THAT(text.out, HasSubstr("[FAIL] nvml.load"));
}

TEST(DoctorCli, CompatExitCodes) {
    auto ok = run_process({KGPU_BINARY, "doctor", "compat", "--cuda", "12.4", "--driver", "550.54.15", "--gpu", "Tesla V100"});
    EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
    auto minor = run_process({KGPU_BINARY, "doctor", "compat", "--cuda", "12.4", "--driver", "535.104.05"});
    EXPECT_EQ(minor.exit_code, 0);
    EXPECT_THAT(minor.out, HasSubstr("minor-version compatibility"));
    auto no = run_process({KGPU_BINARY, "doctor", "compat", "--cuda", "13.0", "--compute-capability", "7.0"});
    EXPECT_EQ(no.exit_code, 1);
    EXPECT_THAT(no.out, HasSubstr("no kernel image is available"));
    EXPECT_EQ(run_process({KGPU_BINARY, "doctor", "compat"}).exit_code, 2);
    EXPECT_EQ(run_process({KGPU_BINARY, "doctor", "compat", "--cuda", "12.4", "--gpu", "T4", "--compute-capability", "7.5"}).exit_code, 2);
    EXPECT_EQ(run_process({KGPU_BINARY, "doctor", "compat", "--cuda", "banana"}).exit_code, 2);
}

TEST(DoctorCli, PendingExplains) {
    auto f = [](const char* n) { return kgpu::test::doctor_fixture(std::string("kubectl/") + n); };
    auto r = run_process({KGPU_BINARY, "doctor", "pending", "--pod", f("pod.json"), "--nodes", f("nodes.json"), "--pods",
                          f("pods.json"), "--quotas", f("quotas.json")});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_THAT(r.out, HasSubstr("gpu-b: does not fit"));
    EXPECT_THAT(r.out, HasSubstr("ResourceQuota"));
    auto j = run_process({KGPU_BINARY, "doctor", "pending", "--pod", f("pod.json"), "--nodes", f("nodes.json"), "--json"});
    EXPECT_EQ(j.exit_code, 0);  // without --pods and --quotas, gpu-a has 4 free GPUs
    auto parsed = nlohmann::json::parse(j.out);
    EXPECT_EQ(parsed["fits"], true);
    EXPECT_EQ(parsed["nodes"].size(), 4u);
    EXPECT_EQ(run_process({KGPU_BINARY, "doctor", "pending", "--pod", "/nonexistent.json", "--nodes", f("nodes.json")}).exit_code, 2);
    EXPECT_EQ(run_process({KGPU_BINARY, "doctor", "pending", "--pod", f("nodes.json"), "--nodes", f("nodes.json")}).exit_code, 2);
}

// Issue #14: valid JSON of the wrong shape as --nodes, --pods or --quotas aborted (SIGABRT, exit
// 134). Each is an exit-2 error naming the file and the JSON path.
TEST(DoctorCli, PendingWrongShapesExitTwoNamingFileAndPath) {
    auto f = [](const char* n) { return kgpu::test::doctor_fixture(std::string("kubectl/") + n); };
    kgpu::test::TempDir dir;
    const std::pair<const char*, const char*> shapes[] = {
        {"1", ": .: expected a List of"},
        {"[1]", ": .[0]: expected a"},
        {"\"x\"", ": .: expected a List of"},
        {R"({"items":[1]})", ": .items[0]: expected a"},
        {R"({"items":[{"metadata":[]}]})", ": .items[0].metadata: expected an object, found an array"},
    };
    for (const auto& [text, where] : shapes) {
        const std::string file = dir.write("shape.json", text);
        for (const char* flag : {"--nodes", "--pods", "--quotas"}) {
            std::vector<std::string> argv{KGPU_BINARY, "doctor", "pending", "--pod", f("pod.json"), "--nodes", f("nodes.json")};
            if (std::string(flag) == "--nodes") argv.back() = file;
            else argv.insert(argv.end(), {flag, file});
            auto r = run_process(argv);
            EXPECT_EQ(r.exit_code, 2) << flag << " " << text << ": " << r.err;
            EXPECT_THAT(r.err, HasSubstr("kgpu doctor pending: " + file + where)) << flag << " " << text;
        }
    }
}

// Issue #23: run on the node, `doctor pending` asks this host's kgpu plugin which GPU is Unhealthy
// and names it; --events quotes the scheduler; a mixed List is read by kind.
TEST(DoctorCli, PendingNamesTheUnhealthyGpuFromTheLocalPluginAndQuotesEvents) {
    kgpu::test::TempDir root;
    const std::string dp = root.path() + "/var/lib/kubelet/device-plugins";
    std::filesystem::create_directories(dp);
    kgpu::deviceplugin::ResourceServer plugin("nvidia.com/gpu", dp + "/kgpu-nvidia-com-gpu.sock", {});
    v1beta1::ListAndWatchResponse list;
    for (const auto& [id, health] : {std::pair{"GPU-aaaa", "Healthy"}, {"GPU-bbbb", "Unhealthy"}}) {
        auto* d = list.add_devices();
        d->set_id(id);
        d->set_health(health);
    }
    plugin.publish(list);
    ASSERT_TRUE(plugin.start());
    const nlohmann::json node = {{"kind", "Node"},
                                 {"metadata", {{"name", "gpu-x"}}},
                                 {"status", {{"capacity", {{"nvidia.com/gpu", "2"}}}, {"allocatable", {{"nvidia.com/gpu", "1"}}}}}};
    const nlohmann::json pod = {
        {"kind", "Pod"},
        {"metadata", {{"namespace", "ml"}, {"name", "train"}}},
        {"spec", {{"containers", {{{"name", "c"}, {"resources", {{"limits", {{"nvidia.com/gpu", "2"}}}}}}}}}}};
    const nlohmann::json ev = {{"kind", "Event"},
                               {"metadata", {{"namespace", "ml"}, {"name", "train.1"}}},
                               {"involvedObject", {{"kind", "Pod"}, {"namespace", "ml"}, {"name", "train"}}},
                               {"type", "Warning"},
                               {"reason", "FailedScheduling"},
                               {"source", {{"component", "default-scheduler"}}},
                               {"message", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}};
    const std::string pod_file = root.write("pod.json", pod.dump());
    const std::string mixed = root.write("all.json", nlohmann::json{{"kind", "List"}, {"items", {node, ev}}}.dump());
    auto r = run_process({KGPU_BINARY, "doctor", "--root", root.path(), "pending", "--pod", pod_file, "--nodes", mixed,
                          "--events", mixed, "--node-name", "gpu-x"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_THAT(r.out, HasSubstr("1 of the node's 2 GPUs Unhealthy (capacity 2, allocatable 1): GPU-bbbb")) << r.out;
    EXPECT_THAT(r.out, HasSubstr("default-scheduler FailedScheduling: 0/1 nodes are available: 1 Insufficient "
                                 "nvidia.com/gpu."))
        << r.out;
    // Another node's name: this host's plugin is not asked about it.
    auto other = run_process({KGPU_BINARY, "doctor", "--root", root.path(), "pending", "--pod", pod_file, "--nodes",
                              mixed, "--node-name", "gpu-y"});
    EXPECT_THAT(other.out, HasSubstr("`kgpu doctor` on gpu-x names them")) << other.out;
    EXPECT_THAT(other.out, ::testing::Not(HasSubstr("GPU-bbbb")));
    plugin.stop();
}

}  // namespace
