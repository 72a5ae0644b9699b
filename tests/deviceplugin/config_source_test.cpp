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
