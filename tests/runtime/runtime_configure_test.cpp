// `kgpu runtime configure` end to end on temp files: the cases of nvidia-ctk v1.20's configure
// command tests (cmd/nvidia-ctk/runtime/configure/configure_test.go; inputs and checks written
// here from their shapes), then kgpu's own: in-place edits, backups, owners and modes, the
// `containerd config dump` check with Debian's real containerd when it is installed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "support/process.h"
#include "support/files.h"

namespace fs = std::filesystem;
using kgpu::test::run_process;
using kgpu::test::RunResult;
using kgpu::test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

using kgpu::test::slurp;

const std::string kFixtures = std::string(KGPU_SOURCE_DIR) + "/tests/runtime/fixtures/";
const std::string kContainerd = "/usr/bin/containerd";

RunResult configure(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {KGPU_BINARY, "runtime", "configure"};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv);
}

toml::table toml_file(const std::string& path) { return toml::parse_file(path); }

unsigned mode_of(const std::string& path) {
    struct stat st {};
    ::stat(path.c_str(), &st);
    return st.st_mode & 07777;
}

// The config as containerd reads it (imports merged).
std::string dump(const std::string& config) {
    auto r = run_process({kContainerd, "--config", config, "config", "dump"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
}

// A test root like nvidia-ctk's: etc/... below a temp dir.
struct Root {
    TempDir dir;
    std::string p(const std::string& rel) const { return dir.path() + "/" + rel; }
};

// Issue #22: `--config` naming a FIFO hung forever (open waits for a writer); anything but a
// regular file is refused at once, naming it, and nothing is written.
TEST(RuntimeConfigureFiles, AFifoOrADirectoryIsRefusedAtOnce) {
    TempDir dir;
    const std::string fifo = dir.path() + "/config.toml";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    // `timeout` turns the old hang into a failure instead of a stuck suite.
    auto r = run_process({"/usr/bin/timeout", "20", KGPU_BINARY, "runtime", "configure", "--config", fifo, "--drop-in-config="});
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(fifo + " is a FIFO (named pipe), expected a regular file"));
    auto d = run_process({"/usr/bin/timeout", "20", KGPU_BINARY, "runtime", "configure", "--config", dir.path(), "--drop-in-config="});
    EXPECT_NE(d.exit_code, 0);
    EXPECT_THAT(d.err, HasSubstr("is a directory, expected a regular file"));
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(dir.path())) left.push_back(e.path().filename().string());
    EXPECT_EQ(left, std::vector<std::string>{"config.toml"});
}

}  // namespace

// ---- nvidia-ctk's TestConfigureLifecycle ----

TEST(NvidiaCtkConfigure, ContainerdExistingImportsGetTheDropInDirectory) {
    Root r;
    const std::string config = r.dir.write("etc/containerd/config.toml", "version = 2\nimports = [\"/srv/extra/*.toml\"]\n");
    ::chmod(config.c_str(), 0600);
    auto res = configure({"--runtime", "containerd", "--config", config, "--drop-in-config",
                          r.p("etc/containerd/conf.d/99-nvidia.toml")});
    ASSERT_EQ(res.exit_code, 0) << res.err;
    const auto doc = toml_file(config);
    const toml::table expected = toml::parse("version = 2\nimports = [\"/srv/extra/*.toml\", \"" +
                                             r.p("etc/containerd/conf.d") + "/*.toml\"]\n");
    EXPECT_TRUE(doc == expected) << slurp(config);
    EXPECT_EQ(mode_of(config), 0600u);
}

