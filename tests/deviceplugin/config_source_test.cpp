// Per-node configs by node label (issue #27 part 1): NVIDIA config-manager's choice (label,
// DEFAULT_CONFIG, FALLBACK_STRATEGIES), except that an unknown name falls back with a warning
// instead of ending the process.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "deviceplugin/config_source.h"
#include "support/process.h"

using namespace kgpu::deviceplugin;
namespace fs = std::filesystem;

TEST(ConfigSource, TheLabelThenTheDefaultThenTheFallbacksInOrder) {
    ConfigSource src;
    src.srcdir = "/cfg";
    const std::set<std::string> names = {"default", "ts4", "whole"};
    auto c = choose_config(src, names, "ts4");
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->name, "ts4");
    EXPECT_EQ(c->path, "/cfg/ts4");
    EXPECT_EQ(c->why, "node label nvidia.com/device-plugin.config=ts4");
    EXPECT_TRUE(c->warnings.empty());

    c = choose_config(src, names, "");  // fallback named
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->name, "default");

    src.default_config = "whole";
    c = choose_config(src, names, "");
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->name, "whole");

    // An unknown name: the default, with a warning naming the label and what exists.
    c = choose_config(src, names, "ts8");
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->name, "whole");
    ASSERT_EQ(c->warnings.size(), 1u);
    EXPECT_EQ(c->warnings[0], "node label nvidia.com/device-plugin.config=ts8: no config of that name in /cfg (it has: "
                              "default, ts4, whole); using the default");
}

TEST(ConfigSource, SingleEmptyAndNothingLeft) {
    ConfigSource src;
    src.srcdir = "/cfg";
    auto c = choose_config(src, {"only"}, "");
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->name, "only");
    EXPECT_EQ(c->why, "fallback single (the only config)");

    auto none = choose_config(src, {"a", "b"}, "");
    ASSERT_FALSE(none.has_value());
    EXPECT_EQ(none.error().message,
              "no config for this node: the node label nvidia.com/device-plugin.config is absent, DEFAULT_CONFIG is not "
              "set, and the fallbacks [named, single] found none among [a, b] in /cfg");

    src.fallbacks = {"single", "empty"};
    c = choose_config(src, {"a", "b"}, "");
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->name, "");
    EXPECT_EQ(c->path, "") << "the empty config: no file, the built-in defaults";

    src.fallbacks = {"nearest"};
    EXPECT_FALSE(choose_config(src, {"a"}, "").has_value());
    EXPECT_FALSE(check_fallbacks({"named", "nearest"}).has_value());
}

TEST(ConfigSource, NamesAreTheDirectorysFilesAsAConfigMapVolumeHasThem) {
    kgpu::test::TempDir dir;
    // A ConfigMap volume: the keys are links into ..data, which links to a timestamped directory.
    fs::create_directories(fs::path(dir.path()) / "..2026_12_02" );
    std::ofstream(fs::path(dir.path()) / "..2026_12_02" / "ts4") << "version: v1\n";
    std::ofstream(fs::path(dir.path()) / "..2026_12_02" / "default") << "version: v1\n";
    fs::create_directory_symlink("..2026_12_02", fs::path(dir.path()) / "..data");
    fs::create_symlink("..data/ts4", fs::path(dir.path()) / "ts4");
    fs::create_symlink("..data/default", fs::path(dir.path()) / "default");
    fs::create_directories(fs::path(dir.path()) / "subdir");
    auto names = config_names(dir.path());
    ASSERT_TRUE(names.has_value());
    EXPECT_EQ(*names, (std::set<std::string>{"default", "ts4"}));
    auto missing = config_names(dir.path() + "/nope");
    ASSERT_FALSE(missing.has_value());
    EXPECT_NE(missing.error().message.find("CONFIG_FILE_SRCDIR"), std::string::npos);
}

TEST(ConfigSource, LabelValues) {
    EXPECT_TRUE(valid_label_value("ts4"));
    EXPECT_TRUE(valid_label_value(""));
    EXPECT_TRUE(valid_label_value("a.b_c-d"));
    EXPECT_FALSE(valid_label_value("-a"));
    EXPECT_FALSE(valid_label_value("a b"));
    EXPECT_FALSE(valid_label_value(std::string(64, 'a')));
}

