// Applying CDI container edits to an OCI spec (toolkit/oci_edit.h): text in, text or error out.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "toolkit/oci_edit.h"

using namespace kgpu;
using namespace kgpu::toolkit;
using ojson = nlohmann::ordered_json;
using ::testing::HasSubstr;

namespace {

const char* kSpec = R"({"ociVersion":"1.0.2","process":{"user":{"uid":1000,"gid":1000},"env":["PATH=/bin","NVIDIA_VISIBLE_DEVICES=0"],"cwd":"/"},
"root":{"path":"rootfs"},"mounts":[{"destination":"/proc","type":"proc","source":"proc"},{"destination":"/dev/shm","type":"tmpfs","source":"shm"},{"destination":"/dev","type":"tmpfs","source":"tmpfs"}],
"linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}]},"namespaces":[{"type":"pid"}]},"x-unknown":{"kept":[1,2.5,"x"]}})";

const ojson kEdits = ojson::parse(R"({
  "env": ["NVIDIA_VISIBLE_DEVICES=void", "EXTRA=1"],
  "deviceNodes": [{"path": "/dev/nvidia3", "hostPath": "/drv/dev/nvidia3", "type": "c", "major": 195, "minor": 3},
                  {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255, "permissions": "rw"}],
  "mounts": [{"hostPath": "/drv/usr/lib64/libcuda.so.550.54.15", "containerPath": "/usr/lib64/libcuda.so.550.54.15",
              "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"]}],
  "hooks": [{"hookName": "createContainer", "path": "/usr/local/kgpu/nvidia-cdi-hook", "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib64"]}]
})");

ojson applied(const char* spec = kSpec, const ojson& edits = kEdits) {
    auto out = apply_container_edits(spec, edits);
    EXPECT_TRUE(out) << out.error().message;
    return out ? ojson::parse(*out) : ojson{};
}

TEST(OciEdit, AppliesEveryKindOfEdit) {
    ojson s = applied();
    EXPECT_EQ(s["process"]["env"], ojson::parse(R"(["PATH=/bin","NVIDIA_VISIBLE_DEVICES=void","EXTRA=1"])"));
    ASSERT_EQ(s["linux"]["devices"].size(), 2u);
    EXPECT_EQ(s["linux"]["devices"][0], ojson::parse(R"({"path":"/dev/nvidia3","type":"c","major":195,"minor":3,"uid":1000,"gid":1000})"));
    EXPECT_EQ(s["linux"]["resources"]["devices"].back(),
              ojson::parse(R"({"allow":true,"type":"c","major":195,"minor":255,"access":"rw"})"));
    // Mounts ordered by depth (stable): /proc, /dev, then /dev/shm, then the library.
    std::vector<std::string> dests;
    for (const auto& m : s["mounts"]) dests.push_back(m["destination"]);
    EXPECT_THAT(dests, ::testing::ElementsAre("/proc", "/dev", "/dev/shm", "/usr/lib64/libcuda.so.550.54.15"));
    EXPECT_EQ(s["mounts"][3]["type"], "bind");
    EXPECT_EQ(s["hooks"]["createContainer"][0]["path"], "/usr/local/kgpu/nvidia-cdi-hook");
    EXPECT_EQ(s["x-unknown"], ojson::parse(R"({"kept":[1,2.5,"x"]})"));  // unknown fields survive
    EXPECT_EQ(s["root"]["path"], "rootfs");
}

TEST(OciEdit, IsIdempotent) {
    auto once = apply_container_edits(kSpec, kEdits);
    ASSERT_TRUE(once);
    auto twice = apply_container_edits(*once, kEdits);
    ASSERT_TRUE(twice);
    EXPECT_EQ(*once, *twice);
}

TEST(OciEdit, CreatesMissingSections) {
    ojson s = applied("{}");
    EXPECT_EQ(s["process"]["env"].size(), 2u);
    EXPECT_EQ(s["linux"]["devices"].size(), 2u);
    EXPECT_FALSE(s["linux"]["devices"][0].contains("uid"));  // no process.user: root's nodes
}

