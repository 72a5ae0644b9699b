#include "deviceplugin/config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <unistd.h>

#include <gtest/gtest.h>

#include "common/strings.h"

namespace kgpu::deviceplugin {
namespace {

using namespace std::chrono_literals;

std::function<const char*(const char*)> env_of(const std::map<std::string, std::string>& vars) {
    return [vars](const char* name) -> const char* {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
    };
}

std::string error_of(std::string_view yaml) {
    auto c = parse_config(yaml, "cfg.yaml");
    EXPECT_FALSE(c.has_value()) << yaml;
    return c ? std::string() : c.error().message;
}

TEST(DevicePluginConfig, DefaultsMirrorNvidia) {
    Config c;
    EXPECT_EQ(c.mig_strategy, MigStrategy::none);
    EXPECT_TRUE(c.fail_on_init_error);
    EXPECT_EQ(c.nvidia_driver_root, "/");
    EXPECT_EQ(c.dev_root(), "/");
    EXPECT_FALSE(c.pass_device_specs);
    EXPECT_EQ(c.device_list_strategy, std::vector{DeviceListStrategy::envvar});
    EXPECT_EQ(c.device_id_strategy, DeviceIdStrategy::uuid);
    EXPECT_EQ(c.cdi_annotation_prefix, "cdi.k8s.io/");
    EXPECT_EQ(c.kubelet_socket_path(), "/var/lib/kubelet/device-plugins/kubelet.sock");
    EXPECT_EQ(c.cdi_spec_dir, "/var/run/cdi");
    EXPECT_EQ(c.health.ignored_xids, (std::set<unsigned>{13, 31, 43, 45, 68, 109}));
    EXPECT_EQ(c.health.recovery_period, 300s);
    c.nvidia_driver_root = "/run/nvidia/driver";
    EXPECT_EQ(c.dev_root(), "/run/nvidia/driver");
    c.nvidia_dev_root = "/dev-root";
    EXPECT_EQ(c.dev_root(), "/dev-root");
    c.device_plugin_path = "/tmp/dp/";
    EXPECT_EQ(c.kubelet_socket_path(), "/tmp/dp/kubelet.sock");
    c.kubelet_socket = "/x/k.sock";
    EXPECT_EQ(c.kubelet_socket_path(), "/x/k.sock");
}

TEST(DevicePluginConfig, ParsesEveryKey) {
    auto c = parse_config(R"(version: v1
flags:
  migStrategy: mixed
  failOnInitError: false
  nvidiaDriverRoot: /run/nvidia/driver
  nvidiaDevRoot: /
  devicePluginPath: /tmp/dp
  kubeletSocket: /tmp/k.sock
  nvmlLibrary: /opt/libnvidia-ml.so.1
  cdiSpecDir: /etc/cdi
  plugin:
    passDeviceSpecs: true
    deviceListStrategy: [volume-mounts, cdi-cri, volume-mounts]
    deviceIDStrategy: index
    cdiAnnotationPrefix: example.com/
health:
  disabled: false
  ignoredXids: [13, 43]
  recoverableXids: [92]
  resetXids: [79]
  recoveryPeriod: 1m30s
resources:
  gpus: [{pattern: "*A100*", name: a100}]
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
      devices: [0, "GPU-abc"]
    - {name: nvidia.com/gpu, replicas: 2, devices: 3}
)",
                          "cfg.yaml");
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_EQ(c->mig_strategy, MigStrategy::mixed);
    EXPECT_FALSE(c->fail_on_init_error);
    EXPECT_EQ(c->nvidia_driver_root, "/run/nvidia/driver");
    EXPECT_EQ(c->dev_root(), "/");
    EXPECT_EQ(c->device_plugin_path, "/tmp/dp");
    EXPECT_EQ(c->kubelet_socket_path(), "/tmp/k.sock");
    EXPECT_EQ(c->nvml_library, "/opt/libnvidia-ml.so.1");
    EXPECT_EQ(c->cdi_spec_dir, "/etc/cdi");
    EXPECT_TRUE(c->pass_device_specs);
    EXPECT_EQ(c->device_list_strategy, (std::vector{DeviceListStrategy::volume_mounts, DeviceListStrategy::cdi_cri}));
    EXPECT_EQ(c->device_id_strategy, DeviceIdStrategy::index);
    EXPECT_EQ(c->cdi_annotation_prefix, "example.com/");
    EXPECT_EQ(c->health.ignored_xids, (std::set<unsigned>{13, 43}));
    EXPECT_EQ(c->health.recoverable_xids, (std::set<unsigned>{92}));
    EXPECT_EQ(c->health.reset_xids, (std::set<unsigned>{79}));
    EXPECT_EQ(c->health.recovery_period, 90s);
    ASSERT_EQ(c->resources.gpus.size(), 1u);
    EXPECT_EQ(c->resources.gpus[0].name, "nvidia.com/a100");  // qualified as NVIDIA does
    ASSERT_TRUE(c->sharing.time_slicing);
    const TimeSlicing& ts = *c->sharing.time_slicing;
    EXPECT_TRUE(ts.rename_by_default);
    EXPECT_TRUE(ts.fail_requests_greater_than_one);
    ASSERT_EQ(ts.resources.size(), 2u);
    EXPECT_EQ(ts.resources[0].replicas, 4u);
    EXPECT_FALSE(ts.resources[0].all_devices);
    EXPECT_EQ(ts.resources[0].device_ids, (std::vector<std::string>{"0", "GPU-abc"}));
    EXPECT_EQ(ts.resources[1].device_count, 3u);
    EXPECT_EQ(c->config_file, "cfg.yaml");
    EXPECT_TRUE(c->warnings.empty());
}

TEST(DevicePluginConfig, DeviceListStrategyAsStringOrCommaList) {
    auto one = parse_config("version: v1\nflags: {plugin: {deviceListStrategy: cdi-annotations}}\n", "f");
    ASSERT_TRUE(one.has_value()) << one.error().message;
    EXPECT_EQ(one->device_list_strategy, std::vector{DeviceListStrategy::cdi_annotations});
    auto csv = parse_config("version: v1\nflags: {plugin: {deviceListStrategy: \"envvar, cdi-cri\"}}\n", "f");
    ASSERT_TRUE(csv.has_value()) << csv.error().message;
    EXPECT_EQ(csv->device_list_strategy, (std::vector{DeviceListStrategy::envvar, DeviceListStrategy::cdi_cri}));
    EXPECT_NE(error_of("version: v1\nflags:\n  plugin:\n    deviceListStrategy: []\n").find("cfg.yaml:4:"),
              std::string::npos);
    std::string e = error_of("version: v1\nflags:\n  plugin:\n    deviceListStrategy: [envvar, nope]\n");
    EXPECT_NE(e.find("cfg.yaml:4: key 'flags.plugin.deviceListStrategy'"), std::string::npos) << e;
    EXPECT_NE(e.find("'nope'"), std::string::npos) << e;
}

TEST(DevicePluginConfig, VersionDefaultsToV1AsNvidia) {
    auto c = parse_config("flags: {migStrategy: single}\n", "cfg.yaml");
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_EQ(c->mig_strategy, MigStrategy::single);
    std::string e = error_of("version: v2\n");
    EXPECT_NE(e.find("cfg.yaml:1: key 'version': expected v1"), std::string::npos) << e;
    EXPECT_TRUE(parse_config("", "cfg.yaml").has_value());  // an empty config map entry: the defaults
    EXPECT_NE(error_of("- a\n- b\n").find("cfg.yaml"), std::string::npos);
}

TEST(DevicePluginConfig, EmptyBlocksAreAccepted) {
    auto c = parse_config("version: v1\nflags:\n  plugin:\nhealth:\nsharing:\nresources:\n", "f");
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_EQ(c->device_list_strategy, std::vector{DeviceListStrategy::envvar});
    EXPECT_FALSE(c->sharing.time_slicing.has_value());
}

// Issue #23 item 2: unknown keys are ignored, as NVIDIA's parser ignores them (a config that ran
// for years must not crash-loop after a migration), and recorded with file, line and key for the
// warning of a process that serves and the error of --check-config / kgpu doctor.
std::vector<std::string> unknown_of(std::string_view yaml) {
    auto c = parse_config(yaml, "cfg.yaml");
    EXPECT_TRUE(c.has_value()) << (c ? "" : c.error().message);
    std::vector<std::string> out;
    if (c)
        for (const auto& k : c->unknown_keys) out.push_back(unknown_key_error(k));
    return out;
}

TEST(DevicePluginConfig, UnknownKeysAreIgnoredAndNamedWithFileLineAndKey) {
    EXPECT_EQ(unknown_of("version: v1\nflags:\n  migStratgy: mixed\n"),
              std::vector<std::string>{"cfg.yaml:3: key 'flags.migStratgy': unknown key (expected one of: migStrategy, "
                                       "failOnInitError, nvidiaDriverRoot, nvidiaDevRoot, plugin, gfd, mpsRoot, "
                                       "gdrcopyEnabled, gdsEnabled, mofedEnabled, useNodeFeatureAPI, "
                                       "deviceDiscoveryStrategy, devicePluginPath, kubeletSocket, nvmlLibrary, "
                                       "cdiSpecDir, procRoot, applyResourceNaming, applyResourcePatterns)"});
    auto u = unknown_of("version: v1\nflags:\n  plugin:\n    passDeviceSpec: true\n");
    ASSERT_EQ(u.size(), 1u);
    EXPECT_EQ(u[0].rfind("cfg.yaml:4: key 'flags.plugin.passDeviceSpec': unknown key", 0), 0u) << u[0];
    u = unknown_of("version: v1\nhealthz: {}\nflags:\n  failOnInitErorr: false\n");
    ASSERT_EQ(u.size(), 2u);
    EXPECT_EQ(u[0].rfind("cfg.yaml:2: key 'healthz'", 0), 0u) << u[0];
    EXPECT_EQ(u[1].rfind("cfg.yaml:4: key 'flags.failOnInitErorr'", 0), 0u) << u[1];
    u = unknown_of("version: v1\nhealth:\n  recoveryPeriod: 5m\n  ignoreXids: [1]\n");
    ASSERT_EQ(u.size(), 1u);
    EXPECT_EQ(u[0].rfind("cfg.yaml:4: key 'health.ignoreXids'", 0), 0u) << u[0];
    u = unknown_of("version: v1\nsharing:\n  timeslicing:\n    resources: [{name: gpu, replicas: 2}]\n");
    ASSERT_EQ(u.size(), 1u);
    EXPECT_EQ(u[0].rfind("cfg.yaml:3: key 'sharing.timeslicing'", 0), 0u) << u[0];
    u = unknown_of("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 2, renam: x}\n");
    ASSERT_EQ(u.size(), 1u);
    EXPECT_EQ(u[0].rfind("cfg.yaml:5: key 'sharing.timeSlicing.resources[0].renam'", 0), 0u) << u[0];

    // What is ignored changes nothing else: the known keys around it apply; an unknown block is
    // not read (sharing.timeslicing shares nothing).
    auto c = parse_config("version: v1\nflags:\n  failOnInitErorr: false\n  migStrategy: mixed\nsharing:\n"
                          "  timeslicing:\n    resources: [{name: gpu, replicas: 2}]\n",
                          "cfg.yaml");
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_EQ(c->mig_strategy, MigStrategy::mixed);
    EXPECT_TRUE(c->fail_on_init_error);
    EXPECT_FALSE(c->sharing.time_slicing.has_value());
    ASSERT_EQ(c->unknown_keys.size(), 2u);
    EXPECT_EQ(c->unknown_keys[0].key, "flags.failOnInitErorr");
    EXPECT_EQ(c->unknown_keys[0].line, 3);
    EXPECT_EQ(c->unknown_keys[0].source, "cfg.yaml");
    // The service's warning says it is ignored and how to find it strictly.
    const std::string w = unknown_key_warning(c->unknown_keys[0]);
    EXPECT_EQ(w.rfind("cfg.yaml:3: key 'flags.failOnInitErorr': unknown key", 0), 0u) << w;
    EXPECT_NE(w.find("ignored"), std::string::npos) << w;
    EXPECT_NE(w.find("--check-config"), std::string::npos) << w;
    // Unknown keys are not settings the plugin ignores on purpose: not in `warnings`.
    auto r = resolve(*c, {}, {});
    ASSERT_TRUE(r.has_value()) << r.error().message;
    EXPECT_EQ(r->unknown_keys.size(), 2u);
    for (const auto& line : r->warnings) EXPECT_EQ(line.find("failOnInitErorr"), std::string::npos) << line;
}

TEST(DevicePluginConfig, MistypedAndInvalidValues) {
    std::string e = error_of("version: v1\nflags:\n  failOnInitError: maybe\n");
    EXPECT_NE(e.find("cfg.yaml:3: key 'flags.failOnInitError': expected a boolean"), std::string::npos) << e;
    e = error_of("version: v1\nflags:\n  migStrategy: foo\n");
    EXPECT_NE(e.find("cfg.yaml:3: key 'flags.migStrategy'"), std::string::npos) << e;
    EXPECT_NE(e.find("'foo'"), std::string::npos) << e;
    e = error_of("version: v1\nflags:\n  plugin:\n    deviceIDStrategy: serial\n");
    EXPECT_NE(e.find("cfg.yaml:4: key 'flags.plugin.deviceIDStrategy'"), std::string::npos) << e;
    e = error_of("version: v1\nflags:\n  nvidiaDriverRoot: [a, b]\n");
    EXPECT_NE(e.find("cfg.yaml:3: key 'flags.nvidiaDriverRoot': expected a string"), std::string::npos) << e;
    e = error_of("version: v1\nflags: 3\n");
    EXPECT_NE(e.find("key 'flags': expected a map"), std::string::npos) << e;
    e = error_of("version: v1\nhealth:\n  ignoredXids: [13, abc]\n");
    EXPECT_NE(e.find("cfg.yaml:3: key 'health.ignoredXids'"), std::string::npos) << e;
    e = error_of("version: v1\nhealth:\n  recoveryPeriod: 5x\n");
    EXPECT_NE(e.find("cfg.yaml:3: key 'health.recoveryPeriod'"), std::string::npos) << e;
    e = error_of("version: v1\nhealth:\n  recoveryPeriod: 0s\n");
    EXPECT_NE(e.find("at least 1s"), std::string::npos) << e;
    e = error_of("version: v1\nhealth:\n  ignoredXids: [92]\n");  // 92 is recoverable by default
    EXPECT_NE(e.find("XID 92"), std::string::npos) << e;
    e = error_of("version: v1\nflags: {migStrategy: none\n");
    EXPECT_NE(e.find("invalid YAML"), std::string::npos) << e;
}

TEST(DevicePluginConfig, TimeSlicingValidated) {
    std::string e = error_of("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 1}\n");
    EXPECT_NE(e.find("cfg.yaml:5: key 'sharing.timeSlicing.resources[0].replicas': replicas must be at least 2"),
              std::string::npos)
        << e;
    // `replica` is unknown (ignored), so `replicas` is missing: the error names both.
    e = error_of("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replica: 3}\n");
    EXPECT_NE(e.find("key 'sharing.timeSlicing.resources[0].replicas': expected a number of replicas"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("cfg.yaml:5: unknown key 'sharing.timeSlicing.resources[0].replica' (ignored)"), std::string::npos)
        << e;
    e = error_of("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {replicas: 3}\n");
    EXPECT_NE(e.find("expected the name of a resource to share"), std::string::npos) << e;
    // NVIDIA: "no resources specified".
    e = error_of("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n");
    EXPECT_NE(e.find("key 'sharing.timeSlicing.resources': missing"), std::string::npos) << e;
    e = error_of("version: v1\nsharing:\n  timeSlicing:\n    resources: []\n");
    EXPECT_NE(e.find("cfg.yaml:4: key 'sharing.timeSlicing.resources': expected at least one"), std::string::npos) << e;
}

// sharing.mps parses and validates with NVIDIA's rules.
TEST(DevicePluginConfig, MpsParsesWithNvidiasRulesAndIsNotServedYet) {
    const std::string ok = "version: v1\nflags: {mpsRoot: /run/nvidia/mps}\nsharing:\n  mps:\n    renameByDefault: true\n"
                           "    resources:\n    - name: gpu\n      replicas: 10\n";
    auto c = parse_config(ok, "cfg.yaml");
    ASSERT_TRUE(c.has_value()) << c.error().message;
    ASSERT_TRUE(c->sharing.mps);
    EXPECT_FALSE(c->sharing.time_slicing);
    EXPECT_TRUE(c->sharing.mps->rename_by_default);
    EXPECT_TRUE(c->sharing.mps->fail_requests_greater_than_one);  // NVIDIA's default for MPS
    EXPECT_FALSE(c->sharing.mps->fail_requests_set);
    ASSERT_EQ(c->sharing.mps->resources.size(), 1u);
    EXPECT_EQ(c->sharing.mps->resources[0].name, "nvidia.com/gpu");
    EXPECT_EQ(c->sharing.mps->resources[0].replicas, 10u);
    EXPECT_EQ(c->mps_root, "/run/nvidia/mps");
    auto r = resolve(*c, Overrides{}, Overrides{});
    ASSERT_TRUE(r.has_value()) << r.error().message;
    // Without flags.mpsRoot: /run/nvidia/mps, the host directory NVIDIA's chart passes (#18).
    auto dflt = parse_config("version: v1\nsharing:\n  mps:\n    resources: [{name: gpu, replicas: 2}]\n", "d");
    ASSERT_TRUE(dflt.has_value());
    EXPECT_EQ(dflt->mps_root, "/run/nvidia/mps");
    EXPECT_TRUE(resolve(*dflt, Overrides{}, Overrides{}).has_value());
    // Issue #23 item 4: NVIDIA forces failRequestsGreaterThanOne for MPS (NewConfig) and refuses
    // more than one MPS replica per request whatever it says (ValidateRequest): false is ignored,
    // with a warning naming the line.
    auto relaxed = parse_config("version: v1\nsharing:\n  mps:\n    failRequestsGreaterThanOne: false\n"
                                "    resources: [{name: gpu, replicas: 2}]\n",
                                "f");
    ASSERT_TRUE(relaxed.has_value()) << relaxed.error().message;
    EXPECT_TRUE(relaxed->sharing.mps->fail_requests_greater_than_one);
    EXPECT_TRUE(relaxed->sharing.mps->fail_requests_set);
    ASSERT_EQ(relaxed->warnings.size(), 1u);
    EXPECT_NE(relaxed->warnings[0].find("f:4: key 'sharing.mps.failRequestsGreaterThanOne': false is ignored"),
              std::string::npos)
        << relaxed->warnings[0];
    auto relaxed_resolved = resolve(*relaxed, {}, {});
    ASSERT_TRUE(relaxed_resolved.has_value()) << relaxed_resolved.error().message;
    EXPECT_EQ(relaxed_resolved->warnings, relaxed->warnings);
    // Time-slicing keeps the setting as written.
    auto ts = parse_config("version: v1\nsharing:\n  timeSlicing:\n    failRequestsGreaterThanOne: false\n"
                           "    resources: [{name: gpu, replicas: 2}]\n",
                           "f");
    ASSERT_TRUE(ts.has_value()) << ts.error().message;
    EXPECT_FALSE(ts->sharing.time_slicing->fail_requests_greater_than_one);
    EXPECT_TRUE(ts->warnings.empty());

    // Rejections: parsing ...
    std::string e = error_of("version: v1\nsharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: 1}\n");
    EXPECT_NE(e.find("cfg.yaml:5: key 'sharing.mps.resources[0].replicas': replicas must be at least 2"),
              std::string::npos)
        << e;
    e = error_of("version: v1\nsharing:\n  mps:\n    resources: []\n");
    EXPECT_NE(e.find("key 'sharing.mps.resources': expected at least one"), std::string::npos) << e;
    e = error_of("version: v1\nsharing:\n  mps:\n    resources:\n    - {name: \"Bad_Name!\", replicas: 2}\n");
    EXPECT_NE(e.find("key 'sharing.mps.resources[0].name'"), std::string::npos) << e;
    // ... and resolving (the settings NVIDIA's validateFlags and MPS options check).
    auto resolved_error = [](const std::string& yaml, const Overrides& flags = {}) {
        auto f = parse_config(yaml, "m.yaml");
        EXPECT_TRUE(f.has_value()) << (f ? "" : f.error().message);
        if (!f) return std::string();
        auto rr = resolve(*f, Overrides{}, flags);
        EXPECT_FALSE(rr.has_value()) << yaml;
        return rr ? std::string() : rr.error().message;
    };
    const std::string root = "version: v1\nflags: {mpsRoot: /run/nvidia/mps}\n";
    Overrides mixed;
    mixed.mig_strategy = MigStrategy::mixed;
    e = resolved_error(root + "sharing:\n  mps:\n    resources: [{name: gpu, replicas: 2}]\n", mixed);
    EXPECT_NE(e.find("not supported with migStrategy mixed"), std::string::npos) << e;
    e = resolved_error(root + "sharing:\n  mps:\n    resources: [{name: mig-1g.10gb, replicas: 2}]\n");
    EXPECT_NE(e.find("not supported for MIG devices"), std::string::npos) << e;
    Overrides single;
    single.mig_strategy = MigStrategy::single;
    single.apply_resource_naming = true;  // devices subsets are kgpu's extension (NVIDIA ignores them)
    e = resolved_error(root + "sharing:\n  mps:\n    resources: [{name: gpu, rename: s, replicas: 2, devices: [\"0:1\"]}]\n",
                       single);
    EXPECT_NE(e.find("'0:1' is a MIG device; MPS sharing is not supported for MIG devices"), std::string::npos) << e;
    e = resolved_error("version: v1\nflags: {mpsRoot: \"\"}\nsharing:\n  mps:\n    resources: [{name: gpu, replicas: 2}]\n");
    EXPECT_NE(e.find("m.yaml:4: key 'sharing.mps': MPS sharing needs flags.mpsRoot"), std::string::npos) << e;
    e = resolved_error(root + "sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2}]\n"
                              "  mps:\n    resources: [{name: gpu, replicas: 2}]\n");
    EXPECT_NE(e.find("timeSlicing and mps are both set"), std::string::npos) << e;
    // MPS_ROOT from the environment is enough.
    auto env = from_env(env_of({{"MPS_ROOT", "/var/mps"}}));
    ASSERT_TRUE(env.has_value());
    auto f = parse_config("version: v1\nsharing:\n  mps:\n    resources: [{name: gpu, replicas: 2}]\n", "m.yaml");
    ASSERT_TRUE(f.has_value());
    auto withenv = resolve(*f, *env, Overrides{});
    ASSERT_TRUE(withenv.has_value()) << withenv.error().message;
    EXPECT_EQ(withenv->mps_root, "/var/mps");
}

// Every key of NVIDIA's `version: v1` schema up to v0.20, in one file.
TEST(DevicePluginConfig, EveryNvidiaV020KeyParses) {
    auto c = parse_config(R"(version: v1
flags:
  migStrategy: single
  failOnInitError: true
  mpsRoot: /run/nvidia/mps
  nvidiaDriverRoot: /run/nvidia/driver
  nvidiaDevRoot: /
  gdrcopyEnabled: true
  gdsEnabled: true
  mofedEnabled: true
  useNodeFeatureAPI: false
  deviceDiscoveryStrategy: nvml
  plugin:
    passDeviceSpecs: true
    deviceListStrategy: [envvar, cdi-annotations]
    deviceIDStrategy: uuid
    cdiAnnotationPrefix: cdi.k8s.io/
    nvidiaCTKPath: /usr/local/nvidia/toolkit/nvidia-ctk
    containerDriverRoot: /driver-root
    sharedDevicesAllocationPolicy: packed
  gfd:
    oneshot: false
    noTimestamp: true
    sleepInterval: 60s
    outputFile: /etc/kubernetes/node-feature-discovery/features.d/gfd
    machineTypeFile: /sys/class/dmi/id/product_name
resources:
  gpus:
  - pattern: "*"
    name: gpu
  mig:
  - pattern: "1g.10gb"
    name: mig-1g.10gb
sharing:
  timeSlicing:
    renameByDefault: false
    failRequestsGreaterThanOne: false
    resources:
    - name: nvidia.com/gpu
      replicas: 4
imex:
  channelIDs: [0]
  required: true
)",
                          "v020.yaml");
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_EQ(c->mps_root, "/run/nvidia/mps");
    EXPECT_TRUE(c->gdrcopy_enabled);
    EXPECT_TRUE(c->gds_enabled);
    EXPECT_TRUE(c->mofed_enabled);
    EXPECT_EQ(c->use_node_feature_api, false);
    EXPECT_EQ(c->device_discovery_strategy, "nvml");
    EXPECT_EQ(c->nvidia_ctk_path, "/usr/local/nvidia/toolkit/nvidia-ctk");
    EXPECT_EQ(c->container_driver_root, "/driver-root");
    EXPECT_EQ(c->shared_allocation_policy, SharedAllocationPolicy::packed);
    ASSERT_TRUE(c->gfd);
    EXPECT_EQ(c->gfd->oneshot, false);
    EXPECT_EQ(c->gfd->no_timestamp, true);
    EXPECT_EQ(c->gfd->sleep_interval, 60s);
    EXPECT_EQ(c->gfd->output_file, "/etc/kubernetes/node-feature-discovery/features.d/gfd");
    EXPECT_EQ(c->gfd->machine_type_file, "/sys/class/dmi/id/product_name");
    ASSERT_EQ(c->resources.mig.size(), 1u);
    EXPECT_EQ(c->resources.mig[0].pattern, "1g.10gb");
    EXPECT_EQ(c->resources.mig[0].name, "nvidia.com/mig-1g.10gb");
    EXPECT_EQ(c->imex.channel_ids, std::vector<unsigned>{0});
    EXPECT_TRUE(c->imex.required);

    // Accepted, and what the device plugin does not use is said once each, with why.
    auto r = resolve(*c, Overrides{}, Overrides{});
    ASSERT_TRUE(r.has_value()) << r.error().message;
    const std::string all = [&] {
        std::string s;
        for (const auto& w : r->warnings) s += w + "\n";
        return s;
    }();
    EXPECT_EQ(r->warnings.size(), 4u) << all;
    EXPECT_NE(all.find("flags.gfd is gpu-feature-discovery's"), std::string::npos) << all;
    EXPECT_NE(all.find("flags.useNodeFeatureAPI"), std::string::npos) << all;
    EXPECT_NE(all.find("containerDriverRoot '/driver-root' is ignored"), std::string::npos) << all;
    EXPECT_NE(all.find("resources.gpus / resources.mig are ignored"), std::string::npos) << all;
    // Resolving twice does not repeat a warning (SIGHUP reloads).
    auto again = resolve(*r, Overrides{}, Overrides{});
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->warnings.size(), 4u);
}

