#include "deviceplugin/allocate.h"
#include "cdi_names.h"

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <gtest/gtest.h>

namespace kgpu::deviceplugin {
namespace {

using kgpu::test::kDp;

const std::string kUuid0 = "GPU-ec27bccf-af4d-bf80-04f8-04dfca67ad77";
const std::string kUuid1 = "GPU-49005985-4777-3876-1392-121435b83ab5";
const std::string kUuid2 = "GPU-ed41d99c-1127-c5ac-c4ee-501cabe400bc";

// Advertised IDs are UUIDs under every deviceIDStrategy (as NVIDIA's plugin); the strategy
// changes only what the container is handed.
Resource gpus(DeviceIdStrategy = DeviceIdStrategy::uuid) {
    Resource r;
    r.name = "nvidia.com/gpu";
    const std::string uuids[] = {kUuid0, kUuid1, kUuid2};
    for (unsigned i = 0; i < 3; ++i) {
        Device d;
        d.gpu_index = i;
        d.uuid = uuids[i];
        d.id = uuids[i];
        d.physical_id = uuids[i];
        d.minor = 4 + i;  // minors differ from indices on purpose
        r.devices.push_back(d);
    }
    return r;
}

Config with(std::vector<DeviceListStrategy> s, DeviceIdStrategy id = DeviceIdStrategy::uuid) {
    Config c;
    c.device_list_strategy = std::move(s);
    c.device_id_strategy = id;
    return c;
}

// A dev root laid out in a temp dir.
class DevicePluginDevRoot : public ::testing::Test {
protected:
    void SetUp() override {
        root_ = std::filesystem::path(::testing::TempDir()) /
                ("kgpu-devroot-" + std::to_string(::getpid()) + "-" +
                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
        std::filesystem::create_directories(root_ / "dev");
    }
    void TearDown() override { std::filesystem::remove_all(root_); }
    void touch(const std::string& dev_path) { std::ofstream(root_.string() + dev_path) << ""; }
    std::filesystem::path root_;
};

const DevRootView kNoDevRoot{"/nonexistent-kgpu-dev-root"};

TEST(DevicePluginAllocate, EnvvarUuid) {
    auto a = allocate(gpus(DeviceIdStrategy::uuid), {kUuid2, kUuid0}, Config{}, {}, kNoDevRoot);
    ASSERT_TRUE(a.has_value()) << a.error().message;
    EXPECT_EQ(a->envs, (std::map<std::string, std::string>{{"NVIDIA_VISIBLE_DEVICES", kUuid2 + "," + kUuid0}}));
    EXPECT_TRUE(a->mounts.empty());
    EXPECT_TRUE(a->devices.empty());
    EXPECT_TRUE(a->annotations.empty());
    EXPECT_TRUE(a->cdi_devices.empty());
}

TEST(DevicePluginAllocate, EnvvarIndex) {
    auto a = allocate(gpus(DeviceIdStrategy::index), {kUuid1, kUuid2},
                      with({DeviceListStrategy::envvar}, DeviceIdStrategy::index), {}, kNoDevRoot);
    ASSERT_TRUE(a.has_value()) << a.error().message;
    EXPECT_EQ(a->envs.at("NVIDIA_VISIBLE_DEVICES"), "1,2");
}

TEST(DevicePluginAllocate, VolumeMounts) {
    auto a = allocate(gpus(DeviceIdStrategy::uuid), {kUuid0, kUuid1}, with({DeviceListStrategy::volume_mounts}), {},
                      kNoDevRoot);
    ASSERT_TRUE(a.has_value()) << a.error().message;
    EXPECT_EQ(a->envs.at("NVIDIA_VISIBLE_DEVICES"), "/var/run/nvidia-container-devices");
    EXPECT_EQ(a->mounts, (std::vector<Mount>{{"/var/run/nvidia-container-devices/" + kUuid0, "/dev/null", true},
                                             {"/var/run/nvidia-container-devices/" + kUuid1, "/dev/null", true}}));
    auto idx = allocate(gpus(DeviceIdStrategy::index), {kUuid2},
                        with({DeviceListStrategy::volume_mounts}, DeviceIdStrategy::index), {}, kNoDevRoot);
    ASSERT_TRUE(idx.has_value());
    EXPECT_EQ(idx->mounts, (std::vector<Mount>{{"/var/run/nvidia-container-devices/2", "/dev/null", true}}));
}

TEST(DevicePluginAllocate, CdiAnnotations) {
    auto a = allocate(gpus(DeviceIdStrategy::uuid), {kUuid1, kUuid0}, with({DeviceListStrategy::cdi_annotations}), {},
                      kNoDevRoot);
    ASSERT_TRUE(a.has_value()) << a.error().message;
    EXPECT_TRUE(a->envs.empty());
    EXPECT_EQ(a->annotations, (std::map<std::string, std::string>{
                                  {"cdi.k8s.io/kgpu_nvidia.com-gpu",
                                   kDp + "gpu=" + kUuid1 + "," + kDp + "gpu=" + kUuid0}}));
    Config c = with({DeviceListStrategy::cdi_annotations}, DeviceIdStrategy::index);
    c.cdi_annotation_prefix = "example.com/";
    auto idx = allocate(gpus(DeviceIdStrategy::index), {kUuid0, kUuid2}, c, {}, kNoDevRoot);
    ASSERT_TRUE(idx.has_value());
    EXPECT_EQ(idx->annotations.at("example.com/kgpu_nvidia.com-gpu"), kDp + "gpu=0," + kDp + "gpu=2");
}

TEST(DevicePluginAllocate, CdiCri) {
    auto a = allocate(gpus(DeviceIdStrategy::index), {kUuid2, kUuid0}, with({DeviceListStrategy::cdi_cri}, DeviceIdStrategy::index),
                      {}, kNoDevRoot);
    ASSERT_TRUE(a.has_value()) << a.error().message;
    EXPECT_EQ(a->cdi_devices, (std::vector<std::string>{kDp + "gpu=2", kDp + "gpu=0"}));
    EXPECT_TRUE(a->envs.empty());
    EXPECT_TRUE(a->annotations.empty());
}

TEST(DevicePluginAllocate, CdiDeviceNameFollowsIdStrategy) {
    const Resource r = gpus(DeviceIdStrategy::uuid);
    EXPECT_EQ(cdi_device_name(r.devices[1], Config{}), kDp + "gpu=" + kUuid1);
    EXPECT_EQ(cdi_device_name(r.devices[1], with({}, DeviceIdStrategy::index)), kDp + "gpu=1");
    EXPECT_EQ(cdi_annotation_key("nvidia.com/mig-1g.10gb", Config{}), "cdi.k8s.io/kgpu_nvidia.com-mig-1g.10gb");
}

TEST(DevicePluginAllocate, SeveralStrategiesAtOnce) {
    auto a = allocate(gpus(DeviceIdStrategy::uuid), {kUuid0},
                      with({DeviceListStrategy::envvar, DeviceListStrategy::cdi_annotations, DeviceListStrategy::cdi_cri}),
                      {}, kNoDevRoot);
    ASSERT_TRUE(a.has_value()) << a.error().message;
    EXPECT_EQ(a->envs.at("NVIDIA_VISIBLE_DEVICES"), kUuid0);
    EXPECT_EQ(a->annotations.at("cdi.k8s.io/kgpu_nvidia.com-gpu"), kDp + "gpu=" + kUuid0);
    EXPECT_EQ(a->cdi_devices, std::vector<std::string>{kDp + "gpu=" + kUuid0});
    // envvar + volume-mounts: the mounts win the variable.
    auto b = allocate(gpus(DeviceIdStrategy::uuid), {kUuid0},
                      with({DeviceListStrategy::envvar, DeviceListStrategy::volume_mounts}), {}, kNoDevRoot);
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(b->envs.at("NVIDIA_VISIBLE_DEVICES"), "/var/run/nvidia-container-devices");
    EXPECT_EQ(b->mounts.size(), 1u);
}

TEST_F(DevicePluginDevRoot, PassDeviceSpecs) {
    touch("/dev/nvidiactl");
    touch("/dev/nvidia-uvm");
    for (const char* n : {"/dev/nvidia4", "/dev/nvidia5", "/dev/nvidia6"}) touch(n);
    // no nvidia-uvm-tools, no nvidia-modeset
    Config c;
    c.pass_device_specs = true;
    const DevRootView view(root_);
    auto a = allocate(gpus(DeviceIdStrategy::uuid), {kUuid2, kUuid0}, c, {}, view);
    ASSERT_TRUE(a.has_value()) << a.error().message;
    const std::string r = root_.string();
    EXPECT_EQ(a->devices, (std::vector<DeviceSpec>{{"/dev/nvidiactl", r + "/dev/nvidiactl", "rw"},
                                                   {"/dev/nvidia-uvm", r + "/dev/nvidia-uvm", "rw"},
                                                   {"/dev/nvidia6", r + "/dev/nvidia6", "rw"},
                                                   {"/dev/nvidia4", r + "/dev/nvidia4", "rw"}}));
    touch("/dev/nvidia-modeset");
    touch("/dev/nvidia-uvm-tools");
    auto b = allocate(gpus(DeviceIdStrategy::uuid), {kUuid1}, c, {}, view);
    ASSERT_TRUE(b.has_value());
    ASSERT_EQ(b->devices.size(), 5u);
    EXPECT_EQ(b->devices[2].container_path, "/dev/nvidia-uvm-tools");
    EXPECT_EQ(b->devices[3].container_path, "/dev/nvidia-modeset");
    EXPECT_EQ(b->devices[4].container_path, "/dev/nvidia5");
    // Off by default.
    auto off = allocate(gpus(DeviceIdStrategy::uuid), {kUuid1}, Config{}, {}, view);
    ASSERT_TRUE(off.has_value());
    EXPECT_TRUE(off->devices.empty());
}

// NVIDIA's plugin returned a DeviceSpec for a node that does not exist, and the pod failed later
// at container creation ("lstat /dev/nvidia2"): refuse in Allocate, naming the path.
TEST_F(DevicePluginDevRoot, PassDeviceSpecsRefusesMissingNodesNamingThePath) {
    Config c;
    c.pass_device_specs = true;
    const DevRootView view(root_);
    touch("/dev/nvidiactl");
    touch("/dev/nvidia4");
    EXPECT_TRUE(allocate(gpus(), {kUuid0}, c, {}, view).has_value());
    auto a = allocate(gpus(), {kUuid0, kUuid2}, c, {}, view);
    ASSERT_FALSE(a.has_value());
    EXPECT_EQ(a.error().code, Code::invalid_argument);
    EXPECT_NE(a.error().message.find(root_.string() + "/dev/nvidia6 does not exist"), std::string::npos)
        << a.error().message;
    EXPECT_NE(a.error().message.find("GPU 2"), std::string::npos) << a.error().message;
    std::filesystem::remove(root_ / "dev/nvidiactl");
    auto b = allocate(gpus(), {kUuid0}, c, {}, view);
    ASSERT_FALSE(b.has_value());
    EXPECT_NE(b.error().message.find(root_.string() + "/dev/nvidiactl does not exist"), std::string::npos)
        << b.error().message;
    // Without passDeviceSpecs the runtime injects the nodes: nothing to check.
    EXPECT_TRUE(allocate(gpus(), {kUuid2}, Config{}, {}, view).has_value());
}

// NVIDIA v0.17-v0.20 (getAllocateResponse) return before DeviceSpecs when every strategy is a CDI
// one, and the GPU Operator sets PASS_DEVICE_SPECS=true with CDI strategies: no DeviceSpecs, no
// refusal for a node that is missing (the CDI spec gives the container its nodes), no warning.
TEST_F(DevicePluginDevRoot, PassDeviceSpecsHandsNothingWhenEveryStrategyIsCdi) {
    const DevRootView view(root_);  // empty: no /dev/nvidiactl, no /dev/nvidia4
    Resource mig = gpus();
    mig.devices[0].mig = MigInstance{};  // capability minors unknown
    for (auto strategies : {std::vector{DeviceListStrategy::cdi_cri}, std::vector{DeviceListStrategy::cdi_annotations},
                            std::vector{DeviceListStrategy::cdi_annotations, DeviceListStrategy::cdi_cri}}) {
        Config c = with(strategies);
        c.pass_device_specs = true;
        c.gds_enabled = true;
        auto a = allocate(gpus(), {kUuid0, kUuid2}, c, {}, view);
        ASSERT_TRUE(a.has_value()) << a.error().message;
        EXPECT_TRUE(a->devices.empty());
        EXPECT_FALSE(a->envs.contains("NVIDIA_VISIBLE_DEVICES"));
        EXPECT_EQ(a->envs.at("NVIDIA_GDS"), "enabled");  // set before NVIDIA's early return
        EXPECT_TRUE(allocate(mig, {kUuid0}, c, {}, view).has_value());
        EXPECT_EQ(missing_device_nodes({gpus()}, c, view), "");
    }
    // One strategy that is not CDI: DeviceSpecs as before, and the refusal.
    Config mixed = with({DeviceListStrategy::envvar, DeviceListStrategy::cdi_cri});
    mixed.pass_device_specs = true;
    auto b = allocate(gpus(), {kUuid0}, mixed, {}, view);
    ASSERT_FALSE(b.has_value());
    EXPECT_NE(b.error().message.find("/dev/nvidia4 does not exist"), std::string::npos) << b.error().message;
    EXPECT_NE(missing_device_nodes({gpus()}, mixed, view), "");
}

TEST_F(DevicePluginDevRoot, MissingDeviceNodesAreNamedOnceAtStart) {
    Config c;
    c.pass_device_specs = true;
    const DevRootView view(root_);
    const std::vector<Resource> rs = {gpus()};
    touch("/dev/nvidia5");
    const std::string w = missing_device_nodes(rs, c, view);
    const std::string r = root_.string();
    EXPECT_NE(w.find(r + "/dev/nvidia4 (GPU 0, " + kUuid0 + ")"), std::string::npos) << w;
    EXPECT_NE(w.find(r + "/dev/nvidia6 (GPU 2, " + kUuid2 + ")"), std::string::npos) << w;
    EXPECT_EQ(w.find("/dev/nvidia5"), std::string::npos) << w;
    EXPECT_NE(w.find(r + "/dev/nvidiactl"), std::string::npos) << w;
    EXPECT_NE(w.find(r + "/dev/nvidia-uvm: CUDA needs it"), std::string::npos) << w;
    EXPECT_EQ(w.find("modeset"), std::string::npos) << w;  // optional, as in NVIDIA's plugin
    for (const char* n : {"/dev/nvidia4", "/dev/nvidia6", "/dev/nvidiactl", "/dev/nvidia-uvm"}) touch(n);
    EXPECT_EQ(missing_device_nodes(rs, c, view), "");
    std::filesystem::remove(root_ / "dev/nvidia4");
    EXPECT_EQ(missing_device_nodes(rs, Config{}, view), "");  // off without passDeviceSpecs
}

// gdsEnabled / mofedEnabled / gdrcopyEnabled and IMEX channels, as NVIDIA's plugin hands them.
TEST_F(DevicePluginDevRoot, GpuDirectAndImexExtras) {
    Config c = with({DeviceListStrategy::envvar, DeviceListStrategy::volume_mounts, DeviceListStrategy::cdi_cri});
    c.gds_enabled = c.mofed_enabled = c.gdrcopy_enabled = true;
    c.imex.channel_ids = {0};
    c.cdi_spec_dir = (root_ / "cdi").string();
    const DevRootView view(root_);
    // Nothing present: the variables only.
    auto a = allocate(gpus(), {kUuid0}, c, {}, view);
    ASSERT_TRUE(a.has_value()) << a.error().message;
    EXPECT_EQ(a->envs.at("NVIDIA_GDS"), "enabled");
    EXPECT_EQ(a->envs.at("NVIDIA_MOFED"), "enabled");
    EXPECT_EQ(a->envs.at("NVIDIA_GDRCOPY"), "enabled");
    EXPECT_FALSE(a->envs.contains("NVIDIA_IMEX_CHANNELS"));
    EXPECT_EQ(a->cdi_devices, std::vector<std::string>{kDp + "gpu=" + kUuid0});
    // The channel exists and the specs were written: names in NVIDIA's order.
    std::filesystem::create_directories(root_ / "dev/nvidia-caps-imex-channels");
    touch("/dev/nvidia-caps-imex-channels/channel0");
    std::filesystem::create_directories(root_ / "cdi");
    for (const char* f : {"k8s.device-plugin.nvidia.com-imex-channel.json", "k8s.device-plugin.nvidia.com-gds.json",
                          "k8s.device-plugin.nvidia.com-gdrcopy.json"})
        std::ofstream(root_ / "cdi" / f) << "";
    auto b = allocate(gpus(), {kUuid0}, c, {}, view);
    ASSERT_TRUE(b.has_value()) << b.error().message;
    EXPECT_EQ(b->cdi_devices, (std::vector<std::string>{kDp + "gpu=" + kUuid0, kDp + "imex-channel=0",
                                                        kDp + "gdrcopy=all", kDp + "gds=all"}));
    EXPECT_EQ(b->envs.at("NVIDIA_IMEX_CHANNELS"), "0");
    EXPECT_EQ(b->mounts.back(), (Mount{"/var/run/nvidia-container-devices/imex/0", "/dev/null", true}));
    c.pass_device_specs = true;
    for (const char* n : {"/dev/nvidiactl", "/dev/nvidia4"}) touch(n);
    auto d = allocate(gpus(), {kUuid0}, c, {}, view);
    ASSERT_TRUE(d.has_value()) << d.error().message;
    EXPECT_EQ(d->devices.back(), (DeviceSpec{"/dev/nvidia-caps-imex-channels/channel0",
                                             root_.string() + "/dev/nvidia-caps-imex-channels/channel0", "rw"}));
    // NVIDIA's plugin's file names (CDI's GenerateNameForSpec + ".json"), and kgpu's old ones.
    EXPECT_EQ(cdi_spec_file_name(kGpuKind), "k8s.device-plugin.nvidia.com-gpu.json");
    EXPECT_EQ(cdi_spec_file_name(kGdsKind), "k8s.device-plugin.nvidia.com-gds.json");
    EXPECT_EQ(legacy_cdi_spec_file_name("gpu"), "kgpu-nvidia-gpu.yaml");
}

TEST(DevicePluginAllocate, DevRootViewPaths) {
    EXPECT_EQ(DevRootView("/").host_path("/dev/nvidia0"), "/dev/nvidia0");
    EXPECT_EQ(DevRootView("/run/nvidia/driver").host_path("/dev/nvidia0"), "/run/nvidia/driver/dev/nvidia0");
    EXPECT_FALSE(kNoDevRoot.exists("/dev/nvidiactl"));
}

TEST(DevicePluginAllocate, ErrorsNameTheIdAndGiveNoAnswer) {
    const Resource r = gpus(DeviceIdStrategy::uuid);
    struct Case {
        std::vector<std::string> ids;
        std::set<std::string> unhealthy;
        std::string needle;
    };
    const Case cases[] = {
        {{kUuid0, "GPU-nope"}, {}, "unknown device ID 'GPU-nope'"},
        {{"0"}, {}, "unknown device ID '0'"},  // index under the uuid strategy
        {{kUuid0, kUuid1}, {kUuid1}, "'" + kUuid1 + "' is unhealthy"},
        {{kUuid0, kUuid0}, {}, "duplicate device ID '" + kUuid0 + "'"},
        {{}, {}, "no device IDs"},
    };
    for (const Case& c : cases) {
        auto a = allocate(r, c.ids, with({DeviceListStrategy::envvar, DeviceListStrategy::cdi_cri}), c.unhealthy, kNoDevRoot);
        ASSERT_FALSE(a.has_value()) << c.needle;
        EXPECT_EQ(a.error().code, Code::invalid_argument);
        EXPECT_NE(a.error().message.find(c.needle), std::string::npos) << a.error().message;
    }
}

}  // namespace
}  // namespace kgpu::deviceplugin
