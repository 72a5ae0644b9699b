#include "deviceplugin/allocate.h"

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <gtest/gtest.h>

namespace kgpu::deviceplugin {
namespace {

const std::string kUuid0 = "GPU-ec27bccf-af4d-bf80-04f8-04dfca67ad77";
const std::string kUuid1 = "GPU-49005985-4777-3876-1392-121435b83ab5";
const std::string kUuid2 = "GPU-ed41d99c-1127-c5ac-c4ee-501cabe400bc";

Resource gpus(DeviceIdStrategy s) {
    Resource r;
    r.name = "nvidia.com/gpu";
    const std::string uuids[] = {kUuid0, kUuid1, kUuid2};
    for (unsigned i = 0; i < 3; ++i) {
        Device d;
        d.gpu_index = i;
        d.uuid = uuids[i];
        d.id = s == DeviceIdStrategy::index ? std::to_string(i) : uuids[i];
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
    auto a = allocate(gpus(DeviceIdStrategy::index), {"1", "2"},
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
    auto idx = allocate(gpus(DeviceIdStrategy::index), {"2"},
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
                                  {"cdi.k8s.io/kgpu_nvidia.com-gpu", "nvidia.com/gpu=" + kUuid1 + ",nvidia.com/gpu=" + kUuid0}}));
    Config c = with({DeviceListStrategy::cdi_annotations}, DeviceIdStrategy::index);
    c.cdi_annotation_prefix = "example.com/";
    auto idx = allocate(gpus(DeviceIdStrategy::index), {"0", "2"}, c, {}, kNoDevRoot);
    ASSERT_TRUE(idx.has_value());
    EXPECT_EQ(idx->annotations.at("example.com/kgpu_nvidia.com-gpu"), "nvidia.com/gpu=0,nvidia.com/gpu=2");
}

TEST(DevicePluginAllocate, CdiCri) {
    auto a = allocate(gpus(DeviceIdStrategy::index), {"2", "0"}, with({DeviceListStrategy::cdi_cri}, DeviceIdStrategy::index),
                      {}, kNoDevRoot);
    ASSERT_TRUE(a.has_value()) << a.error().message;
    EXPECT_EQ(a->cdi_devices, (std::vector<std::string>{"nvidia.com/gpu=2", "nvidia.com/gpu=0"}));
    EXPECT_TRUE(a->envs.empty());
    EXPECT_TRUE(a->annotations.empty());
}

TEST(DevicePluginAllocate, CdiDeviceNameFollowsIdStrategy) {
    const Resource r = gpus(DeviceIdStrategy::uuid);
    EXPECT_EQ(cdi_device_name(r.devices[1], Config{}), "nvidia.com/gpu=" + kUuid1);
    EXPECT_EQ(cdi_device_name(r.devices[1], with({}, DeviceIdStrategy::index)), "nvidia.com/gpu=1");
    EXPECT_EQ(cdi_annotation_key("nvidia.com/mig-1g.10gb", Config{}), "cdi.k8s.io/kgpu_nvidia.com-mig-1g.10gb");
}

TEST(DevicePluginAllocate, SeveralStrategiesAtOnce) {
    auto a = allocate(gpus(DeviceIdStrategy::uuid), {kUuid0},
                      with({DeviceListStrategy::envvar, DeviceListStrategy::cdi_annotations, DeviceListStrategy::cdi_cri}),
                      {}, kNoDevRoot);
    ASSERT_TRUE(a.has_value()) << a.error().message;
    EXPECT_EQ(a->envs.at("NVIDIA_VISIBLE_DEVICES"), kUuid0);
    EXPECT_EQ(a->annotations.at("cdi.k8s.io/kgpu_nvidia.com-gpu"), "nvidia.com/gpu=" + kUuid0);
    EXPECT_EQ(a->cdi_devices, std::vector<std::string>{"nvidia.com/gpu=" + kUuid0});
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