TEST(DevicePluginConfig, NullValuesMeanNotSetAsInNvidia) {
    auto c = parse_config("version: v1\nflags:\n  migStrategy: null\n  mpsRoot:\n  plugin:\n    deviceIDStrategy: ~\n"
                          "  gfd:\n    sleepInterval: null\nimex:\n  channelIDs: null\n",
                          "f");
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_EQ(c->mig_strategy, MigStrategy::none);
    EXPECT_EQ(c->device_id_strategy, DeviceIdStrategy::uuid);
    EXPECT_TRUE(c->imex.channel_ids.empty());
}

TEST(DevicePluginConfig, ImexChannelIdsAreEmptyOrZero) {
    std::string e = error_of("version: v1\nimex:\n  channelIDs: [1]\n");
    EXPECT_NE(e.find("cfg.yaml:3: key 'imex.channelIDs': invalid IMEX channel IDs [1] (expected [] or [0]"),
              std::string::npos)
        << e;
    e = error_of("version: v1\nimex:\n  channelIDs: [0, 0]\n");
    EXPECT_NE(e.find("expected [] or [0]"), std::string::npos) << e;
    e = error_of("version: v1\nimex:\n  channelIDs: 0\n");
    EXPECT_NE(e.find("expected a list"), std::string::npos) << e;
    EXPECT_EQ(unknown_of("version: v1\nimex:\n  channels: [0]\n").size(), 1u);
    EXPECT_EQ(parse_imex_channel_ids(" 0 "), std::vector<unsigned>{0});
    EXPECT_EQ(parse_imex_channel_ids(""), std::vector<unsigned>{});
    EXPECT_FALSE(parse_imex_channel_ids("3").has_value());
    EXPECT_FALSE(parse_imex_channel_ids("x").has_value());
}

