// Drop-in behaviour of `kgpu device-plugin` against NVIDIA's plugin (v0.14-v0.20), end to end:
// device IDs under --device-id-strategy index, missing device nodes with --pass-device-specs,
// every documented config shape through --check-config, the v0.17+ keys (GPUDirect, IMEX)
// in Allocate, naming patterns behind the opt-in, and the start-up dump.
#include <gmock/gmock.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cdi/cache.h"
#include "deviceplugin/plugin_fixture.h"
#include "support/files.h"
#include "cdi_names.h"

using namespace std::chrono_literals;
using kgpu::test::Devices;
using kgpu::test::PluginFixture;
using kgpu::test::run_process;
using kgpu::test::sim_fixture;
using kgpu::test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

namespace fs = std::filesystem;

namespace {

using kgpu::test::kDp;

using kgpu::test::slurp;

constexpr const char* kGpu = "nvidia.com/gpu";

size_t count(const std::string& text, const std::string& needle) {
    size_t n = 0;
    for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
    return n;
}

// A dev root whose nodes are symlinks to /dev/null: character devices to stat(), no root needed.
class DevRoot {
public:
    void node(const std::string& dev_path) {
        const fs::path p = fs::path(dir_.path()) / dev_path.substr(1);
        fs::create_directories(p.parent_path());
        fs::create_symlink("/dev/null", p);
    }
    const std::string& path() const { return dir_.path(); }

private:
    TempDir dir_;
};

class CompatTest : public PluginFixture {};

// NVIDIA keeps UUIDs (MIG UUIDs) as the ListAndWatch IDs under --device-id-strategy index and
// uses indices only in what it hands the container.
TEST_F(CompatTest, IndexStrategyAdvertisesUuidsAndHandsIndicesToTheContainer) {
    start("t4x4.yaml", {"--device-id-strategy", "index", "--device-list-strategy", "envvar,volume-mounts,cdi-cri"});
    const Devices d = registered(kGpu, 4);
    for (const char* i : {"0", "1", "2", "3"}) EXPECT_TRUE(d.contains(sim_.uuid(i))) << "GPU " << i;
    EXPECT_FALSE(d.contains("1"));
    v1beta1::AllocateResponse resp;
    auto st = kubelet_->allocate(kGpu, {sim_.uuids({"3", "1"})}, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    const auto& c = resp.container_responses(0);
    EXPECT_EQ(c.envs().at("NVIDIA_VISIBLE_DEVICES"), "/var/run/nvidia-container-devices");
    ASSERT_EQ(c.mounts_size(), 2);
    EXPECT_EQ(c.mounts(0).container_path(), "/var/run/nvidia-container-devices/3");
    EXPECT_EQ(c.mounts(1).container_path(), "/var/run/nvidia-container-devices/1");
    ASSERT_EQ(c.cdi_devices_size(), 2);
    EXPECT_EQ(c.cdi_devices(0).name(), kDp + "gpu=3");
    EXPECT_EQ(c.cdi_devices(1).name(), kDp + "gpu=1");
    // An index is not an advertised ID.
    EXPECT_EQ(kubelet_->allocate(kGpu, {{"1"}}, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(CompatTest, IndexStrategyMigDevicesAdvertiseMigUuids) {
    start("a100-mig.yaml", {"--mig-strategy", "mixed", "--device-id-strategy", "index"});
    const Devices d = registered("nvidia.com/mig-1g.10gb", 9);
    EXPECT_TRUE(d.contains(sim_.uuid("1:3")));
    EXPECT_TRUE(sim_.uuid("1:3").starts_with("MIG-"));
    v1beta1::AllocateResponse resp;
    ASSERT_TRUE(kubelet_->allocate("nvidia.com/mig-1g.10gb", {sim_.uuids({"1:3", "0:2"})}, &resp).ok());
    EXPECT_EQ(resp.container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES"), "1:3,0:2");
}

// Switching the strategy changes what containers are handed, not the IDs: the kubelet's
// checkpoint and PodResources keep naming the same devices, and nothing re-registers.
TEST_F(CompatTest, SwitchingTheIdStrategyOnSighupKeepsTheIds) {
    const std::string cfg = config("version: v1\nflags:\n  plugin:\n    deviceIDStrategy: uuid\n");
    start("t4x4.yaml", {"--config-file", cfg});
    const Devices before = registered(kGpu, 4);
    config("version: v1\nflags:\n  plugin:\n    deviceIDStrategy: index\n");
    plugin_->signal(SIGHUP);
    ASSERT_TRUE(kgpu::test::eventually([&] { return plugin_->err().find("SIGHUP: reloading") != std::string::npos; }));
    v1beta1::AllocateResponse resp;
    ASSERT_TRUE(kgpu::test::eventually([&] {
        return kubelet_->allocate(kGpu, {{sim_.uuid("2")}}, &resp).ok() &&
               resp.container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES") == "2";
    }));
    EXPECT_EQ(kubelet_->devices(kGpu).size(), before.size());
    for (const auto& [id, s] : before) EXPECT_TRUE(kubelet_->devices(kGpu).contains(id)) << id;
    EXPECT_FALSE(kubelet_->wait_registered(kGpu, 2, 300ms).has_value());
}

// --pass-device-specs with /dev/nvidia2 missing: one warning at start naming it, and Allocate
// refuses GPU 2 naming the path (it used to hand out the spec; the pod then failed at container
// creation with "lstat /dev/nvidia2").
TEST_F(CompatTest, PassDeviceSpecsWithAMissingNodeWarnsOnceAndRefusesNamingThePath) {
    DevRoot root;
    for (const char* n : {"/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia3"}) root.node(n);
    start("t4x4.yaml", {"--pass-device-specs", "--nvidia-dev-root", root.path()});
    registered(kGpu, 4);
    const std::string missing = root.path() + "/dev/nvidia2";
    v1beta1::AllocateResponse resp;
    auto st = kubelet_->allocate(kGpu, {{sim_.uuid("2")}}, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr(missing + " does not exist"));
    st = kubelet_->allocate(kGpu, {{sim_.uuid("1")}}, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    std::vector<std::string> paths;
    for (const auto& d : resp.container_responses(0).devices()) paths.push_back(d.container_path());
    EXPECT_EQ(paths, (std::vector<std::string>{"/dev/nvidiactl", "/dev/nvidia1"}));
    const std::string err = plugin_->err();
    EXPECT_EQ(count(err, "device nodes missing under the dev root"), 1u) << err;
    EXPECT_THAT(err, HasSubstr(missing + " (GPU 2, " + sim_.uuid("2") + ")"));
    EXPECT_THAT(err, HasSubstr(root.path() + "/dev/nvidia-uvm: CUDA needs it"));  // a missing control node
}

// Every config shape NVIDIA's README and Helm chart document (v0.14-v0.20) passes --check-config
// (with MPS_ROOT set, as the chart does for its MPS examples).
TEST(CompatConfigs, EveryNvidiaExampleConfigPassesCheckConfig) {
    const fs::path dir = fs::path(KGPU_SOURCE_DIR) / "tests/deviceplugin/nvidia-configs";
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string ext = e.path().extension().string();
        if (ext != ".yaml" && ext != ".json") continue;
        ++n;
        auto r = run_process({KGPU_BINARY, "device-plugin", "--check-config", "--config-file", e.path().string()},
                             {{"MPS_ROOT", "/run/nvidia/mps"}});
        EXPECT_EQ(r.exit_code, 0) << e.path().filename() << "\n" << r.err << r.out;
        EXPECT_THAT(r.out, HasSubstr("configFile: " + e.path().string())) << e.path().filename();
    }
    EXPECT_GE(n, 15u);
}

// The rename / devices shapes of api/config/v1 sharing: --check-config shows what NVIDIA's plugin
// would serve, with one warning per setting it drops; opted in, what kgpu's extension serves.
TEST(CompatConfigs, SharingRenameAndDevicesShowWhatIsServed) {
    const std::string dir = std::string(KGPU_SOURCE_DIR) + "/tests/deviceplugin/nvidia-configs/";
    struct Case {
        std::string file, served, warning;
    };
    const Case cases[] = {
        {"time-slicing-devices-subset.yaml", "sharing.timeSlicing.resources[0]: name=nvidia.com/gpu rename=- devices=all",
         "warning: " + dir + "time-slicing-devices-subset.yaml:8: key 'sharing.timeSlicing.resources[0].devices': [0] "
         "is ignored"},
        {"time-slicing-rename.yaml", "sharing.timeSlicing.resources[0]: name=nvidia.com/gpu rename=- devices=all",
         "warning: " + dir + "time-slicing-rename.yaml:8: key 'sharing.timeSlicing.resources[0].rename': "
         "nvidia.com/my-shared-gpu is ignored"},
        {"time-slicing-rename-by-default-devices.yaml", "sharing.timeSlicing.renameByDefault: true",
         "'sharing.timeSlicing.resources[0].devices': 2 is ignored"},
        {"mps-rename-devices.yaml", "sharing.mps.resources[0]: name=nvidia.com/gpu rename=- devices=all",
         "'sharing.mps.resources[0].rename': nvidia.com/gpu-mps is ignored"},
    };
    for (const auto& c : cases) {
        auto r = run_process({KGPU_BINARY, "device-plugin", "--check-config", "--config-file", dir + c.file});
        ASSERT_EQ(r.exit_code, 0) << c.file << r.err;
        EXPECT_THAT(r.out, HasSubstr(c.served)) << c.file;
        EXPECT_THAT(r.out, HasSubstr(c.warning)) << r.out;
    }
    // The subset without a new name is kgpu's error only when its extension is asked for.
    auto opted = run_process({KGPU_BINARY, "device-plugin", "--check-config", "--apply-resource-naming", "--config-file",
                              dir + "time-slicing-devices-subset.yaml"});
    EXPECT_EQ(opted.exit_code, 2);
    EXPECT_THAT(opted.err, HasSubstr("without a new name"));
    auto renamed = run_process({KGPU_BINARY, "device-plugin", "--check-config", "--config-file",
                                dir + "time-slicing-rename.yaml"},
                               {{"KGPU_APPLY_RESOURCE_NAMING", "true"}});
    ASSERT_EQ(renamed.exit_code, 0) << renamed.err;
    EXPECT_THAT(renamed.out, HasSubstr("rename=nvidia.com/my-shared-gpu devices=all"));
    EXPECT_THAT(renamed.out, Not(HasSubstr("warning:")));
}

// A v0.17+ values file with every flag: accepted, and each key the plugin does not use is
// said once, with why (it used to exit 2 on flags.gdrcopyEnabled).
TEST(CompatConfigs, CheckConfigSaysOnceWhatIsIgnoredAndWhy) {
    const std::string file = std::string(KGPU_SOURCE_DIR) + "/tests/deviceplugin/nvidia-configs/api-v1-every-flag.yaml";
    auto r = run_process({KGPU_BINARY, "device-plugin", "--check-config", "--config-file", file});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(count(r.out, "warning: "), 3u) << r.out;
    EXPECT_EQ(count(r.out, "warning: flags.gfd"), 1u) << r.out;
    EXPECT_EQ(count(r.out, "warning: flags.useNodeFeatureAPI"), 1u) << r.out;
    EXPECT_EQ(count(r.out, "warning: flags.plugin.containerDriverRoot"), 1u) << r.out;
    EXPECT_THAT(r.out, HasSubstr("flags.plugin.nvidiaCTKPath: /usr/bin/nvidia-ctk\n"));
    const std::string patterns =
        std::string(KGPU_SOURCE_DIR) + "/tests/deviceplugin/nvidia-configs/api-v1-resources-and-sharing.yaml";
    auto p = run_process({KGPU_BINARY, "device-plugin", "--check-config", "--config-file", patterns});
    ASSERT_EQ(p.exit_code, 0) << p.err;
    EXPECT_THAT(p.out, HasSubstr("warning: resources.gpus / resources.mig are ignored"));
    EXPECT_THAT(p.out, HasSubstr("resources.mig: \"1g.10gb\" -> nvidia.com/mig-1g.10gb (ignored"));
    // Both spellings of the dev root, and NVIDIA_DEV_ROOT.
    for (const char* flag : {"--dev-root", "--nvidia-dev-root"}) {
        auto d = run_process({KGPU_BINARY, "device-plugin", "--check-config", flag, "/run/nvidia/driver"});
        EXPECT_EQ(d.exit_code, 0) << flag << d.err;
        EXPECT_THAT(d.out, HasSubstr("flags.nvidiaDevRoot: /run/nvidia/driver\n")) << flag;
    }
    auto env_root = run_process({KGPU_BINARY, "device-plugin", "--check-config"}, {{"NVIDIA_DEV_ROOT", "/devroot"}});
    EXPECT_THAT(env_root.out, HasSubstr("flags.nvidiaDevRoot: /devroot\n"));
    auto opted = run_process({KGPU_BINARY, "device-plugin", "--check-config", "--apply-resource-patterns",
                              "--config-file", patterns});
    ASSERT_EQ(opted.exit_code, 0) << opted.err;
    EXPECT_THAT(opted.out, Not(HasSubstr("warning: resources")));
    // NVIDIA's README MPS config, without MPS_ROOT (kgpu's default is the chart's /run/nvidia/mps);
    // serving it is tests/mps/mps_plugin_test.cpp.
    const std::string mps = std::string(KGPU_SOURCE_DIR) + "/tests/deviceplugin/nvidia-configs/readme-mps.yaml";
    auto m = run_process({KGPU_BINARY, "device-plugin", "--check-config", "--config-file", mps});
    ASSERT_EQ(m.exit_code, 0) << m.err;
    EXPECT_THAT(m.out, HasSubstr("sharing.mps.failRequestsGreaterThanOne: true"));
    EXPECT_THAT(m.out, HasSubstr("flags.mpsRoot: /run/nvidia/mps"));
}

// gdsEnabled / mofedEnabled / gdrcopyEnabled and IMEX channels, handed to the container as
// NVIDIA's plugin does, with CDI specs for what exists on the node.
TEST_F(CompatTest, GpuDirectAndImexChannelsInAllocate) {
    DevRoot root;
    for (const char* n : {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2",
                          "/dev/nvidia3", "/dev/nvidia-caps-imex-channels/channel0", "/dev/gdrdrv", "/dev/nvidia-fs0",
                          "/dev/nvidia-fs1"})
        root.node(n);
    TempDir cdi;
    const std::string cfg = config(
        "version: v1\nflags:\n  gdrcopyEnabled: true\n  gdsEnabled: true\n  mofedEnabled: true\n"
        "  plugin:\n    passDeviceSpecs: true\n    deviceListStrategy: [envvar, cdi-cri]\nimex:\n  channelIDs: [0]\n");
    start("t4x4.yaml", {"--config-file", cfg, "--nvidia-dev-root", root.path(), "--cdi-spec-dir", cdi.path()});
    registered(kGpu, 4);
    v1beta1::AllocateResponse resp;
    auto st = kubelet_->allocate(kGpu, {{sim_.uuid("0")}}, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    const auto& c = resp.container_responses(0);
    EXPECT_EQ(c.envs().at("NVIDIA_GDRCOPY"), "enabled");
    EXPECT_EQ(c.envs().at("NVIDIA_GDS"), "enabled");
    EXPECT_EQ(c.envs().at("NVIDIA_MOFED"), "enabled");
    EXPECT_EQ(c.envs().at("NVIDIA_IMEX_CHANNELS"), "0");
    std::vector<std::string> names;
    for (const auto& d : c.cdi_devices()) names.push_back(d.name());
    // No /dev/infiniband here: no MOFED CDI device (and a warning says so).
    EXPECT_EQ(names, (std::vector<std::string>{kDp + "gpu=" + sim_.uuid("0"), kDp + "imex-channel=0",
                                               kDp + "gdrcopy=all", kDp + "gds=all"}));
    EXPECT_EQ(c.devices(c.devices_size() - 1).container_path(), "/dev/nvidia-caps-imex-channels/channel0");
    EXPECT_THAT(plugin_->err(), HasSubstr("flags.mofedEnabled: no device node of " + kDp + "mofed"));
    // The specs the names refer to: JSON under NVIDIA's plugin's file names.
    const std::string gds_path = cdi.path() + "/k8s.device-plugin.nvidia.com-gds.json";
    const std::string imex_path = cdi.path() + "/k8s.device-plugin.nvidia.com-imex-channel.json";
    const std::string gdrcopy_path = cdi.path() + "/k8s.device-plugin.nvidia.com-gdrcopy.json";
    const std::string gds = slurp(gds_path);
    EXPECT_THAT(gds, HasSubstr("\"kind\": \"k8s.device-plugin.nvidia.com/gds\""));
    EXPECT_THAT(gds, HasSubstr("\"path\": \"/dev/nvidia-fs1\""));
    EXPECT_THAT(slurp(imex_path), HasSubstr("\"path\": \"/dev/nvidia-caps-imex-channels/channel0\""));
    EXPECT_THAT(slurp(gdrcopy_path), HasSubstr("\"path\": \"/dev/gdrdrv\""));
    EXPECT_FALSE(fs::exists(cdi.path() + "/k8s.device-plugin.nvidia.com-mofed.json"));
    // Every name resolves, as a CDI cache (containerd's) resolves them in that directory.
    const auto view = kgpu::cdi::scan_spec_dirs({cdi.path()});
    EXPECT_THAT(kgpu::cdi::unresolved(view, names), ::testing::IsEmpty());
    for (const std::string& schema : {std::string(KGPU_SOURCE_DIR) + "/../shared/facts/cdi-schema",
                                      std::string("/work/shared/facts/cdi-schema")}) {
        if (!fs::exists(schema + "/schema.json")) continue;
        auto v = run_process({"/usr/bin/python3", std::string(KGPU_SOURCE_DIR) + "/tests/cdi/validate_cdi.py", schema,
                              gds_path, imex_path, gdrcopy_path});
        EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
        break;
    }
    stop();  // before `cdi` and `root` go
}

// The directory is the node's (/var/run/cdi): a plugin removes only extra specs it wrote, and,
// while it writes CDI specs itself, the ones an earlier kgpu wrote under its old file names
// (kgpu-nvidia-<class>.yaml, nvidia.com names) when they carry kgpu's marker. A spec under
// NVIDIA's file name that this process did not write (NVIDIA's plugin's) stays. With the default
// envvar strategy it touches nothing there.
TEST_F(CompatTest, ExtraSpecsNotWrittenByKgpuAreLeftAlone) {
    TempDir cdi;
    const std::string foreign = "cdiVersion: 0.5.0\nkind: nvidia.com/gds\ndevices: []\n";
    const std::string gds = cdi.write("kgpu-nvidia-gds.yaml", foreign);
    const std::string imex = cdi.write("kgpu-nvidia-imex-channel.yaml", foreign);
    const std::string marked = cdi.write("kgpu-nvidia-gdrcopy.yaml", "# Written by kgpu device-plugin\n" + foreign);
    const std::string nvidias = cdi.write("k8s.device-plugin.nvidia.com-gds.json", "{\"cdiVersion\": \"0.5.0\"}\n");
    start("t4x4.yaml", {"--cdi-spec-dir", cdi.path()});
    registered(kGpu, 4);
    plugin_->signal(SIGHUP);  // applies the config again
    ASSERT_TRUE(logged("serving 1 resource (", 2));  // once at start, once for the SIGHUP
    plugin_->signal(SIGTERM);
    ASSERT_EQ(plugin_->wait(10000), 0);
    EXPECT_EQ(slurp(gds), foreign);
    EXPECT_EQ(slurp(imex), foreign);
    EXPECT_TRUE(fs::exists(marked)) << "envvar strategy: nothing in the CDI directory is kgpu's business";
    EXPECT_TRUE(fs::exists(nvidias));
    // A CDI strategy with no extras in use: the marked leftover goes, the others stay.
    start("t4x4.yaml", {"--cdi-spec-dir", cdi.path(), "--device-list-strategy", "cdi-cri"});
    registered(kGpu, 4);
    // The leftover is removed in the same pass as the specs are written, which may end after the
    // registration the kubelet saw: wait for it (10 s at most).
    for (int i = 0; i < 200 && fs::exists(marked); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(fs::exists(marked));
    EXPECT_EQ(slurp(gds), foreign);
    EXPECT_EQ(slurp(imex), foreign);
    EXPECT_TRUE(fs::exists(nvidias));
    stop();  // before `cdi` goes
}

// Issue #23 items 2 and 3, end to end: a config written for migStrategy mixed (a MIG resource in
// sharing.timeSlicing) with a misspelt key, used under single. The plugin serves nvidia.com/gpu
// unshared with one warning per thing it ignores, and `kgpu labels` (the same file) agrees: no
// replicas, no sharing strategy. Before, both exited 2.
TEST_F(CompatTest, MigResourceInTimeSlicingUnderSingleAndAnUnknownKeyPluginAndLabelsAgree) {
    const std::string cfg = config("version: v1\nflags:\n  migStrategy: single\n  failOnInitErorr: true\n"
                                   "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/mig-2g.20gb\n"
                                   "      replicas: 4\n");
    start("a100-mig-uniform.yaml", {"--config-file", cfg});
    const Devices d = registered(kGpu, 12);
    for (const auto& [id, state] : d) EXPECT_EQ(id.find("::"), std::string::npos) << id << ": shared";
    ASSERT_TRUE(logged("is a MIG resource, served only with migStrategy mixed"));
    EXPECT_THAT(plugin_->err(), HasSubstr(cfg + ":8: key 'sharing.timeSlicing.resources[0].name'"));
    EXPECT_THAT(plugin_->err(), HasSubstr(cfg + ":4: key 'flags.failOnInitErorr': unknown key"));

    auto l = run_process({KGPU_BINARY, "labels", "--oneshot", "--output-file", "-", "--nvml-library", KGPU_SIM_LIBRARY,
                          "--config-file", cfg, "--sysfs-root", aux_.path() + "/no-sysfs"},
                         {{"KGPU_SIM_NODE", sim_fixture("a100-mig-uniform.yaml")}});
    ASSERT_EQ(l.exit_code, 0) << l.err;
    EXPECT_THAT(l.out, HasSubstr("nvidia.com/gpu.replicas=1\n"));
    EXPECT_THAT(l.out, HasSubstr("nvidia.com/gpu.sharing-strategy=none\n"));
    EXPECT_THAT(l.out, HasSubstr("nvidia.com/mig.strategy=single\n"));
    EXPECT_THAT(l.err, HasSubstr(cfg + ":4: key 'flags.failOnInitErorr': unknown key"));
}

TEST_F(CompatTest, RequiredImexChannelMissingFailsTheStartNamingIt) {
    DevRoot root;
    root.node("/dev/nvidiactl");
    const std::string cfg = config("version: v1\nimex:\n  channelIDs: [0]\n  required: true\n");
    auto r = run_process({KGPU_BINARY, "device-plugin", "--device-plugin-path", dir_.path(), "--nvml-library",
                          KGPU_SIM_LIBRARY, "--config-file", cfg, "--nvidia-dev-root", root.path(), "--cdi-spec-dir",
                          aux_.path() + "/cdi"},
                         {{"KGPU_SIM_NODE", sim_fixture("t4x4.yaml")}});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr(root.path() + "/dev/nvidia-caps-imex-channels/channel0 does not exist"));
    // Not required: served, with a warning, and no channel in Allocate.
    const std::string optional = config("version: v1\nimex:\n  channelIDs: [0]\n");
    start("t4x4.yaml", {"--config-file", optional, "--nvidia-dev-root", root.path()});
    registered(kGpu, 4);
    v1beta1::AllocateResponse resp;
    ASSERT_TRUE(kubelet_->allocate(kGpu, {{sim_.uuid("0")}}, &resp).ok());
    EXPECT_FALSE(resp.container_responses(0).envs().contains("NVIDIA_IMEX_CHANNELS"));
    EXPECT_THAT(plugin_->err(), HasSubstr("IMEX channel 0:"));
}

// resources.gpus naming: ignored (with a warning) unless opted in; then served under that name.
TEST_F(CompatTest, NamingPatternsApplyOnlyWithTheOptIn) {
    const std::string cfg = config("version: v1\nresources:\n  gpus:\n  - pattern: \"*T4*\"\n    name: t4\n");
    start("t4x4.yaml", {"--config-file", cfg, "--apply-resource-patterns"});
    registered("nvidia.com/t4", 4);
    EXPECT_THAT(plugin_->err(), HasSubstr("nvidia.com/t4    4 devices <- GPU 0, 1, 2, 3"));
}

// sharing's rename and devices, as NVIDIA v0.14-v0.20 serve them: ignored with a warning
// (renameByDefault honoured), so a drop-in config serves the names NVIDIA's plugin serves.
TEST_F(CompatTest, SharingRenameAndDevicesServeWhatNvidiaServes) {
    start("t4x4.yaml", {"--config-file", config("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                                                "    - {name: gpu, rename: my-shared-gpu, replicas: 2}\n")});
    EXPECT_EQ(registered(kGpu, 8).size(), 8u);  // nvidia.com/gpu, not nvidia.com/my-shared-gpu
    EXPECT_THAT(plugin_->err(), HasSubstr("'sharing.timeSlicing.resources[0].rename': nvidia.com/my-shared-gpu is "
                                          "ignored, as NVIDIA's plugin v0.14-v0.20 ignore it"));
    EXPECT_EQ(kubelet_->resources(), std::vector<std::string>{kGpu});
    plugin_->signal(SIGTERM);
    ASSERT_EQ(plugin_->wait(10000), 0);
    // renameByDefault with a count of devices: every GPU shared as nvidia.com/gpu.shared.
    start("t4x4.yaml", {"--config-file", config("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
                                                "    resources:\n    - {name: gpu, devices: 2, replicas: 3}\n")});
    EXPECT_EQ(sim_.ids(registered("nvidia.com/gpu.shared", 12)).count("3::2"), 1u);
    EXPECT_THAT(plugin_->err(), HasSubstr("'sharing.timeSlicing.resources[0].devices': 2 is ignored"));
    EXPECT_FALSE(kubelet_->wait_registered(kGpu, 2, 300ms).has_value()) << "no whole GPUs left to serve";
}

// Better than NVIDIA: a 1-GPU request keeps NVLink pairs whole (the lowest free GPU used to be
// taken, breaking the pair a later 2-GPU pod needs).
TEST_F(CompatTest, PreferredAllocationKeepsNvlinkPairsWhole) {
    start("pcie-nvlink-pairs.yaml");
    registered(kGpu, 4);
    std::vector<std::string> out;
    auto st = kubelet_->prefer(kGpu, sim_.uuids({"0", "1", "3"}), {}, 1, &out);  // GPU 2 is taken
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(sim_.indices(out), std::vector<std::string>{"3"});
    st = kubelet_->prefer(kGpu, sim_.uuids({"1", "2", "3"}), {}, 1, &out);  // GPU 0 is taken
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(sim_.indices(out), std::vector<std::string>{"1"});
}

// The start-up dump says what a user needs: resources, devices per resource, strategy, sharing.
TEST_F(CompatTest, StartupDumpNamesResourcesDevicesStrategyAndSharing) {
    const std::string cfg = config("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                                   "    - {name: gpu, rename: t4-shared, devices: [1, 2], replicas: 3}\n");
    start("t4x4.yaml", {"--config-file", cfg, "--apply-resource-naming"});
    registered("nvidia.com/t4-shared", 6);
    const std::string err = plugin_->err();
    EXPECT_THAT(err, HasSubstr("serving 2 resources (MIG strategy none, containers see devices by uuid, device list "
                               "envvar, sharing time-slicing):"));
    EXPECT_THAT(err, HasSubstr("nvidia.com/gpu          2 devices <- GPU 0, 3\n"));
    EXPECT_THAT(err, HasSubstr("nvidia.com/t4-shared    6 devices <- GPU 1, 2 x 3 replicas (time-slicing)\n"));
    EXPECT_THAT(err, HasSubstr("resources.gpus: (none)"));
}

}  // namespace
