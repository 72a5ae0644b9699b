// The container edits for selected devices (toolkit/edits.h): those `kgpu cdi generate` writes,
// computed in memory, narrowed to the requested driver capabilities.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "driver_root.h"
#include "node_fixture.h"
#include "toolkit/edits.h"

using namespace kgpu;
using namespace kgpu::toolkit;
using ojson = nlohmann::ordered_json;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

struct Edits : ::testing::Test {
    test::FakeDriverRoot root;
    inventory::Node node = test::toolkit_node();
    EditOptions options() {
        EditOptions o;
        o.driver_root = root.path();
        o.proc_root = root.path() + "/proc";
        o.hook_path = "/usr/local/kgpu/nvidia-cdi-hook";
        return o;
    }
    static std::vector<std::string> field_strings(const ojson& list) {
        std::vector<std::string> out;
        for (const auto& x : list) out.push_back(x.get<std::string>());
        return out;
    }
    static std::vector<std::string> field(const ojson& e, const char* list, const char* key) {
        std::vector<std::string> out;
        for (const auto& x : e.value(list, ojson::array())) out.push_back(x.value(key, std::string()));
        return out;
    }
};

TEST_F(Edits, OneGpuGetsItsNodeTheControlNodesAndTheDriver) {
    Selection sel;
    sel.gpus = {3};
    auto e = container_edits(node, sel, options());
    ASSERT_TRUE(e) << e.error().message;
    auto nodes = field(*e, "deviceNodes", "path");
    EXPECT_THAT(nodes, Contains("/dev/nvidia3"));
    EXPECT_THAT(nodes, Contains("/dev/nvidiactl"));
    EXPECT_THAT(nodes, Contains("/dev/nvidia-uvm"));
    EXPECT_THAT(nodes, Not(Contains("/dev/nvidia0")));
    auto mounts = field(*e, "mounts", "containerPath");
    EXPECT_THAT(mounts, Contains("/usr/lib64/libcuda.so.550.54.15"));
    EXPECT_THAT(mounts, Contains("/usr/lib64/libnvidia-ml.so.550.54.15"));
    EXPECT_THAT(mounts, Contains("/usr/lib64/libnvidia-future.so.550.54.15"));  // unknown: counted as compute
    EXPECT_THAT(mounts, Contains("/usr/bin/nvidia-smi"));
    EXPECT_THAT(mounts, Not(Contains("/usr/lib64/libnvidia-encode.so.550.54.15")));  // video
    EXPECT_THAT(mounts, Not(Contains("/usr/lib64/libGLX_nvidia.so.550.54.15")));     // graphics
    EXPECT_THAT(field_strings((*e)["env"]), Contains("NVIDIA_VISIBLE_DEVICES=void"));
    ASSERT_FALSE((*e)["hooks"].empty());
    for (const auto& h : (*e)["hooks"]) EXPECT_EQ(h["path"], "/usr/local/kgpu/nvidia-cdi-hook");
}

TEST_F(Edits, CapabilitiesSelectTheDriverFiles) {
    Selection sel;
    sel.gpus = {0};
    auto o = options();
    o.capabilities = {"utility"};
    auto e = container_edits(node, sel, o);
    ASSERT_TRUE(e) << e.error().message;
    auto mounts = field(*e, "mounts", "containerPath");
    EXPECT_THAT(mounts, Contains("/usr/lib64/libnvidia-ml.so.550.54.15"));
    EXPECT_THAT(mounts, Not(Contains("/usr/lib64/libcuda.so.550.54.15")));
    EXPECT_THAT(mounts, Not(Contains("/usr/bin/nvidia-cuda-mps-control")));
    for (const auto& h : (*e)["hooks"]) EXPECT_THAT(h.dump(), Not(HasSubstr("libcuda.so")));  // no libcuda symlink
    o.capabilities = {"all"};
    auto all = container_edits(node, sel, o);
    ASSERT_TRUE(all);
    EXPECT_THAT(field(*all, "mounts", "containerPath"), Contains("/usr/lib64/libGLX_nvidia.so.550.54.15"));
}