TEST(DevicePluginConfig, DeviceDiscoveryStrategyAndPluginPaths) {
    std::string e = error_of("version: v1\nflags:\n  deviceDiscoveryStrategy: wsl\n");
    EXPECT_NE(e.find("cfg.yaml:3: key 'flags.deviceDiscoveryStrategy'"), std::string::npos) << e;
    EXPECT_NE(e.find("auto, nvml or tegra"), std::string::npos) << e;
    e = error_of("version: v1\nflags:\n  plugin:\n    nvidiaCTKPath: nvidia-ctk\n");
    EXPECT_NE(e.find("expected an absolute path"), std::string::npos) << e;
    auto tegra = parse_config("version: v1\nflags: {deviceDiscoveryStrategy: tegra}\n", "f");
    ASSERT_TRUE(tegra.has_value());
    auto r = resolve(*tegra, Overrides{}, Overrides{});
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(r->warnings.size(), 1u);
    EXPECT_NE(r->warnings[0].find("NVML only"), std::string::npos);
    // The same driver root in and out of the container: nothing to say.
    auto same = parse_config("version: v1\nflags: {nvidiaDriverRoot: /run/nvidia/driver, plugin: {containerDriverRoot: "
                             "/run/nvidia/driver}}\n",
                             "f");
    ASSERT_TRUE(same.has_value());
    EXPECT_TRUE(resolve(*same, Overrides{}, Overrides{})->warnings.empty());
}

