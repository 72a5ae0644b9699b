// The container runtime's decision and edit (toolkit/runtime.h) with an in-memory node, and its
// command-line handling.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "driver_root.h"
#include "node_fixture.h"
#include "cdi/hooks.h"
#include "nvml/brand.h"
#include "toolkit/runtime.h"

using namespace kgpu;
using namespace kgpu::toolkit;
using ojson = nlohmann::ordered_json;
using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;
using ::testing::HasSubstr;

namespace {

class FakeNodes : public NodeSource {
public:
    int node_calls = 0;
    Result<inventory::Node> node() override {
        ++node_calls;
        return test::toolkit_node();
    }
    Result<std::string> brand(const std::string&) override { return std::string("tesla"); }
    int refreshes = 0;
    bool refresh() override {
        ++refreshes;
        return true;
    }
};

std::string spec_with_env(std::vector<std::string> env) {
    ojson s = ojson::parse(R"({"ociVersion":"1.0.2","process":{"env":["PATH=/bin"]},"root":{"path":"rootfs"},
                               "linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}]}}})");
    for (auto& e : env) s["process"]["env"].push_back(e);
    return s.dump();
}

struct Modify : ::testing::Test {
    test::FakeDriverRoot root;
    RuntimeConfig config;
    FakeNodes nodes;
    std::vector<std::string> log;
    Modify() {
        config.driver_root = root.path();
        config.proc_root = root.path() + "/proc";
    }
    Result<std::optional<Modified>> run(const std::string& spec) {
        return modify_spec(spec, config, {"/usr/local/kgpu/nvidia-cdi-hook"}, nodes, log);
    }
};

TEST_F(Modify, NoRequestLeavesTheSpecAloneWithoutAskingNvml) {
    auto r = run(spec_with_env({"NVIDIA_VISIBLE_DEVICES=void"}));
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_FALSE(*r);
    EXPECT_EQ(nodes.node_calls, 0);
    EXPECT_FALSE(*run(spec_with_env({})));
}

TEST_F(Modify, InjectsTheRequestedGpu) {
    auto r = run(spec_with_env({"NVIDIA_VISIBLE_DEVICES=GPU-2fbe396f-df9c-d5a1-4b31-c1658bb71f80"}));
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_TRUE(*r);
    ojson s = ojson::parse((*r)->text);
    std::vector<std::string> paths;
    for (const auto& d : s["linux"]["devices"]) paths.push_back(d["path"]);
    EXPECT_THAT(paths, UnorderedElementsAre("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia3"));
    EXPECT_THAT((*r)->summary, HasSubstr("GPU-2fbe396f"));
    EXPECT_TRUE(s["hooks"].contains("createContainer"));
}

// A cached inventory (inventory_cache.h) is asked again where no witness vouches for it: a device
// it does not know, and "all" on a node with MIG-capable GPUs; a known device is not.
TEST_F(Modify, AskedAgainOnlyWhereTheInventoryMayBeOlderThanItsWitness) {
    ASSERT_TRUE(run(spec_with_env({"NVIDIA_VISIBLE_DEVICES=GPU-2fbe396f-df9c-d5a1-4b31-c1658bb71f80"})));
    EXPECT_EQ(nodes.refreshes, 0);
    auto unknown = run(spec_with_env({"NVIDIA_VISIBLE_DEVICES=GPU-ffffffff"}));
    ASSERT_FALSE(unknown);
    EXPECT_THAT(unknown.error().message, HasSubstr("unknown device 'GPU-ffffffff'"));
    EXPECT_EQ(nodes.refreshes, 1);
    EXPECT_EQ(nodes.node_calls, 3);  // the second answer was looked at again
    ASSERT_TRUE(run(spec_with_env({"NVIDIA_VISIBLE_DEVICES=all"})));  // GPU 1 has MIG enabled
    EXPECT_EQ(nodes.refreshes, 2);
}

TEST_F(Modify, UnmetRequirementFailsWithTheFix) {
    auto r = run(spec_with_env({"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=12.8"}));
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().message, HasSubstr("NVIDIA_REQUIRE_CUDA=\"cuda>=12.8\""));
    EXPECT_THAT(r.error().message, HasSubstr("driver 550.54.15"));
    EXPECT_THAT(r.error().message, HasSubstr("570.26"));
    // Met through the brand clause, as on NVIDIA's own CUDA images.
    EXPECT_TRUE(run(spec_with_env({"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.8 brand=tesla,driver>=550,driver<551"})));
    // Switched off per container, or for the node.
    EXPECT_TRUE(run(spec_with_env({"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.8", "NVIDIA_DISABLE_REQUIRE=true"})));
    config.disable_require = true;
    EXPECT_TRUE(run(spec_with_env({"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.8"})));
}

