// cdi/cache.h: what a CDI cache (container-device-interface pkg/cdi, as containerd 1.7+/2.x,
// CRI-O and nvidia-container-runtime use it) resolves in spec directories. Issue #23 item 1: two
// specs of one directory that define the same name make the cache drop it. The layouts are
// also handed to NVIDIA's nvidia-ctk v1.20 (`cdi list`, the Go cache itself) when its binary is
// beside the checkout, and both must agree.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include "cdi/cache.h"
#include "support/process.h"

using kgpu::cdi::scan_spec_dirs;
using kgpu::test::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
namespace fs = std::filesystem;

namespace {

// A spec of `kind` with the named devices (each with one env edit), as YAML.
std::string spec(const std::string& kind, const std::vector<std::string>& names, const std::string& version = "0.5.0") {
    std::string out = "cdiVersion: \"" + version + "\"\nkind: " + kind + "\ndevices:\n";
    for (const auto& n : names) out += "- name: \"" + n + "\"\n  containerEdits:\n    env: [\"X=" + n + "\"]\n";
    return out;
}

std::vector<std::string> names_of(const std::vector<kgpu::cdi::NameDefinitions>& defs) {
    std::vector<std::string> out;
    for (const auto& d : defs) out.push_back(d.name);
    return out;
}

std::set<std::string> resolvable(const kgpu::cdi::CacheView& v) {
    std::set<std::string> out;
    for (const auto& [name, path] : v.devices) out.insert(name);
    return out;
}

// NVIDIA's nvidia-ctk v1.20 (Go, the CDI cache itself), unpacked from the peers directory beside
// the checkout; "" when it is not there.
std::string nvidia_ctk(const TempDir& scratch) {
    std::vector<std::string> dirs;
    if (const char* env = std::getenv("KGPU_NVIDIA_PEERS")) dirs.emplace_back(env);
    dirs.push_back(std::string(KGPU_SOURCE_DIR) + "/../shared/peers/nvidia");
    dirs.emplace_back("/work/shared/peers/nvidia");
    for (const auto& d : dirs) {
        if (fs::exists(d + "/nvidia-ctk")) return d + "/nvidia-ctk";
        if (!fs::exists(d + "/nvidia-ctk.xz")) continue;
        const std::string out = scratch.path() + "/nvidia-ctk";
        auto r = kgpu::test::run_process(
            {"/bin/sh", "-c", "xz -dc '" + d + "/nvidia-ctk.xz' > '" + out + "' && chmod +x '" + out + "'"});
        if (r.exit_code == 0) return out;
    }
    return {};
}

// What `nvidia-ctk cdi list` resolves in `dirs` (lowest priority first).
std::set<std::string> listed_by_nvidia_ctk(const std::string& ctk, const std::vector<std::string>& dirs) {
    std::vector<std::string> argv = {ctk, "cdi", "list"};
    for (const auto& d : dirs) argv.insert(argv.end(), {"--spec-dir", d});
    auto r = kgpu::test::run_process(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::set<std::string> out;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) out.insert(line);
    return out;
}

TEST(CdiCache, TwoSpecsOfOneDirectoryDefiningANameDropIt) {
    TempDir dir;
    // The node-wide spec and one more of the same kind beside it (e.g. what an older kgpu plugin wrote).
    const std::string node_wide = dir.write("nvidia.yaml", spec("nvidia.com/gpu", {"0", "1", "all"}));
    const std::string other = dir.write("kgpu-nvidia-gpu.yaml", spec("nvidia.com/gpu", {"0", "1", "GPU-a"}));
    const auto v = scan_spec_dirs({dir.path()});
    EXPECT_THAT(resolvable(v), ElementsAre("nvidia.com/gpu=GPU-a", "nvidia.com/gpu=all"));
    ASSERT_EQ(v.conflicts.size(), 2u);
    EXPECT_THAT(names_of(v.conflicts), ElementsAre("nvidia.com/gpu=0", "nvidia.com/gpu=1"));
    EXPECT_THAT(v.conflicts[0].paths, ElementsAre(other, node_wide));  // scan order: file names sorted
    EXPECT_THAT(kgpu::cdi::unresolved(v, {"nvidia.com/gpu=1", "nvidia.com/gpu=all"}), ElementsAre("nvidia.com/gpu=1"));
    // Another kind beside them (the device plugin's) collides with neither.
    dir.write("k8s.device-plugin.nvidia.com-gpu.json",
              R"({"cdiVersion": "0.5.0", "kind": "k8s.device-plugin.nvidia.com/gpu",)"
              R"( "devices": [{"name": "0", "containerEdits": {"env": ["A=1"]}}]})");
    const auto w = scan_spec_dirs({dir.path()});
    EXPECT_EQ(w.devices.at("k8s.device-plugin.nvidia.com/gpu=0"),
              dir.path() + "/k8s.device-plugin.nvidia.com-gpu.json");
    EXPECT_EQ(w.conflicts.size(), 2u);
}

TEST(CdiCache, AHigherDirectoryOverridesButAConflictBelowStillDropsTheName) {
    TempDir etc, run;
    etc.write("a.yaml", spec("nvidia.com/gpu", {"0", "1", "2"}));
    etc.write("b.yaml", spec("nvidia.com/gpu", {"2"}));  // "2" conflicts in /etc/cdi
    const std::string dynamic = run.write("c.yaml", spec("nvidia.com/gpu", {"1", "2", "3"}));
    const auto v = scan_spec_dirs({etc.path(), run.path()});
    // "1": /var/run/cdi wins. "2": defined in /var/run/cdi too, but the conflict in /etc/cdi drops
    // it all the same (cache.go deletes every conflicting name after the scan).
    EXPECT_THAT(resolvable(v), ElementsAre("nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=3"));
    EXPECT_EQ(v.devices.at("nvidia.com/gpu=1"), dynamic);
    EXPECT_THAT(names_of(v.conflicts), ElementsAre("nvidia.com/gpu=2"));
    EXPECT_THAT(names_of(v.overridden), ElementsAre("nvidia.com/gpu=1"));
    EXPECT_THAT(v.overridden[0].paths, ElementsAre(etc.path() + "/a.yaml", dynamic));
}

TEST(CdiCache, SpecsTheCacheCannotLoadAreLeftOutWhole) {
    TempDir dir;
    dir.write("a-good.yaml", spec("nvidia.com/gpu", {"gpu0"}, "0.3.0"));
    dir.write("b-digit-name-needs-050.yaml", spec("nvidia.com/gpu", {"0"}, "0.3.0"));
    dir.write("c-unknown-version.yaml", spec("nvidia.com/gpu", {"gpu1"}, "0.9.0"));
    dir.write("d-bad-kind.yaml", spec("nvidia.com", {"gpu2"}));
    dir.write("e-twice.yaml", spec("nvidia.com/gpu", {"gpu3", "gpu3"}));
    dir.write("f-no-devices.yaml", "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n");
    dir.write("g-not-yaml.json", "{\"cdiVersion\": ");
    dir.write("h-bad-name.yaml", spec("nvidia.com/gpu", {"-x"}));
    dir.write("i-not-a-spec-extension.yml", spec("nvidia.com/gpu", {"gpu4"}));
    dir.write("sub/j-in-a-subdirectory.yaml", spec("nvidia.com/gpu", {"gpu5"}));
    dir.write("v-prefixed-version.yaml", spec("nvidia.com/gpu", {"gpu6"}, "v0.5.0"));
    const auto v = scan_spec_dirs({dir.path(), dir.path() + "/missing"});
    EXPECT_THAT(resolvable(v), ElementsAre("nvidia.com/gpu=gpu0", "nvidia.com/gpu=gpu6"));
    std::vector<std::string> failed;
    for (const auto& [path, why] : v.errors) failed.push_back(fs::path(path).filename().string() + ": " + why);
    ASSERT_EQ(failed.size(), 7u) << ::testing::PrintToString(failed);
    EXPECT_THAT(failed[0], HasSubstr("must be at least v0.5.0"));
    EXPECT_THAT(failed[1], HasSubstr("invalid version \"0.9.0\""));
    EXPECT_THAT(failed[2], HasSubstr("invalid kind"));
    EXPECT_THAT(failed[3], HasSubstr("multiple device \"gpu3\""));
    EXPECT_THAT(failed[4], HasSubstr("no devices"));
    EXPECT_THAT(failed[5], HasSubstr("g-not-yaml.json"));
    EXPECT_THAT(failed[6], HasSubstr("invalid device name"));
}

// The same layouts through NVIDIA's Go implementation: what resolves must be the same.
TEST(CdiCache, AgreesWithNvidiaCtkCdiList) {
    TempDir scratch;
    const std::string ctk = nvidia_ctk(scratch);
    if (ctk.empty()) GTEST_SKIP() << "NVIDIA's nvidia-ctk is not beside the checkout (../shared/peers/nvidia)";
    TempDir etc, run;
    etc.write("a.yaml", spec("nvidia.com/gpu", {"0", "1", "2", "4"}));
    etc.write("b.yaml", spec("nvidia.com/gpu", {"2", "5"}));
    etc.write("c-bad.yaml", spec("nvidia.com/gpu", {"6"}, "0.3.0"));
    run.write("nvidia.yaml", spec("nvidia.com/gpu", {"1", "2", "3", "all"}));
    run.write("kgpu-nvidia-gpu.yaml", spec("nvidia.com/gpu", {"3", "7"}));
    run.write("k8s.device-plugin.nvidia.com-gpu.json",
              R"({"cdiVersion": "0.5.0", "kind": "k8s.device-plugin.nvidia.com/gpu",)"
              R"( "devices": [{"name": "3", "containerEdits": {"env": ["A=1"]}}]})");
    run.write("twice.yaml", spec("nvidia.com/gds", {"all", "all"}));
    const auto v = scan_spec_dirs({etc.path(), run.path()});
    EXPECT_EQ(resolvable(v), listed_by_nvidia_ctk(ctk, {etc.path(), run.path()}));
    EXPECT_THAT(names_of(v.conflicts), ElementsAre("nvidia.com/gpu=2", "nvidia.com/gpu=3"));
    EXPECT_THAT(v.errors, ::testing::SizeIs(2));
    // One directory at a time, too.
    EXPECT_EQ(resolvable(scan_spec_dirs({run.path()})), listed_by_nvidia_ctk(ctk, {run.path()}));
    EXPECT_EQ(resolvable(scan_spec_dirs({etc.path()})), listed_by_nvidia_ctk(ctk, {etc.path()}));
}

}  // namespace
