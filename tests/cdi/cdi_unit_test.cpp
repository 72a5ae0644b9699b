// The naming function, version rules, YAML rendering and host-file discovery of src/cdi, on
// hand-built inventories and temp directories.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "cdi/driver_files.h"
#include "cdi/naming.h"
#include "cdi/spec.h"
#include "support/process.h"

using namespace kgpu;
using cdi::NameStrategy;
using ::testing::HasSubstr;
using ojson = nlohmann::ordered_json;

namespace {

inventory::Node two_gpus() {
    inventory::Node n;
    n.driver_version = "550.54.15";
    inventory::Gpu a;
    a.index = 0;
    a.minor = 0;
    a.uuid = "GPU-aaaa";
    inventory::Gpu b;
    b.index = 1;
    b.minor = 3;
    b.uuid = "GPU-bbbb";
    b.mig_mode = inventory::MigMode::enabled;
    inventory::MigDevice m;
    m.index = 0;
    m.uuid = "MIG-cccc";
    m.gpu_instance_id = 7;
    m.compute_instance_id = 0;
    b.mig_devices.push_back(m);
    n.gpus = {a, b};
    return n;
}

}  // namespace

TEST(CdiNaming, EachStrategyNamesGpusAndMigDevices) {
    auto node = two_gpus();
    const auto& g = node.gpus[1];
    const auto& m = g.mig_devices[0];
    EXPECT_EQ(cdi::device_name(NameStrategy::index, g), "1");
    EXPECT_EQ(cdi::device_name(NameStrategy::uuid, g), "GPU-bbbb");
    EXPECT_EQ(cdi::device_name(NameStrategy::type_index, g), "gpu1");
    EXPECT_EQ(cdi::device_name(NameStrategy::index, g, m), "1:0");
    EXPECT_EQ(cdi::device_name(NameStrategy::uuid, g, m), "MIG-cccc");
    EXPECT_EQ(cdi::device_name(NameStrategy::type_index, g, m), "mig1:0");
    EXPECT_EQ(cdi::qualified_name("nvidia.com/gpu", "GPU-bbbb"), "nvidia.com/gpu=GPU-bbbb");
}

TEST(CdiNaming, DevicePluginIdsMapToSpecNames) {
    auto node = two_gpus();
    EXPECT_EQ(cdi::name_for_device_id(node, "GPU-aaaa", NameStrategy::index).value(), "0");
    EXPECT_EQ(cdi::name_for_device_id(node, "0", NameStrategy::uuid).value(), "GPU-aaaa");
    EXPECT_EQ(cdi::name_for_device_id(node, "1:0", NameStrategy::uuid).value(), "MIG-cccc");
    EXPECT_EQ(cdi::name_for_device_id(node, "MIG-cccc", NameStrategy::index).value(), "1:0");
    EXPECT_EQ(cdi::name_for_device_id(node, "GPU-bbbb::3", NameStrategy::uuid).value(), "GPU-bbbb");  // replica
    auto missing = cdi::name_for_device_id(node, "GPU-zzzz", NameStrategy::uuid);
    ASSERT_FALSE(missing);
    EXPECT_EQ(missing.error().code, Code::not_found);
    EXPECT_THAT(missing.error().message, HasSubstr("GPU-zzzz"));
}

TEST(CdiNaming, ParsesStrategyListsAndRejectsUnknownOnes) {
    auto s = cdi::parse_strategies("uuid, index,uuid");
    ASSERT_TRUE(s);
    EXPECT_EQ(*s, (std::vector<NameStrategy>{NameStrategy::uuid, NameStrategy::index}));
    auto bad = cdi::parse_strategies("index,serial");
    ASSERT_FALSE(bad);
    EXPECT_THAT(bad.error().message, HasSubstr("'serial'"));
    EXPECT_THAT(bad.error().message, HasSubstr("type-index"));
    EXPECT_FALSE(cdi::parse_strategies(" , "));
}

TEST(CdiNaming, KindRules) {
    EXPECT_EQ(cdi::make_kind("nvidia.com", "gpu").value(), "nvidia.com/gpu");
    EXPECT_FALSE(cdi::make_kind("nvidia.com/", "gpu"));
    EXPECT_FALSE(cdi::make_kind("nvidia.com", "gpu="));
    EXPECT_FALSE(cdi::make_kind("", "gpu"));
    EXPECT_THAT(cdi::make_kind("nvidia.com", "-x").error().message, HasSubstr("--class"));
}

TEST(CdiVersion, LowestVersionTheFeaturesAllow) {
    ojson spec = {{"cdiVersion", "x"}, {"kind", "nvidia.com/gpu"},
                  {"devices", ojson::array({{{"name", "gpu0"}, {"containerEdits", {{"deviceNodes", ojson::array({{{"path", "/dev/nvidia0"}}})}}}}})}};
    EXPECT_EQ(cdi::minimum_version(spec), "0.3.0");
    spec["devices"][0]["name"] = "0";
    EXPECT_EQ(cdi::minimum_version(spec), "0.5.0");
    spec["devices"][0]["name"] = "gpu0";
    spec["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"] = "/host/dev/nvidia0";
    EXPECT_EQ(cdi::minimum_version(spec), "0.5.0");
    spec["devices"][0]["containerEdits"]["deviceNodes"][0].erase("hostPath");
    spec["containerEdits"]["mounts"] = ojson::array({{{"hostPath", "/a"}, {"containerPath", "/a"}, {"type", "bind"}}});
    EXPECT_EQ(cdi::minimum_version(spec), "0.4.0");
    spec["kind"] = "nvidia.com/gpu.shared";
    EXPECT_EQ(cdi::minimum_version(spec), "0.6.0");
    spec["containerEdits"]["additionalGids"] = ojson::array({44});
    EXPECT_EQ(cdi::minimum_version(spec), "0.7.0");
}