TEST_F(Modify, UnknownDeviceIsAnError) {
    auto r = run(spec_with_env({"NVIDIA_VISIBLE_DEVICES=9"}));
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().message, HasSubstr("unknown device '9'"));
}

TEST_F(Modify, SecureModeIgnoresTheVariableInUnprivilegedContainers) {
    config.accept_envvar_when_unprivileged = false;
    config.accept_volume_mounts = true;
    auto r = run(spec_with_env({"NVIDIA_VISIBLE_DEVICES=all"}));
    ASSERT_TRUE(r);
    EXPECT_FALSE(*r);
    ASSERT_EQ(log.size(), 1u);
    EXPECT_THAT(log[0], HasSubstr("ignoring NVIDIA_VISIBLE_DEVICES=all"));
}

TEST(RuncArgs, CommandBundleAndLog) {
    auto a = parse_runc_args({"--root", "/run/runc", "--log", "/b/log.json", "--log-format=json", "--systemd-cgroup",
                              "create", "--bundle", "/b", "--pid-file", "/b/pid", "c1"});
    EXPECT_EQ(a.command, "create");
    EXPECT_TRUE(a.modifies);
    EXPECT_EQ(a.bundle, "/b");
    EXPECT_EQ(a.log_file, "/b/log.json");
    EXPECT_EQ(a.log_format, "json");
    auto run = parse_runc_args({"run", "-b=/x", "c2"});
    EXPECT_TRUE(run.modifies);
    EXPECT_EQ(run.bundle, "/x");
    auto del = parse_runc_args({"--root", "create", "delete", "c1"});  // "create" is --root's value here
    EXPECT_EQ(del.command, "delete");
    EXPECT_FALSE(del.modifies);
    EXPECT_TRUE(parse_runc_args({"--version"}).version);
    EXPECT_EQ(parse_runc_args({"start", "c1"}).command, "start");
}

TEST(LowLevelRuntime, SearchesPathAndNeverPicksItself) {
    test::TempDir dir;
    auto exe = [&](const std::string& rel) {
        auto p = dir.write(rel, "#!/bin/sh\n");
        ::chmod(p.c_str(), 0755);
        return p;
    };
    const std::string self = exe("a/runc");  // kgpu installed under the name runc, first in PATH
    const std::string runc = exe("b/runc");
    exe("b/crun");
    dir.write("c/runc", "not executable");
    RuntimeConfig c;
    auto found = find_low_level_runtime(c, dir.path() + "/c:" + dir.path() + "/a:" + dir.path() + "/b", self);
    ASSERT_TRUE(found) << found.error().message;
    EXPECT_EQ(*found, runc);
    c.low_level_runtime = {"crun"};
    EXPECT_EQ(*find_low_level_runtime(c, dir.path() + "/b", self), dir.path() + "/b/crun");
    c.low_level_runtime = {"/nowhere/runc", "missing"};
    auto none = find_low_level_runtime(c, dir.path() + "/b", self);
    ASSERT_FALSE(none);
    EXPECT_THAT(none.error().message, HasSubstr("/nowhere/runc"));
    EXPECT_THAT(none.error().message, HasSubstr(dir.path() + "/b/missing"));
}

