// MIG strategies, time-slicing, health of shared devices, validation and reconfiguration of
// `kgpu device-plugin` end to end: the built binary, the simulator, a fake kubelet over unix
// sockets in a temp directory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <thread>

#include "deviceplugin/plugin_fixture.h"

using namespace std::chrono_literals;
using kgpu::test::ChildProcess;
using kgpu::test::FakeKubelet;
using kgpu::test::TempDir;
using ::testing::HasSubstr;

namespace {

constexpr const char* kGpu = "nvidia.com/gpu";
constexpr const char* kMig1g = "nvidia.com/mig-1g.10gb";
constexpr const char* kMig2g = "nvidia.com/mig-2g.20gb";
constexpr const char* kMig3g = "nvidia.com/mig-3g.40gb";

using kgpu::test::Devices;
using kgpu::test::eventually;
using kgpu::test::sim_fixture;

std::string fixture(const std::string& name) { return sim_fixture(name); }

// The plugin with a fake kubelet and the simulator's events file (plugin_fixture.h). Device IDs
// are UUIDs; tests write them in index spelling through sim_ ("1", "0:2", "1::3").
class SharedDevicesTest : public kgpu::test::PluginFixture {
protected:
    std::set<std::string> ids(const Devices& d) const { return sim_.ids(d); }
    std::set<std::string> unhealthy(const Devices& d) const { return sim_.unhealthy(d); }
    std::string id(const std::string& index_id) const { return sim_.uuid(index_id); }
    std::vector<std::string> uuids(const std::vector<std::string>& index_ids) const { return sim_.uuids(index_ids); }
};

// ---------------------------------------------------------------------------------------------
// MIG strategies

TEST_F(SharedDevicesTest, MixedServesOneResourcePerProfileOnA100Mig) {
    start("a100-mig.yaml", {"--mig-strategy", "mixed", "--device-id-strategy", "index"});
    EXPECT_EQ(ids(registered(kGpu, 2)), (std::set<std::string>{"2", "3"}));
    auto small = registered(kMig1g, 9);
    EXPECT_TRUE(small.contains(id("0:6")));
    EXPECT_TRUE(small.contains(id("1:3")));
    EXPECT_EQ(small[id("1:3")].numa, std::vector<long>{0});
    EXPECT_EQ(ids(registered(kMig2g, 1)), (std::set<std::string>{"1:1"}));
    EXPECT_EQ(ids(registered(kMig3g, 1)), (std::set<std::string>{"1:0"}));
    EXPECT_EQ(kubelet_->wait_registered(kMig3g, 1, 1s)->endpoint, "kgpu-nvidia-com-mig-3g-40gb.sock");
    EXPECT_EQ(kubelet_->resources().size(), 4u);
}

TEST_F(SharedDevicesTest, MixedWithUuidsAndNoneStrategy) {
    start("a100-mig.yaml", {"--mig-strategy", "mixed"});
    auto small = registered(kMig1g, 9);
    EXPECT_TRUE(small.contains("MIG-4b69808b-66a3-1662-f86c-3b76eedd0860"));  // GPU 0's first MIG device
    plugin_->signal(SIGTERM);
    ASSERT_EQ(plugin_->wait(10000), 0);
    start("a100-mig.yaml", {"--mig-strategy", "none"});
    EXPECT_EQ(registered(kGpu, 4, 2).size(), 4u);
}

TEST_F(SharedDevicesTest, SingleRefusesANodeMixingMigAndWholeGpus) {
    auto r = kgpu::test::run_process({KGPU_BINARY, "device-plugin", "--device-plugin-path", dir_.path(),
                                      "--nvml-library", KGPU_SIM_LIBRARY, "--mig-strategy", "single",
                                      "--cdi-spec-dir", aux_.path() + "/cdi"},
                                     {{"KGPU_SIM_NODE", fixture("a100-mig.yaml")}});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("MIG strategy single"));
    EXPECT_THAT(r.err, HasSubstr("--mig-strategy mixed"));
    // With --fail-on-init-error=false it keeps running and serves nothing.
    start("a100-mig.yaml", {"--mig-strategy", "single", "--fail-on-init-error=false"});
    // Once it has said it serves nothing (the decision made), it is running and registered nothing.
    EXPECT_TRUE(eventually([&] { return plugin_->err().find("serving no resource") != std::string::npos; }))
        << plugin_->err();
    EXPECT_TRUE(plugin_->running());
    EXPECT_TRUE(kubelet_->resources().empty());
}