TEST(NvidiaCtkConfigure, ContainerdMissingConfigIsCreatedWithImportsAndTheDropIn) {
    Root r;
    const std::string config = r.p("etc/containerd/config.toml");
    const std::string drop_in = r.p("etc/containerd/conf.d/99-nvidia.toml");
    auto res = configure({"--runtime", "containerd", "--config", config, "--drop-in-config", drop_in});
    ASSERT_EQ(res.exit_code, 0) << res.err;
    const auto main = toml_file(config);
    EXPECT_EQ(main["version"].value<int64_t>(), 2);
    EXPECT_EQ(main["imports"][0].value<std::string>(), r.p("etc/containerd/conf.d") + "/*.toml");
    const auto drop = toml_file(drop_in);
    EXPECT_EQ(drop["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"]
                  .value<std::string>(),
              "/usr/bin/nvidia-container-runtime");
}

TEST(NvidiaCtkConfigure, ContainerdSetAsDefaultGoesIntoTheDropIn) {
    Root r;
    const std::string config = r.dir.write("etc/containerd/config.toml",
                                           "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n"
                                           "default_runtime_name = \"runc\"\n"
                                           "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n"
                                           "runtime_type = \"io.containerd.runc.v2\"\n"
                                           "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n"
                                           "BinaryName = \"/usr/bin/runc\"\n");
    const std::string drop_in = r.p("etc/containerd/conf.d/99-nvidia.toml");
    auto res = configure({"--runtime", "containerd", "--config", config, "--drop-in-config", drop_in, "--nvidia-set-as-default"});
    ASSERT_EQ(res.exit_code, 0) << res.err;
    EXPECT_TRUE(toml_file(config)["imports"].is_array());
    const auto drop = toml_file(drop_in);
    const auto c = drop["plugins"]["io.containerd.grpc.v1.cri"]["containerd"];
    EXPECT_EQ(c["default_runtime_name"].value<std::string>(), "nvidia");
    EXPECT_EQ(c["runtimes"]["nvidia"]["runtime_type"].value<std::string>(), "io.containerd.runc.v2");
    EXPECT_EQ(c["runtimes"]["nvidia"]["options"]["BinaryName"].value<std::string>(), "/usr/bin/nvidia-container-runtime");
    if (!fs::exists(kContainerd)) GTEST_SKIP() << "containerd not installed (scripts/setup --all installs it)";
    EXPECT_THAT(res.err, HasSubstr("checked the result with"));
    const std::string merged = dump(config);
    EXPECT_THAT(merged, HasSubstr("default_runtime_name = \"nvidia\""));
    EXPECT_THAT(merged, HasSubstr("BinaryName = \"/usr/bin/nvidia-container-runtime\""));
}

TEST(NvidiaCtkConfigure, ContainerdEnableCdiInTheDropIn) {
    Root r;
    const std::string drop_in = r.p("etc/containerd/conf.d/99-nvidia.toml");
    auto res = configure({"--runtime", "containerd", "--config", r.p("etc/containerd/config.toml"), "--drop-in-config",
                          drop_in, "--cdi.enabled"});
    ASSERT_EQ(res.exit_code, 0) << res.err;
    EXPECT_EQ(toml_file(drop_in)["plugins"]["io.containerd.grpc.v1.cri"]["enable_cdi"].value<bool>(), true);
}

TEST(NvidiaCtkConfigure, ContainerdCustomNameAndPathOnly) {
    Root r;
    const std::string drop_in = r.p("etc/containerd/conf.d/99-nvidia.toml");
    auto res = configure({"--runtime", "containerd", "--config", r.p("etc/containerd/config.toml"), "--drop-in-config",
                          drop_in, "--nvidia-runtime-name", "gpu", "--nvidia-runtime-path",
                          "/custom/path/nvidia-container-runtime"});
    ASSERT_EQ(res.exit_code, 0) << res.err;
    const auto drop = toml_file(drop_in);
    const auto rts = drop["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"];
    EXPECT_EQ(rts["gpu"]["options"]["BinaryName"].value<std::string>(), "/custom/path/nvidia-container-runtime");
    EXPECT_EQ(rts.as_table()->size(), 1u);  // no gpu-cdi / gpu-legacy
}