TEST(HookPath, ConfigThenSiblingThenSelf) {
    test::TempDir dir;
    const std::string self = dir.write("kgpu", "");
    RuntimeConfig c;
    EXPECT_EQ(resolve_hook_path(c, self), self);
    std::filesystem::create_symlink("kgpu", dir.path() + "/nvidia-cdi-hook");
    EXPECT_EQ(resolve_hook_path(c, self), dir.path() + "/nvidia-cdi-hook");
    c.hook_path = "/usr/bin/nvidia-cdi-hook";
    EXPECT_EQ(resolve_hook_path(c, self), "/usr/bin/nvidia-cdi-hook");
}

TEST(Brand, NamesAsLibnvidiaContainerSpellsThem) {
    EXPECT_EQ(nvml::brand_name(2).toolkit, "tesla");
    EXPECT_EQ(nvml::brand_name(14).toolkit, "nvidia");
    EXPECT_EQ(nvml::brand_name(13).toolkit, "nvidiartx");
    EXPECT_EQ(nvml::brand_name(99).toolkit, "unknown");
}

}  // namespace

namespace {

// A spec's hook on a node without NVIDIA's toolkit: the kgpu that `kgpu runtime install` put in
// /usr/local/kgpu (cdi::resolve_hook_path, used by `kgpu cdi generate` and the device plugin).
TEST(HookPath, CdiFindsTheInstalledKgpu) {
    if (::geteuid() != 0) GTEST_SKIP() << "writes /usr/local/kgpu";
    const std::string hook = "/usr/local/kgpu/nvidia-cdi-hook";
    if (std::filesystem::exists(hook)) GTEST_SKIP() << hook << " exists on this machine; not touching it";
    const char* saved = std::getenv("PATH");
    const std::string path = saved ? saved : "";
    ::setenv("PATH", "/nonexistent", 1);
    const bool nvidia = std::filesystem::exists("/usr/bin/nvidia-cdi-hook") || std::filesystem::exists("/usr/local/bin/nvidia-cdi-hook");
    std::filesystem::create_directories("/usr/local/kgpu");
    std::filesystem::copy_file("/bin/true", hook);  // any executable (the asan build has no kgpu binary)
    const std::string resolved = kgpu::cdi::resolve_hook_path("");
    std::filesystem::remove(hook);
    std::error_code ec;
    std::filesystem::remove("/usr/local/kgpu", ec);  // only when empty
    ::setenv("PATH", path.c_str(), 1);
    if (!nvidia) {
        EXPECT_EQ(resolved, hook);
    }
}

// Issue #22 item 5: the legacy hook goes for every container, those without a GPU too (then the
// spec is rewritten for that alone).
TEST_F(Modify, TheLegacyHookIsRemovedWithOrWithoutAGpu) {
    ojson s = ojson::parse(spec_with_env({"NVIDIA_VISIBLE_DEVICES=void"}));
    s["hooks"]["prestart"] = ojson::parse(R"([{"path":"/usr/bin/nvidia-container-runtime-hook","args":["nvidia-container-runtime-hook","prestart"]}])");
    auto r = run(s.dump());
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_TRUE(*r);
    EXPECT_EQ(nodes.node_calls, 0);
    EXPECT_FALSE(ojson::parse((*r)->text)["hooks"].contains("prestart"));
    EXPECT_THAT((*r)->summary, HasSubstr("no GPU requested; removed NVIDIA's legacy prestart hook /usr/bin/nvidia-container-runtime-hook"));
    s["process"]["env"] = ojson::array({"NVIDIA_VISIBLE_DEVICES=0"});
    auto gpu = run(s.dump());
    ASSERT_TRUE(gpu) << gpu.error().message;
    ojson out = ojson::parse((*gpu)->text);
    EXPECT_FALSE(out["hooks"].contains("prestart"));
    EXPECT_TRUE(out["hooks"].contains("createContainer"));
    EXPECT_THAT((*gpu)->summary, HasSubstr("removed NVIDIA's legacy prestart hook"));
}

// Issue #22 item 2: with the config the install recorded gone, a container that asks for GPUs (in
// any way, read with the widest settings) is refused naming the file; the others still run.
TEST_F(Modify, RefusedGpusFailOnlyContainersThatAskForThem) {
    config.accept_volume_mounts = true;
    ModifyOptions o{"/usr/local/kgpu/nvidia-cdi-hook", "/etc/custom/rt.toml is missing"};
    auto gpu = modify_spec(spec_with_env({"NVIDIA_VISIBLE_DEVICES=all"}), config, o, nodes, log);
    ASSERT_FALSE(gpu);
    EXPECT_EQ(gpu.error().code, Code::not_found);
    EXPECT_THAT(gpu.error().message, HasSubstr("/etc/custom/rt.toml is missing (the container asks for all by"));
    EXPECT_EQ(nodes.node_calls, 0);
    auto none = modify_spec(spec_with_env({"NVIDIA_VISIBLE_DEVICES=void"}), config, o, nodes, log);
    ASSERT_TRUE(none) << none.error().message;
    EXPECT_FALSE(*none);
}

TEST_F(Modify, DeepNestingIsAnErrorNotACrash) {
    const std::string deep = R"({"ociVersion":"1.0.2","x":)" + std::string(70000, '[') + std::string(70000, ']') + "}";
    auto r = run(deep);
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().message, HasSubstr("nested deeper than 512 levels"));
}

}  // namespace

