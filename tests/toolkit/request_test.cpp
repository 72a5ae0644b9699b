// NVIDIA's rules for what a container asks for (toolkit/request.h), case by case as
// internal/config/image of nvidia-container-toolkit v1.20 decides them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "toolkit/request.h"

using namespace kgpu;
using namespace kgpu::toolkit;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

namespace {

ContainerView env(std::initializer_list<std::pair<const std::string, std::string>> vars, bool privileged = false) {
    ContainerView c;
    c.env = vars;
    c.privileged = privileged;
    return c;
}

std::vector<std::string> devices(const ContainerView& c, const RuntimeConfig& cfg = {}) {
    auto r = requested_devices(c, cfg);
    EXPECT_TRUE(r) << r.error().message;
    return r ? r->devices : std::vector<std::string>{"<error>"};
}

TEST(Request, EnvironmentValues) {
    EXPECT_THAT(devices(env({})), IsEmpty());
    EXPECT_THAT(devices(env({{"NVIDIA_VISIBLE_DEVICES", ""}})), IsEmpty());
    EXPECT_THAT(devices(env({{"NVIDIA_VISIBLE_DEVICES", "void"}})), IsEmpty());
    EXPECT_THAT(devices(env({{"NVIDIA_VISIBLE_DEVICES", "0,void"}})), IsEmpty());  // void anywhere wins
    EXPECT_THAT(devices(env({{"NVIDIA_VISIBLE_DEVICES", "all"}})), ElementsAre("all"));
    EXPECT_THAT(devices(env({{"NVIDIA_VISIBLE_DEVICES", "none"}})), ElementsAre("none"));
    EXPECT_THAT(devices(env({{"NVIDIA_VISIBLE_DEVICES", "0, 2 ,GPU-x,1:0"}})), ElementsAre("0", "2", "GPU-x", "1:0"));
    // The first special value in the list decides.
    EXPECT_THAT(devices(env({{"NVIDIA_VISIBLE_DEVICES", "0,all"}})), ElementsAre("all"));
    EXPECT_THAT(devices(env({{"NVIDIA_VISIBLE_DEVICES", "none,all"}})), ElementsAre("none"));
}

TEST(Request, LegacyImageWithoutTheVariableGetsAll) {
    EXPECT_THAT(devices(env({{"CUDA_VERSION", "11.0.3"}})), ElementsAre("all"));
    EXPECT_THAT(devices(env({{"CUDA_VERSION", "11.0.3"}, {"NVIDIA_REQUIRE_CUDA", "cuda>=11.0"}})), IsEmpty());
    EXPECT_THAT(devices(env({{"CUDA_VERSION", "11.0.3"}, {"NVIDIA_VISIBLE_DEVICES", "void"}})), IsEmpty());
}

TEST(Request, UnprivilegedEnvironmentIgnoredWhenNotAccepted) {
    RuntimeConfig secure;
    secure.accept_envvar_when_unprivileged = false;
    secure.accept_volume_mounts = true;
    auto r = requested_devices(env({{"NVIDIA_VISIBLE_DEVICES", "all"}}), secure);
    ASSERT_TRUE(r);
    EXPECT_THAT(r->devices, IsEmpty());
    ASSERT_EQ(r->notes.size(), 1u);
    EXPECT_THAT(r->notes[0], HasSubstr("unprivileged"));
    // A privileged container (CAP_SYS_ADMIN in the bounding set) is always believed.
    EXPECT_THAT(devices(env({{"NVIDIA_VISIBLE_DEVICES", "all"}}, true), secure), ElementsAre("all"));
    // So is a legacy image's implicit "all" only when privileged.
    EXPECT_THAT(devices(env({{"CUDA_VERSION", "12.4.1"}}), secure), IsEmpty());
}

TEST(Request, VolumeMountsWhenAccepted) {
    ContainerView c = env({{"NVIDIA_VISIBLE_DEVICES", "/var/run/nvidia-container-devices"}});
    c.mounts = {{"/dev/null", "/var/run/nvidia-container-devices/GPU-a"},
                {"/dev/null", "/var/run/nvidia-container-devices//GPU-b/"},
                {"/dev/null", "/var/run/nvidia-container-devices/GPU-a"},               // duplicate
                {"/tmp/x", "/var/run/nvidia-container-devices/GPU-c"},                  // not /dev/null
                {"/dev/null", "/var/run/nvidia-container-devices/imex/3"},              // IMEX channel
                {"/dev/null", "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/0"},
                {"/dev/null", "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu=1"},
                {"/dev/null", "/elsewhere/GPU-d"}};
    RuntimeConfig cfg;
    cfg.accept_volume_mounts = true;
    auto r = requested_devices(c, cfg);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->source, RequestSource::volume_mounts);
    EXPECT_THAT(r->devices, ElementsAre("GPU-a", "GPU-b", "nvidia.com/gpu=0", "nvidia.com/gpu=1"));
}

TEST(Request, TheVolumeMountsMarkerWithoutAcceptingThemIsAnError) {
    ContainerView c = env({{"NVIDIA_VISIBLE_DEVICES", "/var/run/nvidia-container-devices"}});
    c.mounts = {{"/dev/null", "/var/run/nvidia-container-devices/GPU-a"}};
    RuntimeConfig cfg;
    cfg.source = "/etc/kgpu/container-runtime.toml";
    auto r = requested_devices(c, cfg);
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().message, HasSubstr("accept-nvidia-visible-devices-as-volume-mounts"));
    EXPECT_THAT(r.error().message, HasSubstr("/etc/kgpu/container-runtime.toml"));
}

