// The cases of nvidia-ctk v1.20's engine tests (pkg/config/engine/containerd config_test.go and
// config_v1_test.go, engine/crio crio_test.go, engine/docker docker_test.go), replayed against
// kgpu: each input and expected result is written from the shape of NVIDIA's case (our own
// values and layout; the containerd and CRI-O ones in nvidia_ctk_cases.h, which tests/parity
// also runs nvidia-ctk on) and compared after parsing, as NVIDIA's tests compare go-toml trees.
//
// containerd v2/v3: nvidia-ctk's AddRuntime result is the drop-in's tree (a copy of the CRI
// plugin table plus the edits); the inputs here hold nothing but that table, so the same tree
// is also what editing the file in place must give. Both are checked.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "runtime/containerd.h"
#include "runtime/crio.h"
#include "runtime/docker.h"
#include "runtime/nvidia_ctk_cases.h"

using namespace kgpu;
using kgpu::test::containerd_cases;
using kgpu::test::containerd_v1_cases;
using kgpu::test::ContainerdCase;
using kgpu::test::crio_cases;
using kgpu::test::CrioCase;

namespace {

toml::table parse_or_fail(const std::string& text, const std::string& what) {
    try {
        return toml::parse(text, what);
    } catch (const toml::parse_error& e) {
        ADD_FAILURE() << what << " is not TOML: " << e.description() << "\n" << text;
        return {};
    }
}

void expect_same_toml(const std::string& got, const std::string& expected, const std::string& label) {
    const toml::table a = parse_or_fail(got, label + " (kgpu)");
    const toml::table b = parse_or_fail(expected, label + " (expected)");
    EXPECT_TRUE(a == b) << label << "\n--- kgpu:\n" << got << "\n--- expected:\n" << expected;
}

// The runtime is "gpu" at /opt/gpu/runtime (NVIDIA's cases add "test" at /usr/bin/test).
runtime::ContainerdOptions gpu_runtime(bool set_as_default) {
    runtime::ContainerdOptions o;
    o.runtime_name = "gpu";
    o.runtime_path = "/opt/gpu/runtime";
    o.set_as_default = set_as_default;
    return o;
}

class NvidiaCtkContainerd : public ::testing::TestWithParam<ContainerdCase> {};

}  // namespace

TEST_P(NvidiaCtkContainerd, DropInAndInPlaceGiveNvidiaCtksTree) {
    const auto& c = GetParam();
    const auto o = gpu_runtime(c.set_as_default);
    auto drop = runtime::configure_drop_in(c.input, "config.toml", "/etc/containerd/conf.d/99-nvidia.toml", o);
    ASSERT_TRUE(drop) << drop.error().message;
    expect_same_toml(drop->drop_in, c.expected, c.name + " (drop-in)");
    auto in_place = runtime::configure(c.input, "config.toml", o);
    ASSERT_TRUE(in_place) << in_place.error().message;
    expect_same_toml(in_place->text, c.expected, c.name + " (in place)");
    // Idempotent: a second run changes nothing.
    auto again = runtime::configure(in_place->text, "config.toml", o);
    ASSERT_TRUE(again) << again.error().message;
    EXPECT_FALSE(again->changed) << again->text;
}

INSTANTIATE_TEST_SUITE_P(AddRuntime, NvidiaCtkContainerd, ::testing::ValuesIn(containerd_cases()),
                         [](const auto& info) { return info.param.name; });

namespace {

class NvidiaCtkContainerdV1 : public ::testing::TestWithParam<ContainerdCase> {};

}  // namespace

TEST_P(NvidiaCtkContainerdV1, InPlaceGivesNvidiaCtksTree) {
    const auto& c = GetParam();
    auto o = gpu_runtime(c.set_as_default);
    o.use_legacy_config = true;
    o.runtime_type = "";
    auto edited = runtime::configure(c.input, "config.toml", o);
    ASSERT_TRUE(edited) << edited.error().message;
    EXPECT_EQ(edited->version, 1);
    expect_same_toml(edited->text, c.expected, c.name);
    // Version 1 has no imports: no drop-in.
    auto drop = runtime::configure_drop_in(c.input, "config.toml", "/etc/containerd/conf.d/99-nvidia.toml", o);
    ASSERT_FALSE(drop);
    EXPECT_THAT(drop.error().message, ::testing::HasSubstr("version 1"));
}