// Issue #26: chained, the edit's hooks would not match those containerd already put in the spec
// (the same CDI device's edits, the same hooks' binary), so the steps would run twice; they are
// left out before chaining, as the edit skips them unchained.
TEST_F(Modify, HooksTheSpecAlreadyHoldsAreNotChainedAgain) {
    const std::string request = "NVIDIA_VISIBLE_DEVICES=GPU-2fbe396f-df9c-d5a1-4b31-c1658bb71f80";
    ModifyOptions apart{"/usr/local/kgpu/nvidia-cdi-hook"};
    auto once = modify_spec(spec_with_env({request}), config, apart, nodes, log);
    ASSERT_TRUE(once && *once) << (once ? "" : once.error().message);
    const ojson applied = ojson::parse((*once)->text);
    const ojson separate = applied["hooks"]["createContainer"];
    ASSERT_GT(separate.size(), 1u);

    ModifyOptions chained{"/usr/local/kgpu/nvidia-cdi-hook"};
    chained.chain_hooks = true;
    // A spec that already holds them (and still asks for the GPU): nothing is added.
    ojson holding = ojson::parse(spec_with_env({request}));
    holding["hooks"]["createContainer"] = separate;
    auto again = modify_spec(holding.dump(), config, chained, nodes, log);
    ASSERT_TRUE(again && *again) << (again ? "" : again.error().message);
    EXPECT_EQ(ojson::parse((*again)->text)["hooks"]["createContainer"], separate);
    // A spec that holds all but the last: only that one is added (a chain of one is the hook itself).
    ojson most = holding;
    most["hooks"]["createContainer"].erase(most["hooks"]["createContainer"].size() - 1);
    auto rest = modify_spec(most.dump(), config, chained, nodes, log);
    ASSERT_TRUE(rest && *rest);
    EXPECT_EQ(ojson::parse((*rest)->text)["hooks"]["createContainer"], separate);
    // A spec without them: one chain.
    auto fresh = modify_spec(spec_with_env({request}), config, chained, nodes, log);
    ASSERT_TRUE(fresh && *fresh);
    const ojson one = ojson::parse((*fresh)->text)["hooks"]["createContainer"];
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0]["args"][1], "chain");
    EXPECT_THAT((*fresh)->summary, HasSubstr("1 hooks (" + std::to_string(separate.size()) + " steps chained)"));
}