TEST(NvidiaCtkConfigure, CrioWithoutConfigWritesOnlyTheDropIn) {
    Root r;
    const std::string config = r.p("etc/crio/crio.conf");
    const std::string drop_in = r.p("etc/crio/conf.d/99-nvidia.toml");
    auto res = configure({"--runtime", "crio", "--config", config, "--drop-in-config", drop_in});
    ASSERT_EQ(res.exit_code, 0) << res.err;
    EXPECT_FALSE(fs::exists(config));
    const auto drop = toml_file(drop_in);
    EXPECT_EQ(drop["crio"]["runtime"]["runtimes"]["nvidia"]["runtime_path"].value<std::string>(),
              "/usr/bin/nvidia-container-runtime");
    EXPECT_EQ(drop["crio"]["runtime"]["runtimes"]["nvidia"]["runtime_type"].value<std::string>(), "oci");
    EXPECT_EQ(drop["crio"]["runtime"]["runtimes"].as_table()->size(), 1u);
}

TEST(NvidiaCtkConfigure, CrioDropInOverridesAnOldRuntimeAndLeavesTheConfig) {
    Root r;
    const std::string before = "[crio]\n[crio.runtime]\ndefault_runtime = \"runc\"\n\n[crio.runtime.runtimes.runc]\n"
                               "runtime_path = \"/usr/bin/runc\"\nruntime_type = \"oci\"\n\n[crio.runtime.runtimes.nvidia]\n"
                               "runtime_path = \"/old/path/nvidia-container-runtime\"\nruntime_type = \"oci\"\n";
    const std::string config = r.dir.write("etc/crio/crio.conf", before);
    const std::string drop_in = r.p("etc/crio/conf.d/99-nvidia.toml");
    auto res = configure({"--runtime", "crio", "--config", config, "--drop-in-config", drop_in, "--nvidia-set-as-default"});
    ASSERT_EQ(res.exit_code, 0) << res.err;
    EXPECT_EQ(slurp(config), before);
    const auto drop = toml_file(drop_in);
    EXPECT_EQ(drop["crio"]["runtime"]["default_runtime"].value<std::string>(), "nvidia");
    EXPECT_EQ(drop["crio"]["runtime"]["runtimes"]["nvidia"]["runtime_path"].value<std::string>(),
              "/usr/bin/nvidia-container-runtime");
    EXPECT_THAT(res.err, HasSubstr("systemctl restart crio"));
}

TEST(NvidiaCtkConfigure, DockerNewConfig) {
    Root r;
    const std::string config = r.p("etc/docker/daemon.json");
    auto res = configure({"--runtime", "docker", "--config", config});
    ASSERT_EQ(res.exit_code, 0) << res.err;
    const auto doc = nlohmann::json::parse(slurp(config));
    EXPECT_EQ(doc["runtimes"], (nlohmann::json{{"nvidia", {{"path", "nvidia-container-runtime"}, {"args", nlohmann::json::array()}}}}));
}

TEST(NvidiaCtkConfigure, DockerExistingConfigKeepsKeysAndModeAndSetsTheDefault) {
    Root r;
    const std::string config = r.dir.write(
        "etc/docker/daemon.json",
        "{\n    \"log-driver\": \"json-file\",\n    \"log-opts\": {\"max-size\": \"100m\"},\n    \"storage-driver\": \"overlay2\"\n}");
    ::chmod(config.c_str(), 0600);
    auto res = configure({"--runtime", "docker", "--config", config, "--nvidia-set-as-default"});
    ASSERT_EQ(res.exit_code, 0) << res.err;
    const auto doc = nlohmann::json::parse(slurp(config));
    EXPECT_EQ(doc["log-driver"], "json-file");
    EXPECT_EQ(doc["log-opts"]["max-size"], "100m");
    EXPECT_EQ(doc["storage-driver"], "overlay2");
    EXPECT_EQ(doc["default-runtime"], "nvidia");
    EXPECT_TRUE(doc["runtimes"].contains("nvidia"));
    EXPECT_EQ(mode_of(config), 0600u);
    EXPECT_THAT(res.err, HasSubstr("systemctl restart docker"));
}