// The config-manager sidecar's steps (kgpu config-manager): the link, and the process to signal.
TEST(ConfigManagerSteps, TheLinkIsReplacedAtomicallyOnlyWhenItChanges) {
    kgpu::test::TempDir dir;
    const std::string a = dir.write("configs/a", "version: v1\n");
    const std::string b = dir.write("configs/b", "version: v1\n");
    const std::string dst = dir.path() + "/config.yaml";
    auto r = point_config_link(dst, a);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    EXPECT_TRUE(*r);
    EXPECT_EQ(fs::read_symlink(dst), a);
    r = point_config_link(dst, a);
    ASSERT_TRUE(r.has_value());
    EXPECT_FALSE(*r) << "the same config again is no change (no signal)";
    r = point_config_link(dst, b);
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(*r);
    EXPECT_EQ(fs::read_symlink(dst), b);
    r = point_config_link(dst, "/dev/null");  // the empty config, as NVIDIA's
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(*r);
    EXPECT_EQ(fs::read_symlink(dst), "/dev/null");
    for (const auto& e : fs::directory_iterator(dir.path()))
        EXPECT_FALSE(e.path().filename().string().starts_with(".config.yaml")) << "a temporary link left: " << e.path();
    auto bad = point_config_link(dir.path() + "/missing/config.yaml", a);
    ASSERT_FALSE(bad.has_value());
    EXPECT_NE(bad.error().message.find("missing/config.yaml"), std::string::npos);
}

TEST(ConfigManagerSteps, ProcessesByFirstWordBaseNameOrSubcommand) {
    kgpu::test::TempDir proc;
    auto add = [&](const std::string& pid, const std::string& cmdline) {
        proc.write(pid + "/cmdline", cmdline);
    };
    add("10", std::string("nvidia-device-plugin\0--config-file\0/config/config.yaml\0", 55));
    add("11", std::string("/usr/bin/nvidia-device-plugin\0", 30));
    add("12", std::string("/usr/bin/kgpu\0device-plugin\0--config-file=/etc/kgpu/config.yaml\0", 64));
    add("13", std::string("/usr/bin/kgpu\0labels\0", 21));
    add("14", "");                   // a kernel thread
    add("self", std::string("x\0", 2));  // not a pid
    EXPECT_EQ(find_processes(proc.path(), "nvidia-device-plugin", 0), (std::vector<int>{10, 11}));
    EXPECT_EQ(find_processes(proc.path(), "nvidia-device-plugin", 11), (std::vector<int>{10})) << "never itself";
    EXPECT_EQ(find_processes(proc.path(), "kgpu device-plugin", 0), (std::vector<int>{12}));
    EXPECT_TRUE(find_processes(proc.path() + "/nope", "kgpu", 0).empty());
    // The MPS daemon (20) forking nvidia-cuda-mps-control: the child (21) has its command line
    // until it execs; only the parent is signalled (SIGHUP would kill the child).
    add("20", std::string("/usr/bin/kgpu\0mps-control-daemon\0--config-file=/config/config.yaml\0", 67));
    proc.write("20/stat", "20 (kgpu) S 1 20 20 0 -1 4194560 0 0");
    add("21", std::string("/usr/bin/kgpu\0mps-control-daemon\0--config-file=/config/config.yaml\0", 67));
    proc.write("21/stat", "21 (kgpu) R 20 20 20 0 -1 4194560 0 0");
    add("22", std::string("/usr/bin/kgpu\0mps-control-daemon\0", 33));
    proc.write("22/stat", "22 (kgpu) x) S 7 22 22 0 -1 4194560 0 0");  // a command with ") " in it
    EXPECT_EQ(find_processes(proc.path(), "kgpu mps-control-daemon", 0), (std::vector<int>{20, 22}));
}

// A process that exits while its command line is read fails the read (ESRCH on the real /proc);
// a cmdline that is a directory fails it the same way here (EISDIR). It is skipped: the stream
// iterator this once read with threw out of the config-manager instead.
TEST(ConfigManagerSteps, ACommandLineThatCannotBeReadIsSkipped) {
    kgpu::test::TempDir proc;
    std::filesystem::create_directories(proc.path() + "/30/cmdline");
    proc.write("31/cmdline", std::string("nvidia-device-plugin\0", 21));
    EXPECT_EQ(find_processes(proc.path(), "nvidia-device-plugin", 0), (std::vector<int>{31}));
}

// The MPS DaemonSet's init container with the manifests' one config: linked without an API server
// (none is configured here), since no label could pick another; with two configs it needs one.
TEST(ConfigManagerSteps, OneshotWithOneConfigNeedsNoApiServer) {
    kgpu::test::TempDir dir;
    dir.write("configs/config.yaml", "version: v1\n");
    const std::string dst = dir.path() + "/config/config.yaml";
    std::filesystem::create_directories(dir.path() + "/config");
    const std::vector<std::string> argv = {KGPU_BINARY, "config-manager", "--oneshot", "--send-signal=false",
                                           "--node-name", "node-1", "--config-file-srcdir", dir.path() + "/configs",
                                           "--config-file-dst", dst, "--default-config", "config.yaml"};
    const std::map<std::string, std::string> no_api = {{"KUBECONFIG", ""}, {"KUBERNETES_SERVICE_HOST", ""}};
    auto r = kgpu::test::run_process(argv, no_api);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(std::filesystem::read_symlink(dst).string(), dir.path() + "/configs/config.yaml");
    EXPECT_NE(r.err.find("not asking the API server"), std::string::npos) << r.err;
    dir.write("configs/ts4", "version: v1\n");
    r = kgpu::test::run_process(argv, no_api);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("no API server"), std::string::npos) << r.err;
}