TEST(OciEdit, BadInputIsAnErrorNamingIt) {
    auto notjson = apply_container_edits("{\"process\":", kEdits);
    ASSERT_FALSE(notjson);
    EXPECT_THAT(notjson.error().message, HasSubstr("not JSON"));
    auto wrongtype = apply_container_edits(R"({"mounts":{}})", kEdits);
    ASSERT_FALSE(wrongtype);
    EXPECT_THAT(wrongtype.error().message, HasSubstr("mounts is not an array"));
    auto nonumbers = apply_container_edits("{}", ojson::parse(R"({"deviceNodes":[{"path":"/dev/nvidia9","hostPath":"/x/dev/nvidia9"}]})"));
    ASSERT_FALSE(nonumbers);
    EXPECT_THAT(nonumbers.error().message, HasSubstr("/x/dev/nvidia9 is not a character device"));
    auto badhook = apply_container_edits("{}", ojson::parse(R"({"hooks":[{"hookName":"whenever","path":"/x"}]})"));
    ASSERT_FALSE(badhook);
    EXPECT_THAT(badhook.error().message, HasSubstr("whenever"));
    EXPECT_FALSE(apply_container_edits("[]", kEdits));
    EXPECT_FALSE(apply_container_edits("{\"s\":\"\xff\"}", kEdits));  // invalid UTF-8
}

// Issue #22 item 5: NVIDIA's legacy prestart hook (CRI-O's hooks.d, Docker --gpus) is removed as
// NVIDIA's runtime removes it in its CDI modes: by the file name of its path, from prestart only.
TEST(OciEdit, RemovesNvidiasLegacyPrestartHookOnly) {
    ojson s = ojson::parse(R"({"hooks":{"prestart":[
        {"path":"/usr/bin/nvidia-container-runtime-hook","args":["nvidia-container-runtime-hook","prestart"]},
        {"path":"/usr/local/bin/other-hook"},
        {"path":"/usr/bin/nvidia-container-toolkit","args":["nvidia-container-toolkit","prestart"]},
        {"args":["no path"]}, 7],
      "createContainer":[{"path":"/usr/bin/nvidia-container-runtime-hook"}]}})");
    auto removed = remove_legacy_hooks(s);
    EXPECT_EQ(removed, (std::vector<std::string>{"/usr/bin/nvidia-container-runtime-hook", "/usr/bin/nvidia-container-toolkit"}));
    EXPECT_EQ(s["hooks"]["prestart"], ojson::parse(R"([{"path":"/usr/local/bin/other-hook"},{"args":["no path"]},7])"));
    EXPECT_EQ(s["hooks"]["createContainer"].size(), 1u);  // NVIDIA looks at prestart only
    ojson only = ojson::parse(R"({"hooks":{"prestart":[{"path":"nvidia-container-runtime-hook"}]},"x":1})");
    EXPECT_EQ(remove_legacy_hooks(only).size(), 1u);
    EXPECT_EQ(only, ojson::parse(R"({"hooks":{},"x":1})"));
    ojson odd = ojson::parse(R"({"hooks":{"prestart":{"path":"/usr/bin/nvidia-container-runtime-hook"}}})");
    EXPECT_TRUE(remove_legacy_hooks(odd).empty());  // not a list: runc refuses it
}

// Found by fuzz/targets/oci_spec (corpus crash-0a9f55ee...): a prestart list without NVIDIA's
// legacy hook came back with every hook moved out (nulls), so runc refused the container.
TEST(OciEdit, PrestartHooksWithoutTheLegacyHookAreLeftAsTheyAre) {
    const ojson original = ojson::parse(R"({"hooks":{"prestart":[
        {"path":"/usr/bin/nvidia-container-tumeinr-hook","args":["x","prestart"]},
        {"path":"/usr/local/bin/audit"}, {"path":"nvidia-contai.ner-toolkit"}]}})");
    ojson s = original;
    EXPECT_TRUE(remove_legacy_hooks(s).empty());
    EXPECT_EQ(s, original);
}

// Found by fuzz/targets/oci_spec (corpus crash-4b4be612...): a number beyond a double's range
// threw out of the parser instead of refusing the spec.
TEST(OciEdit, ANumberOutOfRangeIsRefusedNamingConfigJson) {
    auto r = parse_spec(R"({"process":{"user":{"uid":444444444444444444444444444e4444}}})");
    ASSERT_FALSE(r.has_value());
    EXPECT_TRUE(r.error().message.starts_with("config.json: not JSON")) << r.error().message;
}

TEST(OciEdit, DeepNestingIsRefused) {
    const std::string deep = "{\"x\":" + std::string(70000, '[') + std::string(70000, ']') + "}";
    auto r = parse_spec(deep);
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().message, HasSubstr("config.json: JSON nested deeper than 512 levels"));
}

}  // namespace
