// Requested device names -> the node's devices (toolkit/devices.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "node_fixture.h"
#include "toolkit/devices.h"

using namespace kgpu;
using namespace kgpu::toolkit;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

const inventory::Node kNode = test::toolkit_node();

Selection ok(std::vector<std::string> names) {
    auto s = resolve_devices(kNode, names, "nvidia.com/gpu");
    EXPECT_TRUE(s) << s.error().message;
    return s ? *s : Selection{};
}

std::string err(std::vector<std::string> names) {
    auto s = resolve_devices(kNode, names, "nvidia.com/gpu");
    EXPECT_FALSE(s);
    return s ? "" : s.error().message;
}

TEST(Devices, Spellings) {
    EXPECT_THAT(ok({"3"}).gpus, ElementsAre(3u));
    EXPECT_THAT(ok({"GPU-2fbe396f-df9c-d5a1-4b31-c1658bb71f80"}).gpus, ElementsAre(3u));
    EXPECT_THAT(ok({"gpu-2FBE396F-DF9C-d5a1-4b31-c1658bb71f80"}).gpus, ElementsAre(3u));  // any case
    EXPECT_THAT(ok({"GPU-2fbe"}).gpus, ElementsAre(3u));                                  // unique prefix
    EXPECT_THAT(ok({"0000:5d:00.0"}).gpus, ElementsAre(3u));
    EXPECT_THAT(ok({"00000000:5D:00.0"}).gpus, ElementsAre(3u));
    EXPECT_THAT(ok({"3", "0", "3"}).gpus, ElementsAre(3u, 0u));                          // request order, once
    auto mig = ok({"1:1"});
    ASSERT_EQ(mig.migs.size(), 1u);
    EXPECT_EQ(mig.migs[0].gpu, 1u);
    EXPECT_EQ(mig.migs[0].mig, 1u);
    EXPECT_EQ(ok({"MIG-00000000-0000-0000-0000-000000000000"}).migs.size(), 1u);
    EXPECT_TRUE(ok({"all"}).all);
    EXPECT_TRUE(ok({"none"}).none);
    EXPECT_FALSE(ok({"none", "0"}).none);  // "none" with devices means the devices
}

TEST(Devices, CdiNames) {
    EXPECT_THAT(ok({"nvidia.com/gpu=3"}).gpus, ElementsAre(3u));
    EXPECT_THAT(ok({"nvidia.com/gpu=gpu3"}).gpus, ElementsAre(3u));  // type-index
    EXPECT_EQ(ok({"nvidia.com/gpu=mig1:0"}).migs.size(), 1u);
    EXPECT_THAT(ok({"nvidia.com/gpu=GPU-64bbca15-1776-feaf-35c7-c0761cd05691"}).gpus, ElementsAre(0u));
    EXPECT_TRUE(ok({"nvidia.com/gpu=all"}).all);
    // The device plugin's own kind under the CDI strategies (issue #23: NVIDIA's plugin's vendor,
    // so its names cannot collide with a node-wide spec) names the same devices.
    EXPECT_THAT(ok({"k8s.device-plugin.nvidia.com/gpu=3", "k8s.device-plugin.nvidia.com/gpu=GPU-64bbca15-1776-feaf-"
                                                          "35c7-c0761cd05691"})
                    .gpus,
                ElementsAre(3u, 0u));
    EXPECT_EQ(ok({"k8s.device-plugin.nvidia.com/gpu=1:0"}).migs.size(), 1u);
    // Another kind is containerd's business: noted, not resolved, not an error.
    auto other = ok({"vendor.com/nic=0"});
    EXPECT_TRUE(other.empty());
    ASSERT_EQ(other.notes.size(), 1u);
    EXPECT_THAT(other.notes[0], HasSubstr("vendor.com/nic=0"));
    // "gpu3" is not a NVIDIA_VISIBLE_DEVICES spelling.
    EXPECT_THAT(err({"gpu3"}), HasSubstr("unknown device 'gpu3'"));
}

TEST(Devices, ErrorsNameTheRequestAndWhatExists) {
    const std::string e = err({"7"});
    EXPECT_THAT(e, HasSubstr("unknown device '7'"));
    EXPECT_THAT(e, HasSubstr("GPU-64bbca15-1776-feaf-35c7-c0761cd05691"));
    EXPECT_THAT(err({"GPU-ffff"}), HasSubstr("no such UUID"));
    EXPECT_THAT(err({"GPU-"}), HasSubstr("matches 4 devices"));  // the lost GPU 2 counts too
    EXPECT_THAT(err({"1:5"}), HasSubstr("no MIG device 5 on GPU 1"));
    EXPECT_THAT(err({"2"}), HasSubstr("GPU 2 is not usable (GPU is lost)"));
    EXPECT_THAT(err({"bogus"}), HasSubstr("expected all, none, an index"));
}

}  // namespace