TEST(DevicePluginConfig, ResourcePatternsNeedPatternAndAValidName) {
    std::string e = error_of("version: v1\nresources:\n  gpus:\n  - name: gpu\n");
    EXPECT_NE(e.find("key 'resources.gpus[0].pattern': missing"), std::string::npos) << e;
    e = error_of("version: v1\nresources:\n  mig:\n  - {pattern: \"*\"}\n");
    EXPECT_NE(e.find("key 'resources.mig[0].name': missing"), std::string::npos) << e;
    e = error_of("version: v1\nresources:\n  gpus:\n  - {pattern: \"*\", name: \"Big GPU\"}\n");
    EXPECT_NE(e.find("cfg.yaml:4: key 'resources.gpus[0].name'"), std::string::npos) << e;
    auto on = parse_config("version: v1\nflags: {applyResourcePatterns: true}\nresources:\n  gpus: [{pattern: \"*\", name: g}]\n", "f");
    ASSERT_TRUE(on.has_value()) << on.error().message;
    EXPECT_TRUE(on->apply_resource_naming);
    EXPECT_TRUE(resolve(*on, Overrides{}, Overrides{})->warnings.empty());
}

// NVIDIA v0.14-v0.20 drop a non-default `rename` and any `devices` subset of sharing.timeSlicing /
// sharing.mps with a warning (DisableResourceNamingInConfig) and honour renameByDefault: kgpu
// does the same unless its resource naming extensions are opted in.
TEST(DevicePluginConfig, SharingRenameAndDevicesAreIgnoredAsNvidiaDoesUnlessOptedIn) {
    auto resolved = [](const std::string& yaml, bool naming = false) {
        auto f = parse_config(yaml, "s.yaml");
        EXPECT_TRUE(f.has_value()) << (f ? "" : f.error().message);
        Overrides flags;
        if (naming) flags.apply_resource_naming = true;
        return f ? resolve(*f, Overrides{}, flags) : Result<Config>(std::unexpected(f.error()));
    };
    auto joined = [](const Config& c) {
        std::string out;
        for (const auto& w : c.warnings) out += w + "\n";
        return out;
    };
    // devices: [0] without a rename: exit 2 before (a config NVIDIA accepts); now every GPU is shared.
    auto subset = resolved("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                           "    - name: gpu\n      devices: [0]\n      replicas: 2\n");
    ASSERT_TRUE(subset.has_value()) << subset.error().message;
    const auto& r0 = subset->sharing.time_slicing->resources[0];
    EXPECT_TRUE(r0.all_devices);
    EXPECT_TRUE(r0.device_ids.empty());
    EXPECT_EQ(subset->warnings.size(), 1u) << joined(*subset);
    EXPECT_NE(joined(*subset).find("s.yaml:6: key 'sharing.timeSlicing.resources[0].devices': [0] is ignored, as "
                                   "NVIDIA's plugin v0.14-v0.20 ignore it; set flags.applyResourceNaming"),
              std::string::npos)
        << joined(*subset);
    EXPECT_NE(joined(*subset).find("every device of nvidia.com/gpu is shared"), std::string::npos);
    // A rename: served under the resource's own name.
    auto renamed = resolved("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                            "    - name: gpu\n      rename: my-shared-gpu\n      replicas: 2\n");
    ASSERT_TRUE(renamed.has_value()) << renamed.error().message;
    EXPECT_EQ(renamed->sharing.time_slicing->resources[0].rename, "");
    EXPECT_NE(joined(*renamed).find("s.yaml:6: key 'sharing.timeSlicing.resources[0].rename': "
                                    "nvidia.com/my-shared-gpu is ignored"),
              std::string::npos)
        << joined(*renamed);
    EXPECT_NE(joined(*renamed).find("the shared devices are served as nvidia.com/gpu"), std::string::npos);
    // renameByDefault is honoured, and a count of devices dropped: all GPUs as nvidia.com/gpu.shared.
    auto by_default = resolved("version: v1\nflags: {mpsRoot: /run/nvidia/mps}\nsharing:\n  mps:\n"
                               "    renameByDefault: true\n    resources:\n"
                               "    - {name: gpu, rename: gpu.shared, devices: 2, replicas: 4}\n");
    ASSERT_TRUE(by_default.has_value()) << by_default.error().message;
    EXPECT_TRUE(by_default->sharing.mps->rename_by_default);
    EXPECT_TRUE(by_default->sharing.mps->resources[0].all_devices);
    EXPECT_FALSE(by_default->sharing.mps->resources[0].device_count.has_value());
    // rename equal to the default shared name is not "non-default": only the devices line.
    EXPECT_EQ(by_default->warnings.size(), 1u) << joined(*by_default);
    EXPECT_NE(joined(*by_default).find("key 'sharing.mps.resources[0].devices': 2 is ignored"), std::string::npos)
        << joined(*by_default);
    EXPECT_NE(describe(*by_default).find("sharing.mps.resources[0]: name=nvidia.com/gpu rename=- devices=all"),
              std::string::npos)
        << describe(*by_default);
    // Opted in: applied as written, no warning, and kgpu's own rule for subsets holds.
    auto opted = resolved("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                          "    - name: gpu\n      rename: my-shared-gpu\n      devices: [0]\n      replicas: 2\n",
                          true);
    ASSERT_TRUE(opted.has_value()) << opted.error().message;
    EXPECT_EQ(opted->sharing.time_slicing->resources[0].rename, "nvidia.com/my-shared-gpu");
    EXPECT_EQ(opted->sharing.time_slicing->resources[0].device_ids, std::vector<std::string>{"0"});
    EXPECT_TRUE(opted->warnings.empty()) << joined(*opted);
    auto strict = resolved("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                           "    - name: gpu\n      devices: [0]\n      replicas: 2\n",
                           true);
    ASSERT_FALSE(strict.has_value());
    EXPECT_NE(strict.error().message.find("without a new name"), std::string::npos) << strict.error().message;
    // The opt-in's names: flags.applyResourceNaming (and the older applyResourcePatterns),
    // KGPU_APPLY_RESOURCE_NAMING (and KGPU_APPLY_RESOURCE_PATTERNS).
    auto file = parse_config("version: v1\nflags: {applyResourceNaming: true}\n", "f");
    ASSERT_TRUE(file.has_value()) << file.error().message;
    EXPECT_TRUE(file->apply_resource_naming);
    auto env = from_env([](const char* n) { return std::string_view(n) == "KGPU_APPLY_RESOURCE_NAMING" ? "1" : nullptr; });
    ASSERT_TRUE(env.has_value());
    EXPECT_EQ(env->apply_resource_naming, true);
}

TEST(DevicePluginConfig, LoadConfigFile) {
    const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / ("kgpu-cfg-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto path = dir / "config.yaml";
    std::ofstream(path) << "version: v1\nflags:\n  migStrategy: single\n";
    auto c = load_config_file(path.string());
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_EQ(c->mig_strategy, MigStrategy::single);
    EXPECT_EQ(c->config_file, path.string());
    std::ofstream(path) << "version: v1\nflags:\n  bogus: 1\n  migStrategy: [none]\n";
    auto bad = load_config_file(path.string());
    ASSERT_FALSE(bad.has_value());
    EXPECT_NE(bad.error().message.find(path.string() + ":4: key 'flags.migStrategy'"), std::string::npos)
        << bad.error().message;
    EXPECT_NE(bad.error().message.find(path.string() + ":3: unknown key 'flags.bogus' (ignored)"), std::string::npos)
        << bad.error().message;
    auto missing = load_config_file((dir / "absent.yaml").string());
    ASSERT_FALSE(missing.has_value());
    EXPECT_EQ(missing.error().code, Code::not_found);
    std::filesystem::remove_all(dir);
}

TEST(DevicePluginConfig, FromEnvReadsEveryVariable) {
    auto o = from_env(env_of({{"MIG_STRATEGY", "single"},
                              {"FAIL_ON_INIT_ERROR", "false"},
                              {"NVIDIA_DRIVER_ROOT", "/run/nvidia/driver"},
                              {"NVIDIA_DEV_ROOT", "/devroot"},
                              {"PASS_DEVICE_SPECS", "true"},
                              {"DEVICE_LIST_STRATEGY", "envvar,cdi-annotations"},
                              {"DEVICE_ID_STRATEGY", "index"},
                              {"CDI_ANNOTATION_PREFIX", "x.io/"},
                              {"KUBELET_SOCKET", "/k.sock"},
                              {"CONFIG_FILE", "/etc/kgpu.yaml"},
                              {"DP_DISABLE_HEALTHCHECKS", "48, 79"},
                              {"DP_ENABLE_HEALTHCHECKS", "13"}}));
    ASSERT_TRUE(o.has_value()) << o.error().message;
    EXPECT_EQ(o->mig_strategy, MigStrategy::single);
    EXPECT_EQ(o->fail_on_init_error, false);
    EXPECT_EQ(o->nvidia_driver_root, "/run/nvidia/driver");
    EXPECT_EQ(o->nvidia_dev_root, "/devroot");
    EXPECT_EQ(o->pass_device_specs, true);
    EXPECT_EQ(o->device_list_strategy,
              (std::vector{DeviceListStrategy::envvar, DeviceListStrategy::cdi_annotations}));
    EXPECT_EQ(o->device_id_strategy, DeviceIdStrategy::index);
    EXPECT_EQ(o->cdi_annotation_prefix, "x.io/");
    EXPECT_EQ(o->kubelet_socket, "/k.sock");
    EXPECT_EQ(o->config_file, "/etc/kgpu.yaml");
    EXPECT_EQ(o->ignore_xids, (std::set<unsigned>{48, 79}));
    EXPECT_FALSE(o->health_disabled.has_value());
    EXPECT_EQ(o->enable_xids, (std::set<unsigned>{13}));

    auto more = from_env(env_of({{"MPS_ROOT", "/run/nvidia/mps"},
                                 {"GDRCOPY_ENABLED", "true"},
                                 {"GDS_ENABLED", "1"},
                                 {"MOFED_ENABLED", "false"},
                                 {"DEVICE_DISCOVERY_STRATEGY", "auto"},
                                 {"NVIDIA_CTK_PATH", "/usr/bin/nvidia-ctk"},
                                 {"CONTAINER_DRIVER_ROOT", "/driver-root"},
                                 {"IMEX_CHANNEL_IDS", "0"},
                                 {"IMEX_REQUIRED", "true"},
                                 {"KGPU_APPLY_RESOURCE_PATTERNS", "true"}}));
    ASSERT_TRUE(more.has_value()) << more.error().message;
    EXPECT_EQ(more->mps_root, "/run/nvidia/mps");
    EXPECT_EQ(more->gdrcopy_enabled, true);
    EXPECT_EQ(more->gds_enabled, true);
    EXPECT_EQ(more->mofed_enabled, false);
    EXPECT_EQ(more->device_discovery_strategy, "auto");
    EXPECT_EQ(more->nvidia_ctk_path, "/usr/bin/nvidia-ctk");
    EXPECT_EQ(more->container_driver_root, "/driver-root");
    EXPECT_EQ(more->imex_channel_ids, std::vector<unsigned>{0});
    EXPECT_EQ(more->imex_required, true);
    EXPECT_EQ(more->apply_resource_naming, true);
    // NVIDIA's first spellings win over the aliases.
    auto first = from_env(env_of({{"NVIDIA_CDI_HOOK_PATH", "/a/nvidia-cdi-hook"}, {"NVIDIA_CTK_PATH", "/b/nvidia-ctk"},
                                  {"DRIVER_ROOT_CTR_PATH", "/x"}, {"CONTAINER_DRIVER_ROOT", "/y"}}));
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(first->nvidia_ctk_path, "/a/nvidia-cdi-hook");
    EXPECT_EQ(first->container_driver_root, "/x");

    auto none = from_env(env_of({{"MIG_STRATEGY", ""}}));
    ASSERT_TRUE(none.has_value());
    EXPECT_FALSE(none->mig_strategy.has_value());
}

TEST(DevicePluginConfig, FromEnvErrorsNameTheVariable) {
    const std::pair<const char*, const char*> bad[] = {
        {"MIG_STRATEGY", "foo"},        {"FAIL_ON_INIT_ERROR", "yes please"}, {"PASS_DEVICE_SPECS", "2"},
        {"DEVICE_LIST_STRATEGY", "x"},  {"DEVICE_ID_STRATEGY", "serial"},     {"DP_DISABLE_HEALTHCHECKS", "13,abc"},
        {"DP_ENABLE_HEALTHCHECKS", "-1"}, {"DEVICE_LIST_STRATEGY", " , "}, {"GDS_ENABLED", "on"},
        {"IMEX_CHANNEL_IDS", "1"},        {"DEVICE_DISCOVERY_STRATEGY", "wsl"}, {"IMEX_REQUIRED", "maybe"},
    };
    for (const auto& [name, value] : bad) {
        auto o = from_env(env_of({{name, value}}));
        ASSERT_FALSE(o.has_value()) << name << "=" << value;
        EXPECT_EQ(o.error().code, Code::invalid_argument);
        EXPECT_NE(o.error().message.find(std::string("environment variable ") + name), std::string::npos)
            << o.error().message;
    }
}

TEST(DevicePluginConfig, HealthEnvSemantics) {
    for (const char* v : {"all", "xids", "ALL"}) {
        auto o = from_env(env_of({{"DP_DISABLE_HEALTHCHECKS", v}}));
        ASSERT_TRUE(o.has_value());
        auto c = resolve(Config{}, *o, Overrides{});
        ASSERT_TRUE(c.has_value());
        EXPECT_TRUE(c->health.disabled) << v;
        EXPECT_EQ(c->health.classify(79), XidClass::ignored);
    }
    auto o = from_env(env_of({{"DP_DISABLE_HEALTHCHECKS", "79,92"}, {"DP_ENABLE_HEALTHCHECKS", "13,92"}}));
    ASSERT_TRUE(o.has_value());
    auto c = resolve(Config{}, *o, Overrides{});
    ASSERT_TRUE(c.has_value());
    EXPECT_FALSE(c->health.disabled);
    EXPECT_EQ(c->health.classify(79), XidClass::ignored);       // disabled in addition
    EXPECT_EQ(c->health.classify(92), XidClass::recoverable);   // enable wins
    EXPECT_EQ(c->health.classify(13), XidClass::reset);         // un-ignored, unclassified: critical
    EXPECT_EQ(c->health.classify(31), XidClass::ignored);       // default list kept
    auto all = from_env(env_of({{"DP_ENABLE_HEALTHCHECKS", "all"}}));
    ASSERT_TRUE(all.has_value());
    auto c2 = resolve(Config{}, *all, Overrides{});
    ASSERT_TRUE(c2.has_value());
    EXPECT_TRUE(c2->health.ignored_xids.empty());
}

TEST(DevicePluginConfig, ClassifyXids) {
    HealthConfig h;
    EXPECT_EQ(h.classify(13), XidClass::ignored);
    EXPECT_EQ(h.classify(109), XidClass::ignored);
    EXPECT_EQ(h.classify(92), XidClass::recoverable);
    EXPECT_EQ(h.classify(94), XidClass::recoverable);
    EXPECT_EQ(h.classify(48), XidClass::reset);
    EXPECT_EQ(h.classify(79), XidClass::reset);
    EXPECT_EQ(h.classify(12345), XidClass::reset);
    EXPECT_EQ(to_string(XidClass::recoverable), "recoverable");
}

TEST(DevicePluginConfig, PrecedenceFlagOverEnvOverFile) {
    auto file = parse_config(
        "version: v1\nflags:\n  migStrategy: mixed\n  failOnInitError: false\n  nvidiaDriverRoot: /file\n"
        "  plugin: {deviceIDStrategy: index, passDeviceSpecs: true}\nhealth: {recoveryPeriod: 10m}\n",
        "f");
    ASSERT_TRUE(file.has_value());
    Overrides env;
    env.mig_strategy = MigStrategy::single;
    env.nvidia_driver_root = "/env";
    Overrides flags;
    flags.mig_strategy = MigStrategy::none;
    flags.device_list_strategy = std::vector{DeviceListStrategy::cdi_cri};
    flags.health_recovery_period = 30s;
    auto c = resolve(*file, env, flags);
    ASSERT_TRUE(c.has_value()) << c.error().message;
    EXPECT_EQ(c->mig_strategy, MigStrategy::none);        // flag
    EXPECT_EQ(c->nvidia_driver_root, "/env");             // env over file
    EXPECT_FALSE(c->fail_on_init_error);                  // file
    EXPECT_EQ(c->device_id_strategy, DeviceIdStrategy::index);
    EXPECT_TRUE(c->pass_device_specs);
    EXPECT_EQ(c->device_list_strategy, std::vector{DeviceListStrategy::cdi_cri});
    EXPECT_EQ(c->health.recovery_period, 30s);
    EXPECT_EQ(c->config_file, "f");
}

TEST(DevicePluginConfig, ResolveRejectsInconsistentResults) {
    Overrides flags;
    flags.cdi_annotation_prefix = "cdi.k8s.io";
    EXPECT_FALSE(resolve(Config{}, Overrides{}, flags).has_value());
    flags = Overrides{};
    flags.device_list_strategy = std::vector<DeviceListStrategy>{};
    EXPECT_FALSE(resolve(Config{}, Overrides{}, flags).has_value());
    flags = Overrides{};
    flags.nvidia_driver_root = "";
    EXPECT_FALSE(resolve(Config{}, Overrides{}, flags).has_value());
    flags = Overrides{};
    flags.health_recovery_period = 0s;
    auto r = resolve(Config{}, Overrides{}, flags);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, Code::invalid_argument);
    EXPECT_TRUE(resolve(Config{}, Overrides{}, Overrides{}).has_value());
}

TEST(DevicePluginConfig, Durations) {
    EXPECT_EQ(parse_duration("1s"), 1s);
    EXPECT_EQ(parse_duration("30s"), 30s);
    EXPECT_EQ(parse_duration("5m"), 300s);
    EXPECT_EQ(parse_duration("1h"), 3600s);
    EXPECT_EQ(parse_duration("1h30m"), 5400s);
    EXPECT_EQ(parse_duration("0s"), 0s);
    for (const char* bad : {"", "5", "s", "5 m", "-1s", "1.5s", "5ms", "1d", "m5"})
        EXPECT_FALSE(parse_duration(bad).has_value()) << bad;
    EXPECT_EQ(format_duration(300s), "5m");
    EXPECT_EQ(format_duration(90s), "1m30s");
    EXPECT_EQ(format_duration(3661s), "1h1m1s");
    EXPECT_EQ(format_duration(0s), "0s");
    for (auto d : {1s, 59s, 60s, 3600s, 7322s}) EXPECT_EQ(parse_duration(format_duration(d)), d);
    // Milliseconds: the same spelling for whole seconds, "ms" below (test periods).
    EXPECT_EQ(format_duration(std::chrono::milliseconds(300000)), "5m");
    EXPECT_EQ(format_duration(std::chrono::milliseconds(1000)), "1s");
    EXPECT_EQ(format_duration(std::chrono::milliseconds(300)), "300ms");
    EXPECT_EQ(format_duration(std::chrono::milliseconds(1500)), "1500ms");
    EXPECT_EQ(format_duration(std::chrono::milliseconds(0)), "0s");
}

TEST(DevicePluginConfig, ParsersAndBooleans) {
    for (const char* t : {"1", "t", "T", "TRUE", "true", "True"}) EXPECT_EQ(parse_bool(t), true) << t;
    for (const char* f : {"0", "f", "F", "FALSE", "false", "False"}) EXPECT_EQ(parse_bool(f), false) << f;
    EXPECT_FALSE(parse_bool("yes").has_value());
    EXPECT_EQ(parse_mig_strategy("mixed"), MigStrategy::mixed);
    EXPECT_FALSE(parse_mig_strategy("None").has_value());
    EXPECT_EQ(parse_device_list_strategies("cdi-cri, envvar,cdi-cri"),
              (std::vector{DeviceListStrategy::cdi_cri, DeviceListStrategy::envvar}));
    EXPECT_EQ(parse_xid_list(" 13, ,79"), (std::set<unsigned>{13, 79}));
    EXPECT_FALSE(parse_xid_list("0").has_value());
}

// A value other than the default, as a flag, variable or file would give it.
std::string sample(option::Bool, bool dflt) { return dflt ? "false" : "true"; }
std::string sample(option::MaybeBool, const std::optional<bool>&) { return "true"; }
std::string sample(option::Mig, MigStrategy) { return "mixed"; }
std::string sample(option::DeviceId, DeviceIdStrategy) { return "index"; }
std::string sample(option::SharedPolicy, SharedAllocationPolicy) { return "packed"; }
std::string sample(option::Discovery, const std::string&) { return "nvml"; }
std::string sample(option::DeviceLists, const std::vector<DeviceListStrategy>&) { return "cdi-cri,envvar"; }
std::string sample(option::Words, const std::vector<std::string>&) { return "a,b"; }
template <class Codec>
std::string sample(Codec, const std::string&) {
    return "/sample/path/";
}

// The file's YAML for a dotted key: "flags.plugin.passDeviceSpecs" -> nested maps.
std::string yaml_of(std::string_view key, const std::string& value) {
    std::string out, indent;
    size_t start = 0;
    for (size_t dot; (dot = key.find('.', start)) != std::string_view::npos; start = dot + 1) {
        out += indent + std::string(key.substr(start, dot - start)) + ":\n";
        indent += "  ";
    }
    return "version: v1\n" + out + indent + std::string(key.substr(start)) + ": \"" + value + "\"\n";
}

// Every setting of the table is read from each layer it declares (each flag text, each variable,
// each file key) and shown by describe() under its first key: a row added to options.h needs
// nothing else to be configurable.
TEST(DevicePluginOptions, EverySettingIsReadFromEachLayerItDeclares) {
    const Config defaults;
    int settings = 0;
    for_each_option([&](const OptionNames& names, auto codec, auto field, auto override_field, auto text_field,
                        auto shown) {
        using Codec = decltype(codec);
        ++settings;
        SCOPED_TRACE(std::string(names.field));
        const std::string text = sample(codec, defaults.*field);
        auto expected = Codec::parse(text);
        ASSERT_TRUE(expected.has_value()) << text;
        ASSERT_NE(*expected, defaults.*field);
        if (!names.flags.empty()) {
            OptionText given;
            if constexpr (Codec::list) (given.*text_field).push_back(text);
            else given.*text_field = text;
            Overrides flags;
            ASSERT_TRUE(parse_option_text(given, flags).has_value());
            EXPECT_EQ(flags.*override_field, *expected);
            auto c = resolve(Config{}, Overrides{}, flags);
            ASSERT_TRUE(c.has_value()) << c.error().message;
            EXPECT_EQ((*c).*field, *expected);
            if constexpr (std::is_same_v<decltype(shown), std::nullptr_t>) {
                const std::string key(names.keys.substr(0, names.keys.find(',')));
                EXPECT_NE(describe(*c).find(key + ": " + option::shown(*expected) + "\n"), std::string::npos)
                    << describe(*c);
            }
        }
        for (auto var : strings::split(names.env, ',')) {
            if (var.empty()) continue;
            auto o = from_env(env_of({{std::string(var), text}}));
            ASSERT_TRUE(o.has_value()) << o.error().message;
            EXPECT_EQ((*o).*override_field, *expected) << var;
        }
        // gpu-feature-discovery's spellings of the settings kgpu labels shares (takers gfd).
        for (auto var : strings::split(names.gfd_env, ',')) {
            if (var.empty()) continue;
            std::map<std::string, std::string> source;
            auto o = gfd_settings(OptionText{}, env_of({{std::string(var), text}}), &source);
            ASSERT_TRUE(o.has_value()) << o.error().message;
            EXPECT_EQ((*o).*override_field, *expected) << var;
            EXPECT_EQ(source[std::string(names.field)], "environment variable " + std::string(var));
        }
        for (auto key : strings::split(names.keys, ',')) {
            if (!key.starts_with("flags.")) continue;
            auto c = parse_config(yaml_of(key, text), "cfg.yaml");
            ASSERT_TRUE(c.has_value()) << c.error().message;
            EXPECT_EQ((*c).*field, *expected) << key;
            EXPECT_TRUE(c->unknown_keys.empty()) << key;
        }
    });
    EXPECT_GE(settings, 25);
}

// kgpu labels: a bad flag is reported before a bad GFD variable, whatever their rows' order in the
// table (migStrategy's row comes before failOnInitError's), and a flag wins over its variable.
TEST(DevicePluginConfig, GfdSettingsReportABadFlagBeforeABadVariable) {
    OptionText given;
    given.fail_on_init_error = "maybe";
    auto bad = gfd_settings(given, env_of({{"GFD_MIG_STRATEGY", "bogus"}}), nullptr);
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().message.find("--fail-on-init-error"), std::string::npos) << bad.error().message;
    given.fail_on_init_error = "false";
    given.mig_strategy = "mixed";
    std::map<std::string, std::string> source;
    auto ok = gfd_settings(given, env_of({{"GFD_MIG_STRATEGY", "bogus"}, {"GFD_FAIL_ON_INIT_ERROR", "true"}}), &source);
    ASSERT_TRUE(ok) << ok.error().message;
    EXPECT_EQ(ok->mig_strategy, MigStrategy::mixed);
    EXPECT_EQ(ok->fail_on_init_error, false);
    EXPECT_EQ(source["mig_strategy"], "--mig-strategy");
}

TEST(DevicePluginConfig, DescribeListsEffectiveValues) {
    Config c;
    c.device_list_strategy = {DeviceListStrategy::envvar, DeviceListStrategy::cdi_cri};
    const std::string d = describe(c);
    EXPECT_NE(d.find("flags.migStrategy: none\n"), std::string::npos) << d;
    EXPECT_NE(d.find("flags.failOnInitError: true\n"), std::string::npos) << d;
    EXPECT_NE(d.find("flags.plugin.deviceListStrategy: envvar,cdi-cri\n"), std::string::npos) << d;
    EXPECT_NE(d.find("flags.kubeletSocket: /var/lib/kubelet/device-plugins/kubelet.sock\n"), std::string::npos) << d;
    EXPECT_NE(d.find("health.ignoredXids: [13,31,43,45,68,109]\n"), std::string::npos) << d;
    EXPECT_NE(d.find("health.recoveryPeriod: 5m\n"), std::string::npos) << d;
    // Naming patterns are shown as patterns, not as a count that reads like a number of devices.
    EXPECT_NE(d.find("resources.gpus: (none)\n"), std::string::npos) << d;
    c.resources.gpus = {{"*T4*", "nvidia.com/t4"}};
    const std::string p = describe(c);
    EXPECT_NE(p.find("resources.gpus: \"*T4*\" -> nvidia.com/t4 (ignored: applyResourceNaming is false)\n"),
              std::string::npos)
        << p;
    EXPECT_NE(p.find("sharing.mps: off\n"), std::string::npos) << p;
    EXPECT_NE(p.find("imex.channelIDs: []\n"), std::string::npos) << p;
}

}  // namespace
}  // namespace kgpu::deviceplugin