// A symlink goes into the container with the file it points to: libGLX_indirect.so.0 ->
// libGLX_nvidia.so.<version> is a graphics link whatever its own name (it was classified by its
// name, unknown and so "compute": a dangling link in every compute container, none for graphics).
TEST_F(Edits, SymlinksFollowTheCapabilityOfTheirTarget) {
    Selection sel;
    sel.gpus = {0};
    auto links = [&](std::set<std::string> caps) {
        auto o = options();
        o.capabilities = std::move(caps);
        auto e = container_edits(node, sel, o);
        EXPECT_TRUE(e) << e.error().message;
        std::string all;
        for (const auto& h : (*e)["hooks"]) all += h.dump();
        return all;
    };
    const std::string compute = links({"compute", "utility"});
    EXPECT_THAT(compute, Not(HasSubstr("libGLX_indirect.so.0")));
    EXPECT_THAT(compute, HasSubstr("libcuda.so.1::/usr/lib64/libcuda.so"));
    const std::string graphics = links({"graphics"});
    EXPECT_THAT(graphics, HasSubstr("libGLX_nvidia.so.550.54.15::/usr/lib64/libGLX_indirect.so.0"));
    EXPECT_THAT(graphics, Not(HasSubstr("libcuda.so")));
}

TEST_F(Edits, MigDevicesGetTheirCapabilityNodes) {
    Selection sel;
    sel.migs = {{1, 1}};
    auto e = container_edits(node, sel, options());
    ASSERT_TRUE(e) << e.error().message;
    auto nodes = field(*e, "deviceNodes", "path");
    EXPECT_THAT(nodes, Contains("/dev/nvidia1"));
    EXPECT_THAT(nodes, Contains("/dev/nvidia-caps/nvidia-cap156"));
    EXPECT_THAT(nodes, Contains("/dev/nvidia-caps/nvidia-cap157"));
    EXPECT_THAT(nodes, Not(Contains("/dev/nvidia-caps/nvidia-cap147")));
}

TEST_F(Edits, NoneIsTheDriverWithoutGpus) {
    Selection sel;
    sel.none = true;
    auto e = container_edits(node, sel, options());
    ASSERT_TRUE(e) << e.error().message;
    auto nodes = field(*e, "deviceNodes", "path");
    EXPECT_THAT(nodes, Contains("/dev/nvidiactl"));
    for (const auto& n : nodes) EXPECT_FALSE(n.starts_with("/dev/nvidia") && std::isdigit(static_cast<unsigned char>(n.back()))) << n;
}

TEST_F(Edits, KgpuAsTheHookBinaryGetsTheHookSubcommand) {
    Selection sel;
    sel.gpus = {0};
    auto o = options();
    o.hook_path = "/usr/local/kgpu/kgpu";
    auto e = container_edits(node, sel, o);
    ASSERT_TRUE(e);
    for (const auto& h : (*e)["hooks"]) {
        EXPECT_EQ(h["args"][0], "kgpu");
        EXPECT_EQ(h["args"][1], "hook");
    }
}

TEST(Capabilities, OfDriverFiles) {
    EXPECT_EQ(capability_of("libnvidia-ml.so.550.54.15"), "utility");
    EXPECT_EQ(capability_of("libcuda.so.550.54.15"), "compute");
    EXPECT_EQ(capability_of("libnvcuvid.so.550.54.15"), "video");
    EXPECT_EQ(capability_of("libEGL_nvidia.so.550.54.15"), "graphics");
    EXPECT_EQ(capability_of("libnvidia-ngx.so.550.54.15"), "ngx");
    EXPECT_EQ(capability_of("nvidia-smi"), "utility");
    EXPECT_EQ(capability_of("nvidia-cuda-mps-server"), "compute");
}

}  // namespace
