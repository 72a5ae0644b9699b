// The container runtime's TOML config (toolkit/config.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "support/process.h"
#include "toolkit/config.h"

using namespace kgpu;
using namespace kgpu::toolkit;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

TEST(RuntimeConfig, DefaultsAreNvidias) {
    auto c = parse_config("", "f.toml");
    ASSERT_TRUE(c);
    EXPECT_THAT(c->low_level_runtime, ElementsAre("runc", "crun"));
    EXPECT_TRUE(c->accept_envvar_when_unprivileged);
    EXPECT_FALSE(c->accept_volume_mounts);
    EXPECT_EQ(c->driver_root, "/");
    EXPECT_THAT(c->annotation_prefixes, ElementsAre("cdi.k8s.io/"));
}

TEST(RuntimeConfig, EveryKey) {
    auto c = parse_config(R"(low-level-runtime = "/usr/bin/crun"
driver-root = "/run/nvidia/driver"
dev-root = "/"
nvml-library = "/x/libnvidia-ml.so.1"
proc-root = "/host/proc"
log-file = "/var/log/kgpu-container-runtime.log"
log-level = "debug"
accept-nvidia-visible-devices-envvar-when-unprivileged = false
accept-nvidia-visible-devices-as-volume-mounts = true
annotation-prefixes = ["cdi.k8s.io/", "nvidia.cdi.k8s.io/"]
default-kind = "example.com/gpu"
hook-path = "/usr/local/kgpu/nvidia-cdi-hook"
ldconfig-path = "@/sbin/ldconfig.real"
disable-require = true
)",
                          "f.toml");
    ASSERT_TRUE(c) << c.error().message;
    EXPECT_THAT(c->low_level_runtime, ElementsAre("/usr/bin/crun"));
    EXPECT_EQ(c->driver_root, "/run/nvidia/driver");
    EXPECT_FALSE(c->accept_envvar_when_unprivileged);
    EXPECT_TRUE(c->accept_volume_mounts);
    EXPECT_EQ(c->annotation_prefixes.size(), 2u);
    EXPECT_EQ(c->default_kind, "example.com/gpu");
    EXPECT_TRUE(c->disable_require);
    // render_config writes what parse_config reads back.
    auto again = parse_config(render_config(*c), "rendered");
    ASSERT_TRUE(again) << again.error().message;
    EXPECT_EQ(render_config(*again), render_config(*c));
}

TEST(RuntimeConfig, BadFilesNameFileLineAndKey) {
    auto unknown = parse_config("driver-root = \"/\"\nlow-level-runtim = \"runc\"\n", "/etc/kgpu/x.toml");
    ASSERT_FALSE(unknown);
    EXPECT_THAT(unknown.error().message, HasSubstr("/etc/kgpu/x.toml:2: unknown key 'low-level-runtim'"));
    auto type = parse_config("\n\naccept-nvidia-visible-devices-as-volume-mounts = \"yes\"\n", "f.toml");
    ASSERT_FALSE(type);
    EXPECT_THAT(type.error().message, HasSubstr("f.toml:3: key 'accept-nvidia-visible-devices-as-volume-mounts': expected true or false"));
    auto syntax = parse_config("driver-root = /x\n", "f.toml");
    ASSERT_FALSE(syntax);
    EXPECT_THAT(syntax.error().message, HasSubstr("f.toml:1:"));
    EXPECT_FALSE(parse_config("driver-root = \"relative\"\n", "f.toml"));
    EXPECT_FALSE(parse_config("log-level = \"loud\"\n", "f.toml"));
    EXPECT_FALSE(parse_config("low-level-runtime = []\n", "f.toml"));
    EXPECT_FALSE(parse_config("default-kind = \"gpu\"\n", "f.toml"));
}

TEST(RuntimeConfig, LoadingMissingFiles) {
    test::TempDir dir;
    auto named = load_config(dir.path() + "/missing.toml");
    ASSERT_FALSE(named);  // named by KGPU_RUNTIME_CONFIG: must exist
    EXPECT_THAT(named.error().message, HasSubstr("KGPU_RUNTIME_CONFIG"));
    auto file = dir.write("rt.toml", "log-level = \"warn\"\n");
    auto loaded = load_config(file);
    ASSERT_TRUE(loaded);
    EXPECT_EQ(loaded->log_level, "warn");
    EXPECT_EQ(loaded->source, file);
}

// Issue #22 item 2: containerd passes the runtime neither env nor flag, so the config `kgpu runtime
// install` wrote is found through its record next to the installed binary; the environment
// still wins, and without a record the default path is read (DESIGN.md's fixed interface).
TEST(RuntimeConfig, TheInstallsRecordNamesTheFile) {
    test::TempDir dir;
    const std::string install_dir = dir.path() + "/usr/local/kgpu";
    const std::string file = dir.write("etc/custom/rt.toml", "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n");
    auto none = config_source("", install_dir);
    ASSERT_TRUE(none);
    EXPECT_EQ(none->path, kDefaultConfigPath);
    EXPECT_FALSE(none->required);

    const std::string record = dir.write("usr/local/kgpu/" + std::string(kConfigRecordName), file + "\n");
    auto recorded = config_source("", install_dir);
    ASSERT_TRUE(recorded) << recorded.error().message;
    EXPECT_EQ(recorded->path, file);
    EXPECT_EQ(recorded->chosen_by, record);
    EXPECT_TRUE(recorded->required);
    auto loaded = load_config(*recorded);
    ASSERT_TRUE(loaded) << loaded.error().message;
    EXPECT_FALSE(loaded->accept_envvar_when_unprivileged);
    EXPECT_EQ(loaded->source, file);

    auto env = config_source("/from/env.toml", install_dir);
    EXPECT_EQ(env->path, "/from/env.toml");
    EXPECT_EQ(env->chosen_by, "KGPU_RUNTIME_CONFIG");

    // The recorded file gone: an error naming it and the record, never NVIDIA's defaults.
    std::filesystem::remove(file);
    auto missing = load_config(*recorded);
    ASSERT_FALSE(missing);
    EXPECT_EQ(missing.error().code, Code::not_found);
    EXPECT_THAT(missing.error().message, HasSubstr(file));
    EXPECT_THAT(missing.error().message, HasSubstr("as recorded in " + record));

    // A record that is not one absolute path is refused.
    dir.write("usr/local/kgpu/" + std::string(kConfigRecordName), "relative.toml\n");
    auto bad = config_source("", install_dir);
    ASSERT_FALSE(bad);
    EXPECT_THAT(bad.error().message, HasSubstr(record + ": expected one line, the absolute path"));
}

TEST(RuntimeConfig, AFifoIsRefusedNotWaitedOn) {
    test::TempDir dir;
    const std::string fifo = dir.path() + "/rt.toml";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    auto r = load_config(fifo);
    ASSERT_FALSE(r);
    EXPECT_THAT(r.error().message, HasSubstr("is a FIFO (named pipe), expected a regular file"));
}

}  // namespace
