// `kgpu device-plugin` end to end: the built binary, the real dlopen of the simulator, real gRPC
// over unix sockets with a fake kubelet in a temp directory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cdi/cache.h"
#include "common/files.h"
#include "deviceplugin/plugin_fixture.h"
#include "support/fake_kubelet.h"
#include "support/process.h"
#include "cdi_names.h"

using namespace std::chrono_literals;
using kgpu::test::ChildProcess;
using kgpu::test::FakeKubelet;
using kgpu::test::TempDir;
using ::testing::HasSubstr;

namespace {

using kgpu::test::kDp;

constexpr const char* kGpu = "nvidia.com/gpu";
constexpr const char* kSocket = "kgpu-nvidia-com-gpu.sock";

std::string fixture(const std::string& name) { return std::string(KGPU_SOURCE_DIR) + "/sim/nodes/" + name; }

// The shared fixture (plugin_fixture.h) with this file's two shorthands for nvidia.com/gpu.
class DevicePluginTest : public kgpu::test::PluginFixture {
protected:
    FakeKubelet::Registration registered(int generation = 1) {
        auto reg = kubelet_->wait_registered(kGpu, generation, 20s);
        EXPECT_TRUE(reg.has_value()) << "no registration #" << generation;
        return reg.value_or(FakeKubelet::Registration{});
    }
    bool health_becomes(const std::string& index_id, const std::string& health) {
        const std::string id = sim_.uuid(index_id);
        return kubelet_->wait_devices(
            kGpu, [&](const auto& d) { return d.contains(id) && d.at(id).health == health; }, 20s);
    }
};

TEST_F(DevicePluginTest, RegistersAndAdvertisesEveryGpuWithNuma) {
    start("dgx-h100.yaml");
    auto reg = registered();
    EXPECT_EQ(reg.version, "v1beta1");
    EXPECT_EQ(reg.endpoint, kSocket);
    EXPECT_TRUE(reg.preferred_allocation_available);
    auto devices = kubelet_->devices(kGpu);
    ASSERT_EQ(devices.size(), 8u);
    ASSERT_TRUE(devices.contains("GPU-64bbca15-1776-feaf-35c7-c0761cd05691"));  // GPU 0 of the fixture
    EXPECT_EQ(devices["GPU-64bbca15-1776-feaf-35c7-c0761cd05691"].numa, std::vector<long>{0});
    EXPECT_EQ(devices["GPU-5a7290e7-fcea-ebb1-1ddc-86b1bdb093ff"].numa, std::vector<long>{1});  // GPU 7
    for (const auto& [id, d] : devices) EXPECT_EQ(d.health, "Healthy") << id;
}

TEST_F(DevicePluginTest, AllocateEnvvarVolumeMountsAndCdiAtOnce) {
    start("t4x4.yaml", {"--device-list-strategy", "envvar,volume-mounts,cdi-cri", "--device-id-strategy", "index"});
    registered();
    v1beta1::AllocateResponse resp;
    auto st = kubelet_->allocate(kGpu, {sim_.uuids({"1", "3"}), {sim_.uuid("0")}}, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(resp.container_responses_size(), 2);
    const auto& c0 = resp.container_responses(0);
    EXPECT_EQ(c0.envs().at("NVIDIA_VISIBLE_DEVICES"), "/var/run/nvidia-container-devices");
    ASSERT_EQ(c0.mounts_size(), 2);
    EXPECT_EQ(c0.mounts(0).container_path(), "/var/run/nvidia-container-devices/1");
    EXPECT_EQ(c0.mounts(0).host_path(), "/dev/null");
    ASSERT_EQ(c0.cdi_devices_size(), 2);
    EXPECT_EQ(c0.cdi_devices(0).name(), kDp + "gpu=1");
    EXPECT_EQ(c0.cdi_devices(1).name(), kDp + "gpu=3");
    EXPECT_EQ(resp.container_responses(1).cdi_devices(0).name(), kDp + "gpu=0");
}

// Issue #23 item 1: the names the plugin hands out under the CDI strategies resolve through a CDI
// cache as containerd's (cdi/cache.h: the rules of container-device-interface's cache.go) in a
// directory that also holds the node-wide spec `kgpu cdi generate` / `nvidia-ctk cdi generate` /
// nvidia-cdi-refresh write (/var/run/cdi/nvidia.yaml, nvidia.com/gpu names), and the spec an
// earlier kgpu plugin left there (kgpu-nvidia-gpu.yaml, nvidia.com/gpu names too). Before, the
// plugin's own spec used the nvidia.com/gpu names: the cache dropped every name two specs of the
// directory define, so none of the plugin's names (and none of the node-wide ones) resolved.
TEST_F(DevicePluginTest, CdiNamesResolveNextToANodeWideSpecInTheSameDirectory) {
    TempDir cdi_dir;
    const std::string node_wide = cdi_dir.path() + "/nvidia.yaml";
    auto gen = kgpu::test::run_process({KGPU_BINARY, "cdi", "generate", "--nvml-library", KGPU_SIM_LIBRARY,
                                        "--allow-missing-libraries", "--output", node_wide},
                                       {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}});
    ASSERT_EQ(gen.exit_code, 0) << gen.err;
    const std::string legacy = cdi_dir.write("kgpu-nvidia-gpu.yaml", kgpu::files::read(node_wide).value_or(""));
    ASSERT_FALSE(kgpu::cdi::scan_spec_dirs({cdi_dir.path()}).conflicts.empty()) << "the layout before the start";

    start("t4x4.yaml", {"--device-list-strategy", "cdi-annotations,cdi-cri", "--cdi-spec-dir", cdi_dir.path()});
    registered();
    const std::string spec_path = cdi_dir.path() + "/k8s.device-plugin.nvidia.com-gpu.json";
    ASSERT_TRUE(kgpu::test::eventually([&] { return !std::filesystem::exists(legacy); })) << plugin_->err();
    const auto spec = nlohmann::json::parse(kgpu::files::read(spec_path).value_or("{}"));
    EXPECT_EQ(spec.at("kind"), "k8s.device-plugin.nvidia.com/gpu");

    std::vector<std::string> names;
    for (const auto& [uuid, state] : kubelet_->devices(kGpu)) {
        v1beta1::AllocateResponse resp;
        ASSERT_TRUE(kubelet_->allocate(kGpu, {{uuid}}, &resp).ok());
        const auto& c = resp.container_responses(0);
        ASSERT_EQ(c.annotations().size(), 1u);
        EXPECT_EQ(c.annotations().begin()->second, kDp + "gpu=" + uuid);
        ASSERT_EQ(c.cdi_devices_size(), 1);
        EXPECT_EQ(c.cdi_devices(0).name(), kDp + "gpu=" + uuid);
        names.push_back(c.cdi_devices(0).name());
    }
    ASSERT_EQ(names.size(), 4u);
    const auto view = kgpu::cdi::scan_spec_dirs({cdi_dir.path()});
    EXPECT_TRUE(view.conflicts.empty()) << view.conflicts.front().name;
    EXPECT_TRUE(view.errors.empty()) << view.errors.front().second;
    EXPECT_THAT(kgpu::cdi::unresolved(view, names), ::testing::IsEmpty());
    for (const auto& n : names) EXPECT_EQ(view.devices.at(n), spec_path);
    // The node-wide names still resolve, from the node-wide spec.
    EXPECT_EQ(view.devices.at("nvidia.com/gpu=0"), node_wide);
    EXPECT_THAT(plugin_->err(), HasSubstr("removed " + legacy));
}

TEST_F(DevicePluginTest, AllocateEnvvarWithUuids) {
    start("t4x4.yaml");
    registered();
    auto ids = kubelet_->devices(kGpu);
    ASSERT_EQ(ids.size(), 4u);
    std::vector<std::string> two = {ids.begin()->first, std::next(ids.begin())->first};
    v1beta1::AllocateResponse resp;
    auto st = kubelet_->allocate(kGpu, {two}, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES"), two[0] + "," + two[1]);
}

TEST_F(DevicePluginTest, AllocateUnknownIdIsInvalidArgumentNamingIt) {
    start("t4x4.yaml");
    registered();
    v1beta1::AllocateResponse resp;
    auto st = kubelet_->allocate(kGpu, {{"GPU-does-not-exist"}}, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("GPU-does-not-exist"));
    // The server is still serving.
    auto ok = kubelet_->allocate(kGpu, {{kubelet_->devices(kGpu).begin()->first}}, &resp);
    EXPECT_TRUE(ok.ok()) << ok.error_message();
}

TEST_F(DevicePluginTest, PreferredAllocationPicksTheNvlinkPair) {
    start("pcie-nvlink-pairs.yaml", {"--device-id-strategy", "index"});
    registered();
    std::vector<std::string> out;
    auto st = kubelet_->prefer(kGpu, sim_.uuids({"0", "1", "2", "3"}), {}, 2, &out);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(out, sim_.uuids({"0", "1"}));
    st = kubelet_->prefer(kGpu, sim_.uuids({"0", "1", "2", "3"}), {sim_.uuid("3")}, 2, &out);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(out, sim_.uuids({"2", "3"}));
    st = kubelet_->prefer(kGpu, sim_.uuids({"0", "2"}), {}, 3, &out);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(DevicePluginTest, KubeletRestartLeadsToReregistration) {
    start("t4x4.yaml");
    registered(1);
    ASSERT_TRUE(kubelet_->restart());  // deletes our socket too, as the kubelet does
    auto reg = registered(2);
    EXPECT_EQ(reg.endpoint, kSocket);
    EXPECT_TRUE(std::filesystem::exists(dir_.path() + "/" + kSocket));
    EXPECT_EQ(kubelet_->devices(kGpu).size(), 4u);
    EXPECT_TRUE(kubelet_->wait_until([&] { return kubelet_->open_streams(kGpu) == 1; }, 20s));
    EXPECT_EQ(kubelet_->register_calls(kGpu), 1);  // this kubelet instance saw one Register
}

TEST_F(DevicePluginTest, DeletedPluginSocketIsServedAgain) {
    start("t4x4.yaml");
    registered(1);
    std::filesystem::remove(dir_.path() + "/" + kSocket);
    registered(2);
    EXPECT_TRUE(std::filesystem::exists(dir_.path() + "/" + kSocket));
    // Serving it again ended the kubelet's stream (the kubelet dropped us): one new Register.
    EXPECT_TRUE(kubelet_->wait_until(
        [&] { return kubelet_->open_streams(kGpu) == 1 && kubelet_->allocatable(kGpu) == 4; }, 20s));
    EXPECT_EQ(kubelet_->register_calls(kGpu), 2);
}

TEST_F(DevicePluginTest, RecoverableXidTurnsUnhealthyThenHealthyAfterTheQuietPeriod) {
    start("t4x4.yaml", {"--device-id-strategy", "index"}, quick_recovery());
    registered();
    event("xid 1 94");
    ASSERT_TRUE(unhealthy_seen(kGpu, {"1"}));
    EXPECT_EQ(kubelet_->devices(kGpu)[sim_.uuid("0")].health, "Healthy");
    ASSERT_TRUE(unhealthy_seen(kGpu, {}));
}

TEST_F(DevicePluginTest, IgnoredXidChangesNothing) {
    start("t4x4.yaml", {"--device-id-strategy", "index"});
    registered();
    const int before = kubelet_->updates(kGpu);
    event("xid 2 13");
    event("xid 2 94");  // a marker that does change something, after the ignored one
    ASSERT_TRUE(health_becomes("2", "Unhealthy"));
    EXPECT_EQ(kubelet_->updates(kGpu), before + 1);
}

TEST_F(DevicePluginTest, ResetClassXidStaysUnhealthyUntilTheGpuIsReset) {
    start("t4x4.yaml", {"--device-id-strategy", "index"}, quick_recovery());
    registered();
    event("xid 1 48");
    ASSERT_TRUE(health_becomes("1", "Unhealthy"));
    ASSERT_TRUE(quiet_period_passed(kGpu, "2"));  // must not recover without the reset
    EXPECT_EQ(kubelet_->devices(kGpu)[sim_.uuid("1")].health, "Unhealthy");
    event("restore 1");
    ASSERT_TRUE(health_becomes("1", "Healthy"));
}

TEST_F(DevicePluginTest, LostGpuIsUnhealthyWhileGone) {
    start("t4x4.yaml", {"--device-id-strategy", "index"});
    registered();
    event("lost 3");
    ASSERT_TRUE(health_becomes("3", "Unhealthy"));
    v1beta1::AllocateResponse resp;
    auto st = kubelet_->allocate(kGpu, {{sim_.uuid("3")}}, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr(sim_.uuid("3")));
    // `lost` also delivers XID 79 (reset-class): a restore only counts as the reset once a probe
    // has seen the GPU gone, so wait for that rather than for the probe interval.
    ASSERT_TRUE(kgpu::test::eventually(
        [&] { return plugin_->err().find("GPU 3 (" + sim_.uuid("3") + ") stopped answering") != std::string::npos; }));
    event("restore 3");
    ASSERT_TRUE(health_becomes("3", "Healthy"));
}

TEST_F(DevicePluginTest, SigtermStopsCleanlyAndRemovesTheSocket) {
    start("t4x4.yaml");
    registered();
    ASSERT_TRUE(std::filesystem::exists(dir_.path() + "/" + kSocket));
    plugin_->signal(SIGTERM);
    EXPECT_EQ(plugin_->wait(10000), 0);
    EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/" + kSocket));
    EXPECT_TRUE(kubelet_->stream_ended(kGpu));
}

TEST_F(DevicePluginTest, SighupReloadsTheConfigOverTheOpenStream) {
    const std::string cfg = dir_.path() + "/../" + std::filesystem::path(dir_.path()).filename().string() + ".yaml";
    std::ofstream(cfg) << "version: v1\nflags:\n  plugin:\n    deviceIDStrategy: uuid\n";
    start("t4x4.yaml", {"--config-file", cfg});
    registered(1);
    const std::string replica = sim_.uuid("0") + "::0";
    EXPECT_FALSE(kubelet_->devices(kGpu).contains(replica));
    std::ofstream(cfg) << "version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2}]\n";
    plugin_->signal(SIGHUP);
    EXPECT_TRUE(kubelet_->wait_devices(kGpu, [&](const auto& d) { return d.contains(replica) && d.size() == 8; }, 20s));
    // New IDs are a ListAndWatch update: no second Register, no second stream (issue #12).
    EXPECT_EQ(kubelet_->register_calls(kGpu), 1);
    EXPECT_EQ(kubelet_->open_streams(kGpu), 1);
    // A broken file on SIGHUP keeps the running config.
    std::ofstream(cfg) << "version: v1\nflags:\n  migStrategy: sometimes\n";
    plugin_->signal(SIGHUP);
    // Waits for the plugin to say it kept its configuration (a sleep would pass unhandled).
    EXPECT_TRUE(kgpu::test::eventually([&] { return plugin_->err().find("SIGHUP: keeping the running configuration") != std::string::npos; }))
        << plugin_->err();
    EXPECT_TRUE(plugin_->running());
    EXPECT_TRUE(kubelet_->devices(kGpu).contains(replica));
    std::filesystem::remove(cfg);
}

TEST(DevicePluginStart, KubeletAbsentAtStartIsWaitedFor) {
    TempDir dir, cdi;  // hermetic: the CDI directory is the test's, never the machine's /var/run/cdi
    ChildProcess plugin({KGPU_BINARY, "device-plugin", "--device-plugin-path", dir.path(), "--nvml-library",
                         KGPU_SIM_LIBRARY, "--cdi-spec-dir", cdi.path()},
                        {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}});
    ASSERT_TRUE(kgpu::test::eventually([&] { return plugin.err().find("no kubelet listens on") != std::string::npos; }))
        << plugin.err();
    std::this_thread::sleep_for(400ms);  // the old code's retries (100 ms doubling: 100, 300 ms) would come meanwhile
    ASSERT_TRUE(plugin.running()) << plugin.err();
    FakeKubelet kubelet(dir.path());
    ASSERT_TRUE(kubelet.start());
    auto reg = kubelet.wait_registered(kGpu, 1, 20s);
    ASSERT_TRUE(reg.has_value()) << plugin.err();
    // The kubelet may see the registration before the plugin has logged that Register returned.
    ASSERT_TRUE(kgpu::test::eventually(
        [&] { return plugin.err().find("registered nvidia.com/gpu") != std::string::npos; }))
        << plugin.err();
    plugin.signal(SIGTERM);
    EXPECT_EQ(plugin.wait(10000), 0);
    // Issue #23 item 7: no Register goes to a kubelet.sock that is not there; one line says the
    // plugin waits, and it registers when the kubelet creates its socket (inotify).
    const std::string err = plugin.err();
    auto count = [&](const std::string& what) {
        size_t n = 0;
        for (size_t pos = err.find(what); pos != std::string::npos; pos = err.find(what, pos + 1)) ++n;
        return n;
    };
    EXPECT_EQ(count("no kubelet listens on"), 1u) << err;
    EXPECT_EQ(count("retrying with backoff"), 0u) << err;
    EXPECT_EQ(count("registered nvidia.com/gpu"), 1u) << err;
}

// Issue #23 item 2: an unknown key (a misspelling NVIDIA's parser ignores) no longer stops the
// plugin: one warning naming the file, line and key, also across a SIGHUP, and it serves.
// `--check-config` stays strict: exit 2 naming the key.
TEST(DevicePluginStart, UnknownConfigKeyIsWarnedAboutOnceAndServed) {
    TempDir dir, cdi;
    FakeKubelet kubelet(dir.path());
    ASSERT_TRUE(kubelet.start());
    const std::string cfg =
        dir.write("config.yaml", "version: v1\nflags:\n  failOnInitErorr: false\n  migStrategy: none\n");
    ChildProcess plugin({KGPU_BINARY, "device-plugin", "--device-plugin-path", dir.path(), "--nvml-library",
                         KGPU_SIM_LIBRARY, "--cdi-spec-dir", cdi.path(), "--config-file", cfg},
                        {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}});
    ASSERT_TRUE(kubelet.wait_registered(kGpu, 1, 20s).has_value()) << plugin.err();
    plugin.signal(SIGHUP);
    ASSERT_TRUE(kgpu::test::eventually([&] { return plugin.err().find("SIGHUP: reloading") != std::string::npos; }))
        << plugin.err();
    plugin.signal(SIGTERM);
    EXPECT_EQ(plugin.wait(10000), 0);
    const std::string err = plugin.err();
    const std::string warning = cfg + ":3: key 'flags.failOnInitErorr': unknown key";
    ASSERT_NE(err.find(warning), std::string::npos) << err;
    EXPECT_EQ(err.find(warning, err.find(warning) + 1), std::string::npos) << "warned twice:\n" << err;
    EXPECT_THAT(err, HasSubstr("failOnInitError"));  // the keys allowed there, the right spelling among them

    auto check = kgpu::test::run_process({KGPU_BINARY, "device-plugin", "--check-config", "--config-file", cfg});
    EXPECT_EQ(check.exit_code, 2);
    EXPECT_THAT(check.err, HasSubstr(warning));
}

TEST(DevicePluginStart, BadConfigFileExitsTwoNamingFileLineAndKey) {
    TempDir dir;
    const std::string cfg = dir.write("config.yaml", "version: v1\nflags:\n  colour: blue\n  migStrategy: sometimes\n");
    auto r = kgpu::test::run_process({KGPU_BINARY, "device-plugin", "--config-file", cfg, "--device-plugin-path", dir.path()});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr(cfg + ":4: key 'flags.migStrategy'"));
    EXPECT_THAT(r.err, HasSubstr("'sometimes'"));
    // The unknown key seen before the error is named with it: a likely cause.
    EXPECT_THAT(r.err, HasSubstr(cfg + ":3: unknown key 'flags.colour'"));
}