TEST(NvidiaCtkConfigure, DockerEnableCdi) {
    Root r;
    const std::string config = r.p("etc/docker/daemon.json");
    auto res = configure({"--runtime", "docker", "--config", config, "--cdi.enabled"});
    ASSERT_EQ(res.exit_code, 0) << res.err;
    EXPECT_EQ(nlohmann::json::parse(slurp(config))["features"]["cdi"], true);
}

TEST(NvidiaCtkConfigure, OciHookFile) {
    Root r;
    const std::string hook = r.p("etc/containers/oci/hooks.d/99-nvidia.json");
    auto res = configure({"--config-mode", "oci-hook", "--oci-hook-path", hook});
    ASSERT_EQ(res.exit_code, 0) << res.err;
    const auto doc = nlohmann::json::parse(slurp(hook));
    EXPECT_EQ(doc["version"], "1.0.0");
    EXPECT_EQ(doc["stages"], nlohmann::json::array({"prestart"}));
    EXPECT_EQ(doc["hook"]["path"], "/usr/bin/nvidia-container-runtime-hook");
    EXPECT_EQ(doc["hook"]["args"], nlohmann::json::array({"nvidia-container-runtime-hook", "prestart"}));
    EXPECT_EQ(doc["when"]["always"], true);
}

TEST(NvidiaCtkConfigure, DryRunWritesNothing) {
    Root r;
    const std::string config = r.p("etc/containerd/config.toml");
    const std::string drop_in = r.p("etc/containerd/conf.d/99-nvidia.toml");
    auto res = configure({"--dry-run", "--runtime", "containerd", "--config", config, "--drop-in-config", drop_in});
    ASSERT_EQ(res.exit_code, 0) << res.err;
    EXPECT_FALSE(fs::exists(config));
    EXPECT_FALSE(fs::exists(drop_in));
    EXPECT_THAT(res.out, HasSubstr("+++ " + drop_in + " (kgpu)"));
    EXPECT_THAT(res.out, HasSubstr("+++ " + config + " (kgpu)"));
}

TEST(NvidiaCtkConfigure, InvalidRuntime) {
    auto res = configure({"--runtime", "invalid"});
    EXPECT_EQ(res.exit_code, 2);
    EXPECT_THAT(res.err, HasSubstr("unrecognized runtime 'invalid'"));
}

TEST(NvidiaCtkConfigure, InvalidConfigModeFallsBackToTheConfigFile) {
    Root r;
    const std::string config = r.p("etc/docker/daemon.json");
    auto res = configure({"--config-mode", "invalid", "--runtime", "docker", "--config", config});
    ASSERT_EQ(res.exit_code, 0) << res.err;
    EXPECT_THAT(res.err, HasSubstr("unsupported config mode"));
    EXPECT_TRUE(nlohmann::json::parse(slurp(config))["runtimes"].contains("nvidia"));
}

// TestConfigureCommandLineSource: the settings come from `containerd config dump` of a stand-in
// containerd that prints a fixed config.
TEST(NvidiaCtkConfigure, ContainerdConfigFromTheCommand) {
    Root r;
    const std::string bin = r.dir.write("bin/containerd",
                                        "#!/bin/sh\nif [ \"$1\" = config ] && [ \"$2\" = dump ]; then cat <<'EOF'\n"
                                        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n"
                                        "default_runtime_name = \"runc\"\n"
                                        "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n"
                                        "runtime_type = \"io.containerd.runc.v2\"\nEOF\nfi\n");
    ::chmod(bin.c_str(), 0755);
    const std::string config = r.dir.write("etc/containerd/config.toml", "version = 2\n");
    const std::string drop_in = r.p("etc/containerd/conf.d/99-nvidia.toml");
    auto res = configure({"--runtime", "containerd", "--config-source", "command", "--executable-path", bin, "--config",
                          config, "--drop-in-config", drop_in});
    ASSERT_EQ(res.exit_code, 0) << res.err;
    const auto drop = toml_file(drop_in);
    const auto rt = drop["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"];
    EXPECT_EQ(rt["runtime_type"].value<std::string>(), "io.containerd.runc.v2");  // copied from the dump's runc
    EXPECT_THAT(slurp(config), HasSubstr("*.toml"));
    EXPECT_THAT(res.err, HasSubstr("printed nothing"));  // the stand-in cannot check the result
}

