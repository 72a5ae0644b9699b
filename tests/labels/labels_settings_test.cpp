// kgpu labels' own settings (deviceplugin/options.h, KGPU_GFD_OPTIONS): every row reaches the
// settings from its flag, its GFD variable and its config-file key, with the flag over the
// variable and either over the file, so that a new row needs no other plumbing.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <string_view>
#include <type_traits>

#include "cli/labels.h"
#include "support/process.h"

namespace {

// A value of each type the table has, and whether a setting holds it.
std::string gfd_sample(std::type_identity<bool>) { return "true"; }
std::string gfd_sample(std::type_identity<std::string>) { return "/tmp/kgpu-gfd-sample"; }
std::string gfd_sample(std::type_identity<std::chrono::seconds>) { return "30s"; }
std::string gfd_other(std::type_identity<bool>) { return "false"; }
std::string gfd_other(std::type_identity<std::string>) { return "/tmp/kgpu-gfd-other"; }
std::string gfd_other(std::type_identity<std::chrono::seconds>) { return "45s"; }
bool holds_sample(bool v) { return v; }
bool holds_sample(const std::string& v) { return v == "/tmp/kgpu-gfd-sample"; }
bool holds_sample(const std::optional<std::chrono::milliseconds>& v) { return v == std::chrono::seconds(30); }

TEST(LabelsSettings, EveryGfdSettingComesFromItsFlagItsVariableAndItsFileKey) {
    kgpu::test::TempDir dir;
    using kgpu::cli::LabelsOptions;
    using kgpu::cli::resolve_labels_settings;
    auto none = [](const char*) -> const char* { return nullptr; };
#define KGPU_GFD_CHECK(field, type, key, flags, env, help)                                                        \
    {                                                                                                             \
        SCOPED_TRACE(#field);                                                                                     \
        const std::string text = gfd_sample(std::type_identity<type>{});                                          \
        const std::string other = gfd_other(std::type_identity<type>{});                                          \
        auto variable = [&](const char* name) -> const char* {                                                    \
            return std::string_view(name) == env ? text.c_str() : nullptr;                                        \
        };                                                                                                        \
        auto by_env = resolve_labels_settings(LabelsOptions{}, variable);                                         \
        ASSERT_TRUE(by_env) << by_env.error().message;                                                            \
        EXPECT_FALSE(holds_sample(resolve_labels_settings(LabelsOptions{}, none)->field)) << "the default";       \
        EXPECT_TRUE(holds_sample(by_env->field)) << env;                                                          \
        LabelsOptions flag;                                                                                       \
        flag.field = text;                                                                                        \
        auto by_flag = resolve_labels_settings(flag, [&](const char* name) -> const char* {                       \
            return std::string_view(name) == env ? other.c_str() : nullptr;                                       \
        });                                                                                                       \
        ASSERT_TRUE(by_flag) << by_flag.error().message;                                                          \
        EXPECT_TRUE(holds_sample(by_flag->field)) << flags << " over " << env;                                    \
        LabelsOptions file;                                                                                       \
        file.config_file = dir.write(#field ".yaml", std::string("version: v1\nflags:\n  gfd:\n    ") + key +     \
                                                         ": " + text + "\n");                                     \
        auto by_file = resolve_labels_settings(file, none);                                                       \
        ASSERT_TRUE(by_file) << by_file.error().message;                                                          \
        ASSERT_TRUE(kgpu::cli::load_label_options(*by_file));                                                    \
        EXPECT_TRUE(holds_sample(by_file->field)) << "flags.gfd." << key;                                         \
        file.field = other;                                                                                       \
        auto file_and_flag = resolve_labels_settings(file, none);                                                 \
        ASSERT_TRUE(file_and_flag) << file_and_flag.error().message;                                              \
        ASSERT_TRUE(kgpu::cli::load_label_options(*file_and_flag));                                               \
        EXPECT_FALSE(holds_sample(file_and_flag->field)) << flags << " over flags.gfd." << key;                   \
    }
    KGPU_GFD_OPTIONS(KGPU_GFD_CHECK)
#undef KGPU_GFD_CHECK
}

// A bad value names the flag or the variable it came from (the table's first spelling).
TEST(LabelsSettings, ABadGfdValueNamesWhereItCameFrom) {
    kgpu::cli::LabelsOptions o;
    o.oneshot = "maybe";
    auto s = kgpu::cli::resolve_labels_settings(o, [](const char*) -> const char* { return nullptr; });
    ASSERT_FALSE(s);
    EXPECT_EQ(s.error().message, "--oneshot 'maybe': expected true or false");
    auto e = kgpu::cli::resolve_labels_settings({}, [](const char* n) -> const char* {
        return std::string_view(n) == "GFD_SLEEP_INTERVAL" ? "soon" : nullptr;
    });
    ASSERT_FALSE(e);
    EXPECT_EQ(e.error().message, "environment variable GFD_SLEEP_INTERVAL: --sleep-interval 'soon': expected a positive "
                                 "duration such as 60s, 1m30s, 5m or 'infinite'");
    o = {};
    o.output_file = "";  // given empty: stdout, and given
    auto out = kgpu::cli::resolve_labels_settings(o, [](const char*) -> const char* { return nullptr; });
    ASSERT_TRUE(out);
    EXPECT_EQ(out->output_file, "");
    EXPECT_TRUE(out->given.contains("output_file"));
}

}  // namespace