TEST(CdiYaml, QuotesStringsYamlWouldReadAsOtherTypes) {
    ojson j = {{"a", "0"}, {"b", "0:1"}, {"c", "true"}, {"d", "GPU-x"}, {"e", 195}, {"f", "--link"}, {"g", ""}};
    const std::string y = cdi::to_yaml(j);
    EXPECT_THAT(y, HasSubstr("a: \"0\"\n"));
    EXPECT_THAT(y, HasSubstr("b: \"0:1\"\n"));
    EXPECT_THAT(y, HasSubstr("c: \"true\"\n"));
    EXPECT_THAT(y, HasSubstr("d: GPU-x\n"));
    EXPECT_THAT(y, HasSubstr("e: 195\n"));
    EXPECT_THAT(y, HasSubstr("f: \"--link\"\n"));
    EXPECT_THAT(y, HasSubstr("g: \"\"\n"));
}

TEST(CdiDriverFiles, LibrariesMatchTheDriverVersionAndMergedUsrIsReadOnce) {
    test::TempDir root;
    root.write("usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", "x");
    root.write("usr/lib/x86_64-linux-gnu/libcuda.so.535.1.1", "x");
    root.write("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", "x");
    root.write("usr/lib64/libnvidia-ptxjitcompiler.so.550.54.15", "x");
    std::filesystem::create_directory_symlink("usr/lib", root.path() + "/lib");
    auto libs = cdi::find_libraries(root.path(), "550.54.15");
    ASSERT_EQ(libs.size(), 3u);
    EXPECT_EQ(libs[0].path, "/usr/lib64/libnvidia-ptxjitcompiler.so.550.54.15");
    EXPECT_EQ(libs[1].path, "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15");
    EXPECT_EQ(libs[1].host_path, root.path() + "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15");
    EXPECT_EQ(libs[2].path, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15");
}

TEST(CdiDriverFiles, MigMinorsBadLineNamesFileAndLine) {
    test::TempDir proc;
    proc.write("driver/nvidia-caps/mig-minors", "config 1\nmonitor 2\ngpu0/gi1/access x\n");
    auto r = cdi::read_mig_minors(proc.path());
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().message, HasSubstr("mig-minors:3"));
    auto missing = cdi::read_mig_minors(proc.path() + "/nope");
    ASSERT_FALSE(missing);
    EXPECT_THAT(missing.error().message, HasSubstr("mig-minors"));
}

TEST(CdiGenerate, LostGpusAreLeftOutAndMigUsesCapsMinors) {
    test::TempDir root;
    root.write("proc/driver/nvidia-caps/mig-minors", "gpu3/gi7/access 66\ngpu3/gi7/ci0/access 67\n");
    root.write("usr/lib64/libcuda.so.550.54.15", "x");
    auto node = two_gpus();
    inventory::Gpu lost;
    lost.index = 2;
    lost.lost = true;
    lost.error = "GPU is lost";
    node.gpus.push_back(lost);
    cdi::SpecOptions o;
    o.driver_root = root.path();
    o.proc_root = root.path() + "/proc";
    auto spec = cdi::generate(node, o);
    ASSERT_TRUE(spec) << spec.error().message;
    std::vector<std::string> names;
    for (const auto& d : (*spec)["devices"]) names.push_back(d["name"]);
    EXPECT_EQ(names, (std::vector<std::string>{"0", "GPU-aaaa", "1", "GPU-bbbb", "1:0", "MIG-cccc", "all"}));
    const auto& mig = (*spec)["devices"][4]["containerEdits"]["deviceNodes"];
    ASSERT_EQ(mig.size(), 3u);
    EXPECT_EQ(mig[0]["path"], "/dev/nvidia3");
    EXPECT_EQ(mig[1]["path"], "/dev/nvidia-caps/nvidia-cap66");
    EXPECT_EQ(mig[2]["path"], "/dev/nvidia-caps/nvidia-cap67");
    EXPECT_EQ((*spec)["devices"][6]["containerEdits"]["deviceNodes"].size(), 4u);  // nvidia0, nvidia3, two caps
    EXPECT_EQ((*spec)["cdiVersion"], "0.5.0");
    EXPECT_EQ((*spec)["containerEdits"]["env"][0], "NVIDIA_VISIBLE_DEVICES=void");
    const auto& hooks = (*spec)["containerEdits"]["hooks"];
    ASSERT_EQ(hooks.size(), 2u);
    EXPECT_EQ(hooks[0]["args"][3], "libcuda.so.1::/usr/lib64/libcuda.so");
}

TEST(CdiGenerate, NvidiaCtkHookPathGetsTheHookSubcommandAndRelativeHookIsRejected) {
    test::TempDir root;
    root.write("usr/lib64/libcuda.so.550.54.15", "x");
    auto node = two_gpus();
    node.gpus.pop_back();
    cdi::SpecOptions o;
    o.driver_root = root.path();
    o.hook_path = "/usr/bin/nvidia-ctk";
    auto spec = cdi::generate(node, o);
    ASSERT_TRUE(spec) << spec.error().message;
    EXPECT_EQ((*spec)["containerEdits"]["hooks"][0]["args"][1], "hook");
    o.hook_path = "nvidia-cdi-hook";
    auto bad = cdi::generate(node, o);
    ASSERT_FALSE(bad);
    EXPECT_THAT(bad.error().message, HasSubstr("--hook-path"));
}

TEST(CdiGenerate, NoReadableGpuIsAnError) {
    inventory::Node node;
    node.driver_version = "550.54.15";
    auto spec = cdi::generate(node, {});
    ASSERT_FALSE(spec);
    EXPECT_THAT(spec.error().message, HasSubstr("no GPUs"));
}