// ---- kgpu's own ----

TEST(RuntimeConfigureCli, DefaultIsTheDropInAndEmptyDropInEditsInPlace) {
    Root r;
    const std::string config = r.dir.write("config.toml", slurp(kFixtures + "v2-systemd.toml"));
    auto in_place = configure({"--config", config, "--drop-in-config=", "--set-as-default", "--enable-cdi"});
    ASSERT_EQ(in_place.exit_code, 0) << in_place.err;
    const std::string once = slurp(config);
    EXPECT_THAT(once, HasSubstr("default_runtime_name = \"nvidia\""));
    EXPECT_THAT(once, HasSubstr("# required with the systemd cgroup driver"));  // comments kept
    EXPECT_THAT(once, Not(HasSubstr("imports")));
    auto again = configure({"--config", config, "--drop-in-config", "", "--set-as-default", "--enable-cdi"});
    ASSERT_EQ(again.exit_code, 0) << again.err;
    EXPECT_THAT(again.err, HasSubstr("already configured"));
    EXPECT_EQ(slurp(config), once);
}

TEST(RuntimeConfigureCli, BackupsNeverOverwriteAnOlderOneAndKeepOwnerAndMode) {
    Root r;
    const std::string original = slurp(kFixtures + "v2-systemd.toml");
    const std::string config = r.dir.write("config.toml", original);
    ::chmod(config.c_str(), 0640);
    const bool root = ::geteuid() == 0;
    if (root) {
        ASSERT_EQ(::chown(config.c_str(), 65534, 65534), 0);
    }
    auto first = configure({"--config", config, "--drop-in-config="});
    ASSERT_EQ(first.exit_code, 0) << first.err;
    const std::string after_first = slurp(config);
    auto second = configure({"--config", config, "--drop-in-config=", "--set-as-default"});
    ASSERT_EQ(second.exit_code, 0) << second.err;
    EXPECT_EQ(slurp(config + ".bak"), original);      // the pristine original survives
    EXPECT_EQ(slurp(config + ".bak.1"), after_first);  // the second run's backup
    EXPECT_THAT(second.err, HasSubstr(config + ".bak.1"));
    for (const std::string& f : {config, config + ".bak", config + ".bak.1"}) {
        EXPECT_EQ(mode_of(f), 0640u) << f;
        struct stat st {};
        ::stat(f.c_str(), &st);
        if (root) {
            EXPECT_EQ(st.st_uid, 65534u) << f;
        }
    }
    size_t files = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(r.dir.path())) ++files;
    EXPECT_EQ(files, 3u);  // no temporary left behind
}