TEST_F(SharedDevicesTest, SingleServesUniformMigDevicesAsGpu) {
    // GPUs 2 and 3 get the same layout as GPU 0: every GPU MIG-enabled with 1g.10gb only.
    std::ofstream(events_) << "mig 1 1g.10gb,1g.10gb\nmig 2 1g.10gb\nmig 3 1g.10gb,1g.10gb,1g.10gb\n";
    start("a100-mig.yaml", {"--mig-strategy", "single", "--device-id-strategy", "index"});
    auto d = registered(kGpu, 13);
    EXPECT_TRUE(d.contains(id("0:6")));
    EXPECT_TRUE(d.contains(id("3:2")));
}

TEST_F(SharedDevicesTest, MigAllocateAnswersWithParentAndCapabilityNodes) {
    // A host root: dev nodes and the MIG capability files of GPU 0's first MIG device (GI 7 CI 0)
    // as per-instance access files, GPU 1's last (GI 14) only in the driver's table.
    TempDir root;
    for (const char* f : {"dev/nvidiactl", "dev/nvidia-uvm", "dev/nvidia0", "dev/nvidia1"}) root.write(f, "");
    root.write("proc/driver/nvidia/capabilities/gpu0/mig/gi7/access", "DeviceFileMinor: 66\nDeviceFileMode: 292\n");
    root.write("proc/driver/nvidia/capabilities/gpu0/mig/gi7/ci0/access", "DeviceFileMinor: 67\nDeviceFileMode: 292\n");
    root.write("proc/driver/nvidia-caps/mig-minors", "config 1\nmonitor 2\ngpu1/gi14/access 156\ngpu1/gi14/ci0/access 157\n");
    start("a100-mig.yaml", {"--mig-strategy", "mixed", "--device-id-strategy", "index", "--pass-device-specs",
                            "--nvidia-dev-root", root.path(), "--proc-root", root.path() + "/proc",
                            "--device-list-strategy", "envvar"});
    registered(kMig1g, 9);
    v1beta1::AllocateResponse resp;
    auto st = kubelet_->allocate(kMig1g, {uuids(std::vector<std::string>{"0:0", "1:3"})}, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    const auto& c = resp.container_responses(0);
    EXPECT_EQ(c.envs().at("NVIDIA_VISIBLE_DEVICES"), "0:0,1:3");
    std::vector<std::string> paths, hosts;
    for (const auto& d : c.devices()) {
        paths.push_back(d.container_path());
        hosts.push_back(d.host_path());
    }
    EXPECT_EQ(paths, (std::vector<std::string>{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1",
                                               "/dev/nvidia-caps/nvidia-cap66", "/dev/nvidia-caps/nvidia-cap67",
                                               "/dev/nvidia-caps/nvidia-cap156", "/dev/nvidia-caps/nvidia-cap157"}));
    EXPECT_EQ(hosts[4], root.path() + "/dev/nvidia-caps/nvidia-cap66");
    // A MIG device whose capability files are missing is refused, naming what was tried.
    st = kubelet_->allocate(kMig1g, {{id("0:1")}}, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("gi8"));
    EXPECT_THAT(plugin_->err(), HasSubstr("MIG device 0:1"));  // warned at start
}

// ---------------------------------------------------------------------------------------------
// Time-slicing

const char* kFourReplicas =
    "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
    "    - name: nvidia.com/gpu\n      replicas: 4\n";

TEST_F(SharedDevicesTest, ReplicasAdvertisedAndDistributedByDefault) {
    start("t4x4.yaml", {"--config-file", config(kFourReplicas), "--device-id-strategy", "index"});
    auto d = registered("nvidia.com/gpu.shared", 16);
    EXPECT_TRUE(d.contains(id("0::0")));
    EXPECT_TRUE(d.contains(id("3::3")));
    std::vector<std::string> all, out;
    for (const auto& [uuid_id, state] : d) all.push_back(uuid_id);
    auto st = kubelet_->prefer("nvidia.com/gpu.shared", all, {}, 3, &out);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(sim_.indices(out), (std::vector<std::string>{"0::0", "1::0", "2::0"}));
    v1beta1::AllocateResponse resp;
    st = kubelet_->allocate("nvidia.com/gpu.shared", {uuids(std::vector<std::string>{"2::1", "2::3", "0::0"})}, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES"), "2,0");
}

TEST_F(SharedDevicesTest, ReplicasPackedWithThePolicyFlagAndLimitedToOne) {
    const std::string cfg = config(
        "version: v1\nsharing:\n  timeSlicing:\n    failRequestsGreaterThanOne: true\n    resources:\n"
        "    - name: gpu\n      rename: nvidia.com/t4-shared\n      devices: [1, \"2\"]\n      replicas: 3\n");
    // rename and a devices subset are kgpu's extensions (NVIDIA v0.14-v0.20 ignore them): opted in.
    start("t4x4.yaml", {"--config-file", cfg, "--device-id-strategy", "index", "--shared-devices-allocation-policy",
                        "packed", "--apply-resource-naming"});
    auto shared = registered("nvidia.com/t4-shared", 6);
    EXPECT_EQ(ids(shared), (std::set<std::string>{"1::0", "1::1", "1::2", "2::0", "2::1", "2::2"}));
    EXPECT_EQ(ids(registered(kGpu, 2)), (std::set<std::string>{"0", "3"}));  // the rest stay whole
    std::vector<std::string> out;
    auto st = kubelet_->prefer("nvidia.com/t4-shared", uuids(std::vector<std::string>{"1::1", "1::2", "2::0", "2::1", "2::2"}), {}, 2, &out);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(sim_.indices(out), (std::vector<std::string>{"1::1", "1::2"}));  // GPU 1 is already in use: fill it
    v1beta1::AllocateResponse resp;
    st = kubelet_->allocate("nvidia.com/t4-shared", {uuids(std::vector<std::string>{"1::1", "1::2"})}, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("maximum request size for shared resources is 1"));
    EXPECT_TRUE(kubelet_->allocate("nvidia.com/t4-shared", {{id("1::1")}}, &resp).ok());
}

// ---------------------------------------------------------------------------------------------
// Health of shared devices (NVIDIA's plugin marks only one of them: its issue #1929)

TEST_F(SharedDevicesTest, XidOnAGpuTurnsExactlyItsReplicasUnhealthy) {
    // A reset-class XID: the replicas stay Unhealthy, however slow the Allocate below, until the
    // reset (a recoverable one would need a recovery period longer than any load can delay it).
    start("t4x4.yaml", {"--config-file", config(kFourReplicas), "--device-id-strategy", "index"});
    registered("nvidia.com/gpu.shared", 16);
    event("xid 1 48");
    ASSERT_TRUE(unhealthy_becomes("nvidia.com/gpu.shared", {"1::0", "1::1", "1::2", "1::3"}));
    v1beta1::AllocateResponse resp;
    EXPECT_EQ(kubelet_->allocate("nvidia.com/gpu.shared", {{id("1::2")}}, &resp).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    event("restore 1");
    ASSERT_TRUE(unhealthy_becomes("nvidia.com/gpu.shared", {}));  // recovery follows the same rule
}

// A recoverable XID on the same GPU: its four replicas Unhealthy, all of them Healthy again once
// the recovery period passes without another XID (no reset), as a whole GPU recovers.
TEST_F(SharedDevicesTest, RecoverableXidOnAGpuTurnsItsReplicasUnhealthyUntilTheQuietPeriodEnds) {
    start("t4x4.yaml", {"--config-file", config(kFourReplicas), "--device-id-strategy", "index"}, quick_recovery());
    registered("nvidia.com/gpu.shared", 16);
    event("xid 1 94");
    ASSERT_TRUE(unhealthy_seen("nvidia.com/gpu.shared", {"1::0", "1::1", "1::2", "1::3"}));
    ASSERT_TRUE(unhealthy_seen("nvidia.com/gpu.shared", {}));
}

TEST_F(SharedDevicesTest, XidOnAMigInstanceTurnsExactlyTheMatchingInstancesUnhealthy) {
    start("a100-mig.yaml", {"--mig-strategy", "mixed", "--device-id-strategy", "index"}, quick_recovery());
    registered(kMig1g, 9);
    registered(kMig3g, 1);
    registered(kMig2g, 1);
    // On MIG device 0:2 (GI 9): only it.
    event("xid 0:2 94");
    ASSERT_TRUE(unhealthy_seen(kMig1g, {"0:2"}));
    ASSERT_TRUE(unhealthy_seen(kMig1g, {}));
    for (const auto& gpus : since_event(kGpu)) EXPECT_TRUE(unhealthy(gpus).empty()) << "a full GPU turned Unhealthy";
    // On GPU 1 without an instance: everything GPU 1 backs, in every resource.
    event("xid 1 94");
    ASSERT_TRUE(unhealthy_seen(kMig1g, {"1:2", "1:3"}));
    ASSERT_TRUE(unhealthy_seen(kMig3g, {"1:0"}));
    ASSERT_TRUE(unhealthy_seen(kMig2g, {"1:1"}));
    ASSERT_TRUE(unhealthy_seen(kMig1g, {}));
    ASSERT_TRUE(unhealthy_seen(kMig3g, {}));
}

// ---------------------------------------------------------------------------------------------
// Validation

TEST_F(SharedDevicesTest, ConfigErrorsThatNeedTheNodeExitTwoWithFileAndLine) {
    const std::string cfg = config(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - name: gpu\n      rename: gpu-shared\n      devices: [0, 9]\n      replicas: 2\n");
    auto r = kgpu::test::run_process({KGPU_BINARY, "device-plugin", "--device-plugin-path", dir_.path(),
                                      "--nvml-library", KGPU_SIM_LIBRARY, "--config-file", cfg, "--cdi-spec-dir",
                                      aux_.path() + "/cdi", "--apply-resource-naming"},
                                     {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr(cfg + ":7: key 'sharing.timeSlicing.resources[0].devices': unknown device '9'"));
}

TEST_F(SharedDevicesTest, ConfigErrorsFoundWithoutTheNodeExitTwo) {
    struct Case {
        std::string yaml, flag, needle;
    };
    const std::string head = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n";
    const Case cases[] = {
        {head + "    - name: gpu\n      replicas: 1\n", "none", ":6: key 'sharing.timeSlicing.resources[0].replicas'"},
        {head + "    - name: gpu\n      rename: s\n      devices: [1, 1]\n      replicas: 2\n", "none", "listed twice"},
        {head + "    - name: gpu\n      rename: " + std::string(70, 'x') + "\n      replicas: 2\n", "none", "1..63"},
        {head + "    - name: gpu\n      rename: under_score.com/x\n      replicas: 2\n", "none",
         "'under_score.com/x': only nvidia.com/ resources are served"},
        {"version: v1\nflags: {mpsRoot: \"\"}\nsharing:\n  mps:\n    resources: [{name: gpu, replicas: 2}]\n", "none",
         "needs flags.mpsRoot"},
        {"version: v1\nsharing:\n  mps:\n    resources: [{name: gpu, replicas: 2}]\n", "mixed",
         "MPS sharing is not supported with migStrategy mixed"},
    };
    for (const auto& c : cases) {
        const std::string cfg = config(c.yaml);
        auto r = kgpu::test::run_process({KGPU_BINARY, "device-plugin", "--device-plugin-path", dir_.path(),
                                          "--config-file", cfg, "--mig-strategy", c.flag, "--apply-resource-naming"});
        EXPECT_EQ(r.exit_code, 2) << c.yaml;
        EXPECT_THAT(r.err, HasSubstr(cfg + ":")) << c.yaml;
        EXPECT_THAT(r.err, HasSubstr(c.needle)) << c.yaml;
    }
}

TEST_F(SharedDevicesTest, SighupWithAConfigTheNodeRejectsKeepsTheRunningOne) {
    const std::string cfg = config(kFourReplicas);
    start("t4x4.yaml", {"--config-file", cfg, "--device-id-strategy", "index", "--apply-resource-naming"});
    registered("nvidia.com/gpu.shared", 16);
    config("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
           "    - name: gpu\n      rename: x\n      devices: [\"GPU-00000000-0000-0000-0000-000000000000\"]\n"
           "      replicas: 2\n");
    plugin_->signal(SIGHUP);
    ASSERT_TRUE(eventually([&] { return plugin_->err().find("keeping the running configuration") != std::string::npos; }));
    EXPECT_TRUE(plugin_->running());
    EXPECT_EQ(kubelet_->devices("nvidia.com/gpu.shared").size(), 16u);
    EXPECT_THAT(plugin_->err(), HasSubstr("keeping the running configuration"));
    EXPECT_THAT(plugin_->err(), HasSubstr("unknown device 'GPU-00000000"));
    // A good one is applied: only what changed is re-registered.
    config("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
           "    - name: gpu\n      rename: gpu-pair\n      devices: [0, 1]\n      replicas: 2\n");
    plugin_->signal(SIGHUP);
    EXPECT_EQ(ids(registered("nvidia.com/gpu-pair", 4)), (std::set<std::string>{"0::0", "0::1", "1::0", "1::1"}));
    EXPECT_EQ(ids(registered(kGpu, 2)), (std::set<std::string>{"2", "3"}));
    ASSERT_TRUE(kubelet_->wait_devices("nvidia.com/gpu.shared", [](const Devices& d) { return d.empty(); }, 20s));
    EXPECT_EQ(kubelet_->history("nvidia.com/gpu.shared").back(), 0u);  // emptied before its server stopped
}

// ---------------------------------------------------------------------------------------------
// Reconfiguration

// GPUs paused for a MIG change (kgpu mig-manager's file, paused.h): every device of a GPU the file
// names is Unhealthy (its MIG devices here), the others are untouched; a line that is no GPU
// UUID keeps what is paused and says why; the file removed, they are offered again. All over the
// open streams: no registration.
TEST_F(SharedDevicesTest, GpusPausedForAMigChangeAreNotOfferedUntilTheFileLetsThemGo) {
    const std::string paused_dir = aux_.path() + "/mig-manager";
    std::filesystem::create_directories(paused_dir);
    const std::string paused = paused_dir + "/paused-gpus";
    start("a100-mig.yaml", {"--mig-strategy", "mixed", "--device-id-strategy", "index", "--mig-paused-gpus-file", paused});
    registered(kMig1g, 9);
    registered(kGpu, 2);
    auto write = [&](const std::string& text) {  // as kgpu mig-manager does: a new file renamed over
        std::ofstream(paused + ".tmp") << text;
        std::filesystem::rename(paused + ".tmp", paused);
    };
    write("# kgpu mig-manager\n" + id("0") + "\n" + id("2") + "  # MIG off\n");
    ASSERT_TRUE(kubelet_->wait_devices(kMig1g, [&](const Devices& d) {
        return unhealthy(d) == std::set<std::string>{"0:0", "0:1", "0:2", "0:3", "0:4", "0:5", "0:6"};
    }, 20s)) << "GPU 0's seven 1g.10gb devices";
    ASSERT_TRUE(kubelet_->wait_devices(kGpu, [&](const Devices& d) { return unhealthy(d) == std::set<std::string>{"2"}; }, 20s));
    EXPECT_TRUE(unhealthy(kubelet_->devices(kMig3g)).empty()) << "GPU 1 is not paused";
    EXPECT_THAT(plugin_->err(), HasSubstr("GPU 0 (" + id("0") + ") paused for a MIG change: its devices are not offered"));
    write(id("0") + "\nGPU 2\n");
    ASSERT_TRUE(eventually([&] { return plugin_->err().find(":2: 'GPU 2': expected a GPU UUID") != std::string::npos; }))
        << plugin_->err();
    EXPECT_EQ(unhealthy(kubelet_->devices(kGpu)), std::set<std::string>{"2"}) << "a bad file changes nothing";
    std::filesystem::remove(paused);
    ASSERT_TRUE(kubelet_->wait_devices(kMig1g, [&](const Devices& d) { return unhealthy(d).empty(); }, 20s));
    ASSERT_TRUE(kubelet_->wait_devices(kGpu, [&](const Devices& d) { return unhealthy(d).empty(); }, 20s));
    EXPECT_THAT(plugin_->err(), HasSubstr("GPU 2 (" + id("2") + ") no longer paused: its devices are offered again"));
    EXPECT_EQ(kubelet_->register_calls(kGpu), 1);
    EXPECT_EQ(kubelet_->open_streams(kMig1g), 1);
}

TEST_F(SharedDevicesTest, MigReconfigurationWhileRunning) {
    start("a100-mig.yaml", {"--mig-strategy", "mixed", "--device-id-strategy", "index"});
    registered(kMig1g, 9);
    registered(kMig2g, 1);
    registered(kMig3g, 1);
    registered(kGpu, 2);
    // GPU 1 becomes one 7g.80gb instance; GPU 2 is split in two 3g.40gb.
    event("mig 1 7g.80gb");
    event("mig 2 3g.40gb,3g.40gb");
    sim_.load(node_, events_);  // the new MIG devices' UUIDs
    ASSERT_TRUE(kubelet_->wait_devices(kMig2g, [](const Devices& d) { return d.empty(); }, 20s));
    EXPECT_EQ(kubelet_->history(kMig2g).back(), 0u);  // an empty list first ...
    EXPECT_TRUE(eventually([&] { return kubelet_->stream_ended(kMig2g); }));  // ... then the stream ends
    EXPECT_EQ(ids(registered("nvidia.com/mig-7g.80gb", 1)), (std::set<std::string>{"1:0"}));
    ASSERT_TRUE(kubelet_->wait_devices(kMig1g, [&](const Devices& d) { return d.size() == 7 && !d.contains(id("1:2")); }, 20s));
    ASSERT_TRUE(kubelet_->wait_devices(kMig3g, [&](const Devices& d) {
        return d.size() == 2 && d.contains(id("2:0")) && d.contains(id("2:1"));
    }, 20s));
    ASSERT_TRUE(kubelet_->wait_devices(kGpu, [&](const Devices& d) { return ids(d) == std::set<std::string>{"3"}; }, 20s));
    // A changed list is an update over the open stream, not a new registration (issue #12).
    EXPECT_EQ(kubelet_->register_calls(kGpu), 1);
    EXPECT_EQ(kubelet_->open_streams(kGpu), 1);
    // MIG turned off again: GPU 1 is a whole GPU, its MIG resource goes away.
    event("mig 1 off");
    sim_.load(node_, events_);
    ASSERT_TRUE(kubelet_->wait_devices(kGpu, [&](const Devices& d) { return ids(d) == std::set<std::string>{"1", "3"}; }, 20s));
    ASSERT_TRUE(kubelet_->wait_devices("nvidia.com/mig-7g.80gb", [](const Devices& d) { return d.empty(); }, 20s));
    EXPECT_TRUE(plugin_->running());
}

}  // namespace