TEST(Request, AnnotationsComeFirstSortedByKey) {
    ContainerView c = env({{"NVIDIA_VISIBLE_DEVICES", "all"}});
    c.annotations = {{"cdi.k8s.io/z", "nvidia.com/gpu=1"}, {"cdi.k8s.io/a", "nvidia.com/gpu=0,nvidia.com/gpu=GPU-x"},
                     {"other/key", "nvidia.com/gpu=3"}};
    auto r = requested_devices(c, {});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->source, RequestSource::annotations);
    EXPECT_THAT(r->devices, ElementsAre("nvidia.com/gpu=0", "nvidia.com/gpu=GPU-x", "nvidia.com/gpu=1"));
}

TEST(Request, DriverCapabilities) {
    auto caps = [](std::string v) {
        ContainerView c = env({{"NVIDIA_VISIBLE_DEVICES", "all"}, {"NVIDIA_DRIVER_CAPABILITIES", v}});
        return requested_devices(c, {})->capabilities;
    };
    EXPECT_EQ(caps(""), (std::set<std::string>{"utility", "compute"}));
    EXPECT_EQ(caps("video, graphics"), (std::set<std::string>{"video", "graphics"}));
    EXPECT_EQ(caps("all"), (std::set<std::string>{"all"}));
    EXPECT_EQ(caps("bogus"), (std::set<std::string>{"utility", "compute"}));
    EXPECT_EQ(requested_devices(env({{"NVIDIA_VISIBLE_DEVICES", "0"}}), {})->capabilities,
              (std::set<std::string>{"utility", "compute"}));
}

TEST(Request, ReadContainerFromSpec) {
    auto spec = nlohmann::ordered_json::parse(R"({
      "process": {"env": ["A=1", "NVIDIA_VISIBLE_DEVICES=0", "A=2", "EMPTY="],
                  "capabilities": {"bounding": ["CAP_CHOWN", "CAP_SYS_ADMIN"]}},
      "mounts": [{"destination": "/x", "source": "/dev/null", "type": "bind"}],
      "annotations": {"cdi.k8s.io/a": "nvidia.com/gpu=0"}})");
    auto c = read_container(spec);
    ASSERT_TRUE(c) << c.error().message;
    EXPECT_EQ(c->env.at("A"), "2");
    EXPECT_EQ(c->env.at("EMPTY"), "");
    EXPECT_TRUE(c->privileged);
    ASSERT_EQ(c->mounts.size(), 1u);
    EXPECT_EQ(c->annotations.at("cdi.k8s.io/a"), "nvidia.com/gpu=0");
    auto bad = read_container(nlohmann::ordered_json::parse(R"({"process": {"env": ["NOEQUALS"]}})"));
    ASSERT_FALSE(bad);
    EXPECT_THAT(bad.error().message, HasSubstr("NOEQUALS"));
    EXPECT_FALSE(read_container(nlohmann::ordered_json::parse(R"({"mounts": {}})")));
}

TEST(Request, Requirements) {
    auto reqs = [](std::initializer_list<std::pair<const std::string, std::string>> vars) {
        auto r = requirements(env(vars));
        EXPECT_TRUE(r);
        return r ? *r : std::vector<std::pair<std::string, std::string>>{};
    };
    using P = std::pair<std::string, std::string>;
    EXPECT_THAT(reqs({{"NVIDIA_REQUIRE_CUDA", "cuda>=12.4"}, {"NVIDIA_REQUIRE_DRIVER", "driver>=535"},
                      {"NVIDIA_REQUIRE_JETPACK", "csv-mounts=all"}}),
                ElementsAre(P{"NVIDIA_REQUIRE_CUDA", "cuda>=12.4"}, P{"NVIDIA_REQUIRE_DRIVER", "driver>=535"}));
    EXPECT_THAT(reqs({{"NVIDIA_REQUIRE_CUDA", "cuda>=12.4"}, {"NVIDIA_DISABLE_REQUIRE", "true"}}), IsEmpty());
    EXPECT_THAT(reqs({{"NVIDIA_REQUIRE_CUDA", "cuda>=12.4"}, {"NVIDIA_DISABLE_REQUIRE", "1"}}), IsEmpty());
    EXPECT_THAT(reqs({{"NVIDIA_REQUIRE_CUDA", "cuda>=12.4"}, {"NVIDIA_DISABLE_REQUIRE", "no"}}), ElementsAre(P{"NVIDIA_REQUIRE_CUDA", "cuda>=12.4"}));
    EXPECT_THAT(reqs({{"CUDA_VERSION", "12.6.2"}}), ElementsAre(P{"CUDA_VERSION", "cuda>=12.6"}));
    EXPECT_THAT(reqs({{"CUDA_VERSION", "12"}}), ElementsAre(P{"CUDA_VERSION", "cuda>=12.0"}));
    auto bad = requirements(env({{"CUDA_VERSION", "twelve"}}));
    ASSERT_FALSE(bad);
    EXPECT_THAT(bad.error().message, HasSubstr("CUDA_VERSION=twelve"));
}

}  // namespace