TEST(RuntimeConfigureCli, DryRunPrintsADiffAndWritesNothing) {
    Root r;
    const std::string config = r.dir.write("config.toml", slurp(kFixtures + "v2-systemd.toml"));
    const std::string original = slurp(config);
    auto res = configure({"--config", config, "--drop-in-config", "", "--dry-run"});
    ASSERT_EQ(res.exit_code, 0) << res.err;
    EXPECT_THAT(res.out, HasSubstr("--- " + config));
    EXPECT_THAT(res.out, HasSubstr("+            BinaryName = \"/usr/bin/nvidia-container-runtime\""));
    EXPECT_EQ(slurp(config), original);
    EXPECT_FALSE(fs::exists(config + ".bak"));
    // Docker and CRI-O alike.
    const std::string daemon = r.dir.write("daemon.json", "{\"log-driver\": \"journald\"}\n");
    auto docker = configure({"--runtime", "docker", "--config", daemon, "--dry-run"});
    ASSERT_EQ(docker.exit_code, 0) << docker.err;
    EXPECT_THAT(docker.out, HasSubstr("+    \"runtimes\": {"));
    EXPECT_EQ(slurp(daemon), "{\"log-driver\": \"journald\"}\n");
    auto crio = configure({"--runtime", "crio", "--config", r.p("crio.conf"), "--drop-in-config", r.p("crio.d/99-nvidia.toml"),
                           "--dry-run"});
    ASSERT_EQ(crio.exit_code, 0) << crio.err;
    EXPECT_THAT(crio.out, HasSubstr("runtime_path = \"/usr/bin/nvidia-container-runtime\""));
    EXPECT_FALSE(fs::exists(r.p("crio.d")));
}

TEST(RuntimeConfigureCli, BrokenConfigIsLeftUntouchedAndReportedWithItsLine) {
    Root r;
    const std::string config = r.dir.write("config.toml", slurp(kFixtures + "broken.toml"));
    const std::string original = slurp(config);
    auto res = configure({"--config", config, "--drop-in-config", r.p("conf.d/99-nvidia.toml")});
    EXPECT_EQ(res.exit_code, 1);
    EXPECT_THAT(res.err, HasSubstr(config + ":4:"));
    EXPECT_EQ(slurp(config), original);
    EXPECT_FALSE(fs::exists(config + ".bak"));
    EXPECT_FALSE(fs::exists(r.p("conf.d")));
}

TEST(RuntimeConfigureCli, ContainerdReadsTheResultOfEveryVersionItKnows) {
    if (!fs::exists(kContainerd)) GTEST_SKIP() << "containerd not installed (scripts/setup --all installs it)";
    for (const std::string fixture : {"v2-systemd.toml", "v1-legacy.toml"}) {
        Root r;
        const std::string config = r.dir.write("config.toml", slurp(kFixtures + fixture));
        auto res = configure({"--config", config, "--drop-in-config", r.p("conf.d/99-nvidia.toml"), "--set-as-default",
                              "--enable-cdi"});
        ASSERT_EQ(res.exit_code, 0) << res.err;
        EXPECT_THAT(res.err, HasSubstr("checked the result with")) << fixture;
        const std::string merged = dump(config);
        EXPECT_THAT(merged, HasSubstr(".containerd.runtimes.nvidia.options]")) << fixture;
        EXPECT_THAT(merged, HasSubstr("BinaryName = \"/usr/bin/nvidia-container-runtime\"")) << fixture;
        EXPECT_THAT(merged, HasSubstr("default_runtime_name = \"nvidia\"")) << fixture;
        // Settings of the main config's CRI table survive the import's whole-table replacement.
        if (fixture == "v2-systemd.toml") {
            EXPECT_THAT(merged, HasSubstr("sandbox_image = \"registry.k8s.io/pause:3.9\""));
            EXPECT_THAT(merged, HasSubstr("SystemdCgroup = true"));
            EXPECT_TRUE(fs::exists(r.p("conf.d/99-nvidia.toml")));
        } else {
            // Version 1 has no imports: edited in place.
            EXPECT_THAT(res.err, HasSubstr("version 1 config"));
            EXPECT_FALSE(fs::exists(r.p("conf.d/99-nvidia.toml")));
        }
    }
}

