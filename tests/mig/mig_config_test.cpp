// mig-parted's configuration file: what it accepts and the errors it gives (NVIDIA/mig-parted
// api/spec/v1), and which GPUs an entry selects.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mig/config.h"

namespace kgpu::mig {
namespace {

using ::testing::HasSubstr;

// Entries in the GPU Operator's default-mig-parted-config style: a filter per GPU family.
const char* kOperatorStyle = R"(version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}
  all-1g.10gb:
    - device-filter: ["0x233010DE", "0x233110DE", "0x20B210DE", "0x20B510DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
    - device-filter: ["0x20B010DE", "0x20B110DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 4
  all-balanced:
    - device-filter: "0x20B710DE"
      devices: all
      mig-enabled: true
      mig-devices: {"1g.6gb": 2, "2g.12gb": 1}
  custom-config:
    - devices: [0, 1]
      mig-enabled: false
    - devices: [2]
      mig-enabled: true
      mig-devices: {"1g.10gb+me": 1, "3c.4g.40gb": 1}
)";

TEST(MigConfig, TheOperatorsFormatParsesAndSelects) {
    auto c = parse_config(kOperatorStyle, "config.yaml");
    ASSERT_TRUE(c) << c.error().message;
    EXPECT_EQ(c->configs.size(), 5u);
    auto e = select(*c, "all-1g.10gb");
    ASSERT_TRUE(e);
    ASSERT_EQ(e->size(), 2u);
    EXPECT_EQ((*e)[0].mig_devices.at("1g.10gb"), 7u);
    EXPECT_TRUE(matches((*e)[0], 3, 0x20B210DE, 0x147F10DE));
    EXPECT_FALSE(matches((*e)[0], 3, 0x20B010DE, 0));
    EXPECT_TRUE(matches((*e)[1], 3, 0x20B010DE, 0));
    auto custom = select(*c, "custom-config");
    ASSERT_TRUE(custom);
    EXPECT_TRUE(matches((*custom)[0], 1, 0x20B210DE, 0));
    EXPECT_FALSE(matches((*custom)[0], 2, 0x20B210DE, 0));
    EXPECT_FALSE((*custom)[0].mig_enabled);
    auto none = select(*c, "all-3g.40gb");
    ASSERT_FALSE(none);
    EXPECT_THAT(none.error().message, HasSubstr("selected mig-config not present: all-3g.40gb"));
    auto unnamed = select(*c, "");
    ASSERT_FALSE(unnamed);
    EXPECT_THAT(unnamed.error().message, HasSubstr("more than one config"));
}

TEST(MigConfig, ASubsystemQualifiedFilterNeedsBoth) {
    auto c = parse_config(R"(version: v1
mig-configs:
  only:
    - device-filter: "0x20B210DE:0x147F10DE"
      devices: all
      mig-enabled: false
)",
                          "f");
    ASSERT_TRUE(c) << c.error().message;
    auto e = select(*c, "");  // one config: no name needed
    ASSERT_TRUE(e);
    EXPECT_TRUE(matches((*e)[0], 0, 0x20B210DE, 0x147F10DE));
    EXPECT_FALSE(matches((*e)[0], 0, 0x20B210DE, 0x151F10DE));
}

TEST(MigConfig, BadFilesAreRefusedNamingTheKey) {
    struct Case {
        const char* text;
        const char* want;
    };
    const Case cases[] = {
        {"mig-configs: {a: [{devices: all, mig-enabled: false}]}\n", "missing 'version'"},
        {"version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\n", "unknown version: v2"},
        {"version: v1\nmig-configs: {}\n", "mig-configs: at least one config"},
        {"version: v1\nmig-configs: {a: []}\n", "at least one entry in 'a'"},
        {"version: v1\nmig-configs: {a: [{mig-enabled: false}]}\n", "mig-configs.a[0]: missing required field: devices"},
        {"version: v1\nmig-configs: {a: [{devices: all}]}\n", "missing required field: mig-enabled"},
        {"version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true}]}\n", "'mig-devices' when 'mig-enabled' is true"},
        {"version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, mig-devices: {1g.10gb: 1}}]}\n",
         "MIG devices included when 'mig-enabled' is false"},
        {"version: v1\nmig-configs: {a: [{devices: some, mig-enabled: false}]}\n", "invalid string input"},
        {"version: v1\nmig-configs: {a: [{devices: [-1], mig-enabled: false}]}\n", "devices: expected GPU indices"},
        {"version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {10gb: 1}}]}\n",
         "'10gb' is not a MIG profile name"},
        {"version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {1g.10gb: 0}}]}\n",
         "all counts for all MigProfiles are 0"},
        {"version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {1g.10gb: -2}}]}\n",
         "expected a count of 0 or more"},
        {"version: v1\nmig-configs: {a: [{device-filter: 20B2, devices: all, mig-enabled: false}]}\n",
         "'20B2' is not 0x<device id><vendor id>"},
        {"version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, colour: red}]}\n", "unexpected field: colour"},
        {"version: v1\nextra: 1\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\n", "unexpected field: extra"},
        {"version: v1\nmig-configs: [\n", "not YAML"},
    };
    for (const Case& c : cases) {
        auto r = parse_config(c.text, "bad.yaml");
        ASSERT_FALSE(r) << c.text;
        EXPECT_THAT(r.error().message, HasSubstr("bad.yaml: ")) << c.text;
        EXPECT_THAT(r.error().message, HasSubstr(c.want)) << c.text;
    }
}

TEST(MigConfig, ProfileNamesAsMigPartedSpellsThem) {
    for (const char* ok : {"1g.10gb", "7g.80gb", "1g.10gb+me", "1g.24gb+me.all", "1g.24gb-me", "3c.4g.40gb", "1g.24gb+gfx"})
        EXPECT_TRUE(valid_profile_name(ok)) << ok;
    for (const char* bad : {"", "1g", "1g.10", "g.10gb", "1g.0gb", "1g.10gb+", "1g.10gb+me.", "1g.10gb me", "9g.10gb"})
        EXPECT_FALSE(valid_profile_name(bad)) << bad;
}

}  // namespace
}  // namespace kgpu::mig