INSTANTIATE_TEST_SUITE_P(AddRuntimeV1, NvidiaCtkContainerdV1, ::testing::ValuesIn(containerd_v1_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(NvidiaCtkContainerdV1, LegacySetAsDefaultWritesTheDefaultRuntimeTable) {
    auto o = gpu_runtime(true);
    o.use_legacy_config = true;
    auto edited = runtime::configure("", "config.toml", o);
    ASSERT_TRUE(edited) << edited.error().message;
    const auto doc = toml::parse(edited->text);
    EXPECT_FALSE(doc["plugins"]["cri"]["containerd"]["default_runtime_name"]);
    EXPECT_EQ(doc["plugins"]["cri"]["containerd"]["default_runtime"]["options"]["BinaryName"].value<std::string>(),
              "/opt/gpu/runtime");
    EXPECT_EQ(doc["plugins"]["cri"]["containerd"]["default_runtime"]["options"]["Runtime"].value<std::string>(),
              "/opt/gpu/runtime");
    EXPECT_EQ(doc["plugins"]["cri"]["containerd"]["default_runtime"]["runtime_type"].value<std::string>(),
              "io.containerd.runc.v2");
}

namespace {

class NvidiaCtkCrio : public ::testing::TestWithParam<CrioCase> {};

runtime::CrioOptions crio_gpu(bool set_as_default) {
    runtime::CrioOptions o;
    o.runtime_name = "gpu";
    o.runtime_path = "/opt/gpu/runtime";
    o.set_as_default = set_as_default;
    return o;
}

}  // namespace

TEST_P(NvidiaCtkCrio, DropInGivesNvidiaCtksTree) {
    const auto& c = GetParam();
    auto text = runtime::crio_drop_in({c.input, "crio.conf"}, crio_gpu(c.set_as_default));
    ASSERT_TRUE(text) << text.error().message;
    expect_same_toml(*text, c.expected, c.name);
}

INSTANTIATE_TEST_SUITE_P(AddRuntime, NvidiaCtkCrio, ::testing::ValuesIn(crio_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(NvidiaCtkCrio, InPlaceEditKeepsTheRestAndDropsAStaleDefault) {
    const std::string before =
        "# CRI-O\n[crio]\nlog_dir = \"/var/log/crio/pods\"\n\n[crio.runtime]\ndefault_runtime = \"gpu\"\n"
        "# the low-level runtime\n[crio.runtime.runtimes.runc]\nruntime_path = \"/usr/sbin/runc\"\nmonitor_path = \"/m\"\n";
    auto edited = runtime::configure_crio(before, "crio.conf", crio_gpu(false));
    ASSERT_TRUE(edited) << edited.error().message;
    expect_same_toml(edited->text,
                     "[crio]\nlog_dir = \"/var/log/crio/pods\"\n[crio.runtime.runtimes.runc]\nruntime_path = \"/usr/sbin/runc\"\n"
                     "monitor_path = \"/m\"\n[crio.runtime.runtimes.gpu]\nruntime_path = \"/opt/gpu/runtime\"\n"
                     "monitor_path = \"/m\"\nruntime_type = \"oci\"\n",
                     "crio in place");
    EXPECT_THAT(edited->text, ::testing::HasSubstr("# the low-level runtime\n"));
    auto again = runtime::configure_crio(edited->text, "crio.conf", crio_gpu(false));
    ASSERT_TRUE(again);
    EXPECT_FALSE(again->changed);
}

// TestUpdateConfigDefaultRuntime and TestUpdateConfigRuntimes of the docker engine.
TEST(NvidiaCtkDocker, DefaultRuntimeIsSetOnlyWhenAsked) {
    struct C {
        std::string input;
        bool set_as_default;
        nlohmann::json expected_default;
    };
    for (const auto& c : std::vector<C>{{"", false, nullptr},
                                        {"", true, "gpu"},
                                        {R"({"default-runtime": "runsc"})", false, "runsc"},
                                        {R"({"default-runtime": "runsc"})", true, "gpu"}}) {
        runtime::DockerOptions o;
        o.runtime_name = "gpu";
        o.set_as_default = c.set_as_default;
        auto edited = runtime::configure_docker(c.input, "daemon.json", o);
        ASSERT_TRUE(edited) << edited.error().message;
        auto doc = nlohmann::json::parse(edited->text);
        EXPECT_EQ(doc.value("default-runtime", nlohmann::json()), c.expected_default) << c.input;
    }
}

TEST(NvidiaCtkDocker, RuntimesAreAddedOrReplacedAndOtherKeysKept) {
    struct C {
        std::string input;
        std::vector<std::pair<std::string, std::string>> add;
        nlohmann::json expected;
    };
    const std::vector<C> cases = {
        {"{}",
         {{"r1", "/opt/r/r1"}, {"r2", "/opt/r/r2"}},
         {{"runtimes", {{"r1", {{"path", "/opt/r/r1"}, {"args", nlohmann::json::array()}}},
                        {"r2", {{"path", "/opt/r/r2"}, {"args", nlohmann::json::array()}}}}}}},
        {R"({"runtimes": {"r1": {"path": "old", "args": ["--x"]}}})",
         {{"r1", "/opt/r/r1"}, {"r2", "/opt/r/r2"}},
         {{"runtimes", {{"r1", {{"path", "/opt/r/r1"}, {"args", nlohmann::json::array()}}},
                        {"r2", {{"path", "/opt/r/r2"}, {"args", nlohmann::json::array()}}}}}}},
        {R"({"runtimes": {"other": {"path": "elsewhere", "args": []}}})",
         {{"r1", "/opt/r/r1"}},
         {{"runtimes", {{"other", {{"path", "elsewhere"}, {"args", nlohmann::json::array()}}},
                        {"r1", {{"path", "/opt/r/r1"}, {"args", nlohmann::json::array()}}}}}}},
        {R"({"exec-opts": ["native.cgroupdriver=systemd"], "log-driver": "json-file", "log-opts": {"max-size": "10m"},
            "storage-driver": "overlay2"})",
         {{"r1", "/opt/r/r1"}},
         {{"exec-opts", {"native.cgroupdriver=systemd"}},
          {"log-driver", "json-file"},
          {"log-opts", {{"max-size", "10m"}}},
          {"storage-driver", "overlay2"},
          {"runtimes", {{"r1", {{"path", "/opt/r/r1"}, {"args", nlohmann::json::array()}}}}}}},
    };
    for (const auto& c : cases) {
        std::string text = c.input;
        for (const auto& [name, path] : c.add) {
            runtime::DockerOptions o;
            o.runtime_name = name;
            o.runtime_path = path;
            auto edited = runtime::configure_docker(text, "daemon.json", o);
            ASSERT_TRUE(edited) << edited.error().message;
            text = edited->text;
        }
        EXPECT_EQ(nlohmann::json::parse(text), c.expected) << c.input;
    }
}

TEST(NvidiaCtkDocker, NothingToAddLeavesTheTextAsItWas) {
    const std::string text = "{\n  \"runtimes\": {\"nvidia\": {\"path\": \"nvidia-container-runtime\", \"args\": []}}\n}\n";
    auto edited = runtime::configure_docker(text, "daemon.json", {});
    ASSERT_TRUE(edited);
    EXPECT_FALSE(edited->changed);
    EXPECT_EQ(edited->text, text);
}

TEST(NvidiaCtkDocker, CdiKeepsOtherFeaturesAndBadJsonNamesTheLine) {
    runtime::DockerOptions o;
    o.enable_cdi = true;
    auto edited = runtime::configure_docker("{\n  \"features\": {\"buildkit\": true}\n}\n", "daemon.json", o);
    ASSERT_TRUE(edited);
    auto doc = nlohmann::json::parse(edited->text);
    EXPECT_EQ(doc["features"], (nlohmann::json{{"buildkit", true}, {"cdi", true}}));
    EXPECT_EQ(doc["runtimes"]["nvidia"]["path"], "nvidia-container-runtime");
    EXPECT_THAT(edited->text, ::testing::HasSubstr("\n  \"features\""));  // the file's indentation
    auto bad = runtime::configure_docker("{\n  \"a\": 1,\n  \"b\": \n}\n", "/etc/docker/daemon.json", o);
    ASSERT_FALSE(bad);
    EXPECT_THAT(bad.error().message, ::testing::HasSubstr("/etc/docker/daemon.json:4:"));
    // A number too large for a double is refused (Docker's Go parser refuses it too), not a crash
    // (found by fuzz/targets/docker_daemon_json.cpp).
    auto huge = runtime::configure_docker("{\"log-level\": \"info\", \"x\": 1.5e99999}", "daemon.json", o);
    ASSERT_FALSE(huge);
    EXPECT_THAT(huge.error().message, ::testing::HasSubstr("daemon.json: not valid JSON: number overflow"));
    auto wrong = runtime::configure_docker(R"({"runtimes": []})", "daemon.json", o);
    ASSERT_FALSE(wrong);
    EXPECT_THAT(wrong.error().message, ::testing::HasSubstr("runtimes"));
}