TEST(RuntimeConfigureCli, Version3CannotBeCheckedByContainerd16AndSaysSo) {
    if (!fs::exists(kContainerd)) GTEST_SKIP() << "containerd not installed (scripts/setup --all installs it)";
    auto v = run_process({kContainerd, "--version"});
    if (v.out.find(" 1.") == std::string::npos) GTEST_SKIP() << "containerd 2.x reads version 3: " << v.out;
    Root r;
    const std::string config = r.dir.write("config.toml", slurp(kFixtures + "v3-containerd2.toml"));
    auto res = configure({"--config", config, "--drop-in-config", r.p("conf.d/99-nvidia.toml")});
    ASSERT_EQ(res.exit_code, 0) << res.err;
    EXPECT_THAT(res.err, HasSubstr("cannot read a version 3 config"));
    EXPECT_THAT(slurp(r.p("conf.d/99-nvidia.toml")), HasSubstr("io.containerd.cri.v1.runtime"));
}

TEST(RuntimeConfigureCli, AConfigContainerdRejectsIsNotWritten) {
    if (!fs::exists(kContainerd)) GTEST_SKIP() << "containerd not installed (scripts/setup --all installs it)";
    Root r;
    // Valid TOML that containerd cannot load (oom_score is an integer).
    const std::string before = "version = 2\noom_score = \"high\"\n";
    const std::string config = r.dir.write("config.toml", before);
    auto res = configure({"--config", config, "--drop-in-config", r.p("conf.d/99-nvidia.toml")});
    EXPECT_EQ(res.exit_code, 1);
    EXPECT_THAT(res.err, HasSubstr("containerd rejects the result"));
    EXPECT_EQ(slurp(config), before);
    EXPECT_FALSE(fs::exists(r.p("conf.d")));
}

TEST(RuntimeConfigureCli, FlagSpellingsOfNvidiaCtk) {
    for (const std::vector<std::string>& spelling :
         {std::vector<std::string>{"--runtime-path", "/opt/nv/rt", "--set-as-default", "--cdi.enable"},
          std::vector<std::string>{"--nvidia-runtime-path=/opt/nv/rt", "--nvidia-set-as-default", "--enable-cdi"},
          std::vector<std::string>{"--nvidia-runtime-path", "/opt/nv/rt", "--nvidia-set-as-default=true", "--cdi.enabled"}}) {
        Root r;
        std::vector<std::string> args = {"--runtime=containerd", "--config", r.p("config.toml"), "--drop-in-config",
                                         r.p("conf.d/99-nvidia.toml"), "--config-source=file"};
        args.insert(args.end(), spelling.begin(), spelling.end());
        auto res = configure(args);
        ASSERT_EQ(res.exit_code, 0) << res.err;
        const auto drop = toml_file(r.p("conf.d/99-nvidia.toml"));
        const auto cri = drop["plugins"]["io.containerd.grpc.v1.cri"];
        EXPECT_EQ(cri["enable_cdi"].value<bool>(), true);
        EXPECT_EQ(cri["containerd"]["default_runtime_name"].value<std::string>(), "nvidia");
        EXPECT_EQ(cri["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"].value<std::string>(), "/opt/nv/rt");
    }
}

TEST(RuntimeConfigureCli, BadOptionsAreUsageErrors) {
    Root r;
    const std::string config = r.dir.write("config.toml", "version = 2\n");
    EXPECT_EQ(configure({"--config", config, "--runtime-path", "relative/runtime"}).exit_code, 2);
    EXPECT_EQ(configure({"--config", config, "--drop-in-config", "relative.toml"}).exit_code, 2);
    EXPECT_EQ(configure({"--config", config, "--config-source", "etcd"}).exit_code, 2);
    auto docker = configure({"--runtime", "docker", "--config", r.p("daemon.json"), "--drop-in-config", r.p("x.json")});
    EXPECT_EQ(docker.exit_code, 2);
    EXPECT_THAT(docker.err, HasSubstr("does not support drop-in"));
}