TEST(DevicePluginStart, BadFlagValueExitsTwo) {
    auto r = kgpu::test::run_process({KGPU_BINARY, "device-plugin", "--mig-strategy", "sometimes"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("--mig-strategy"));
}

TEST(DevicePluginStart, BadPeriodVariableExitsTwoNamingIt) {
    for (const char* bad : {"abc", "0", "-5", "10s", ""}) {
        auto r = kgpu::test::run_process({KGPU_BINARY, "device-plugin", "--device-plugin-path", "/nonexistent"},
                                         {{"KGPU_PROBE_INTERVAL_MS", bad}});
        EXPECT_EQ(r.exit_code, 2) << bad;
        EXPECT_THAT(r.err, HasSubstr("KGPU_PROBE_INTERVAL_MS='" + std::string(bad) + "': expected a number of milliseconds"));
    }
}

TEST(DevicePluginStart, NoNvmlWithFailOnInitErrorExitsOne) {
    TempDir dir;
    auto r = kgpu::test::run_process({KGPU_BINARY, "device-plugin", "--device-plugin-path", dir.path(),
                                      "--nvml-library", dir.path() + "/libnvidia-ml.so.1"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr(dir.path() + "/libnvidia-ml.so.1"));
    EXPECT_THAT(r.err, HasSubstr("kgpu doctor"));
}

TEST(DevicePluginStart, NoNvmlWithoutFailOnInitErrorWaitsForTheDriver) {
    TempDir dir;
    FakeKubelet kubelet(dir.path());
    ASSERT_TRUE(kubelet.start());
    TempDir driver, cdi;
    const std::string lib = driver.path() + "/libnvidia-ml.so.1";
    ChildProcess plugin({KGPU_BINARY, "device-plugin", "--device-plugin-path", dir.path(), "--nvml-library", lib,
                         "--fail-on-init-error=false", "--cdi-spec-dir", cdi.path()},
                        {{"KGPU_SIM_NODE", fixture("t4x4.yaml")}, {"KGPU_INIT_RETRY_MS", "200"}});
    // Its first failed start said so: it runs on, retrying, registered with nothing.
    EXPECT_TRUE(kgpu::test::eventually([&] { return plugin.err().find("serving no resource and retrying") != std::string::npos; }))
        << plugin.err();
    EXPECT_TRUE(plugin.running());
    EXPECT_FALSE(kubelet.wait_registered(kGpu, 1, 100ms).has_value());
    // The driver appears, whole, as a package manager installs it (written beside, then renamed):
    // a copy written in place could be dlopen'ed half-written by the plugin's retry (under load,
    // the test once timed out that way).
    std::filesystem::copy_file(KGPU_SIM_LIBRARY, lib + ".new");
    std::filesystem::rename(lib + ".new", lib);
    auto reg = kubelet.wait_registered(kGpu, 1, 20s);
    ASSERT_TRUE(reg.has_value()) << plugin.err();
    EXPECT_EQ(kubelet.devices(kGpu).size(), 4u);
    plugin.signal(SIGTERM);
    EXPECT_EQ(plugin.wait(10000), 0);
    EXPECT_THAT(plugin.err(), HasSubstr("kgpu doctor"));
}

}  // namespace