// Issue #14: --dry-run's diff needed memory quadratic in the config's lines (a 40k-line config
// took 6.3 GB, 100k lines were OOM-killed). Required: 100k lines in < 10 s of CPU and < 300 MB;
// measured from the child's own accounting (getrusage of the waited-for child: peak RSS and CPU
// time, which a loaded machine does not inflate the way it does wall time). The child also runs
// under `ulimit -v` so a regression fails fast instead of swapping the machine.
TEST(RuntimeConfigureCli, DryRunOnAHundredThousandLinesIsLinear) {
    TempDir dir;
    std::string text = slurp(kFixtures + "v2-systemd.toml");
    for (int i = 0; text.size() < 4 * 1024 * 1024 && i < 25000; ++i)
        text += "[plugins.\"io.containerd.example.v1.p" + std::to_string(i) + "\"]\n  setting_a = \"value " +
                std::to_string(i) + "\"\n  # about plugin " + std::to_string(i) + "\n  setting_b = " + std::to_string(i) + "\n";
    ASSERT_GE(std::count(text.begin(), text.end(), '\n'), 100000);
    const std::string config = dir.write("config.toml", text);
    std::vector<std::string> argv = {"/bin/sh", "-c", "ulimit -v 2097152 && exec \"$0\" \"$@\"", KGPU_BINARY};
#if defined(__SANITIZE_ADDRESS__)
    argv = {KGPU_BINARY};  // AddressSanitizer reserves terabytes of address space: no ulimit -v
#endif
    for (const char* a : {"runtime", "configure", "--config", config.c_str(), "--drop-in-config=", "--dry-run", "--set-as-default", "--enable-cdi"})
        argv.push_back(a);
    auto r = run_process(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("+    enable_cdi = true"));
    EXPECT_THAT(r.out, HasSubstr("-      default_runtime_name = \"runc\""));
    EXPECT_EQ(slurp(config), text);  // dry run: nothing written
    rusage ru{};
    ASSERT_EQ(::getrusage(RUSAGE_CHILDREN, &ru), 0);
    const double cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    const long peak_mb = ru.ru_maxrss / 1024;  // kilobytes on Linux
    std::cout << "runtime configure --dry-run, 100k lines: " << cpu_s << " s CPU, peak RSS " << peak_mb << " MB\n";
    EXPECT_LT(cpu_s, 10.0);
    EXPECT_LT(peak_mb, 300);
}

// nvidia-ctk v1.20's default: without --drop-in-config the runtime goes to the drop-in
// /etc/containerd/conf.d/99-nvidia.toml (on the real host path, whatever --config says). A dry
// run names it in its diff and writes nothing anywhere: not the drop-in or its directory, not
// the config, no backup, no temporary file.
TEST(RuntimeConfigureCli, DryRunOfTheDefaultDropIn) {
    Root r;
    const std::string config = r.dir.write("config.toml", slurp(kFixtures + "v2-systemd.toml"));
    const std::string original = slurp(config);
    const std::string drop_in = "/etc/containerd/conf.d/99-nvidia.toml";
    const bool dir_existed = fs::exists("/etc/containerd/conf.d");
    const bool drop_in_existed = fs::exists(drop_in);
    const std::string drop_in_before = drop_in_existed ? slurp(drop_in) : "";
    auto res = configure({"--config", config, "--dry-run"});
    ASSERT_EQ(res.exit_code, 0) << res.err;
    EXPECT_THAT(res.out, HasSubstr("+++ " + drop_in + " (kgpu)"));
    EXPECT_THAT(res.out, HasSubstr("+imports = [\"/etc/containerd/conf.d/*.toml\"]"));
    EXPECT_THAT(res.out, HasSubstr("+            BinaryName = \"/usr/bin/nvidia-container-runtime\""));
    EXPECT_EQ(slurp(config), original);
    size_t files = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(r.dir.path())) ++files;
    EXPECT_EQ(files, 1u);  // the config only: no backup, no temporary file
    EXPECT_EQ(fs::exists("/etc/containerd/conf.d"), dir_existed);
    EXPECT_EQ(fs::exists(drop_in), drop_in_existed);
    if (drop_in_existed) {
        EXPECT_EQ(slurp(drop_in), drop_in_before);
    }
}
