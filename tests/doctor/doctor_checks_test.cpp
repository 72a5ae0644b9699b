// `kgpu doctor` checks against fake hosts (tests/doctor/hosts/healthy, broken one way per test)
// and the NVML simulator loaded in-process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "common/elf.h"
#include "doctor/checks.h"
#include "doctor/doctor.h"
#include "doctor/kube_api.h"
#include "toolkit/devchar.h"
#include "doctor/host.h"
#include "fake_host.h"
#include "support/fake_device_plugin.h"
#include "support/fake_kubelet.h"
#include "support/files.h"

using kgpu::doctor::CheckResult;
using kgpu::doctor::Report;
using kgpu::doctor::Status;
using kgpu::test::FakeHost;
using ::testing::HasSubstr;

namespace {

using kgpu::test::slurp;

std::string sim_node(const std::string& name) { return std::string(KGPU_SOURCE_DIR) + "/sim/nodes/" + name; }

struct Doc {
    explicit Doc(FakeHost& h) : host(h) {}
    FakeHost& host;
    std::string node = sim_node("t4x4.yaml");
    std::string events;  // fault commands applied at init
    std::string library = KGPU_SIM_LIBRARY;
    kgpu::doctor::Options opt;

    Report operator()() {
        kgpu::test::TempDir tmp;
        ::setenv("KGPU_SIM_NODE", node.c_str(), 1);
        if (!events.empty()) ::setenv("KGPU_SIM_EVENTS", tmp.write("events", events).c_str(), 1);
        else ::unsetenv("KGPU_SIM_EVENTS");
        opt.root = host.root();
        opt.nvml_library = library;
        auto r = kgpu::doctor::run(opt);
        ::unsetenv("KGPU_SIM_EVENTS");
        // Every result a check read or wrote was declared in the registry (checks.h, Fact).
        EXPECT_THAT(r.undeclared_uses, ::testing::IsEmpty());
        return r;
    }
};

const CheckResult& get(const Report& r, const std::string& id) {
    const CheckResult* c = r.find(id);
    if (!c) throw std::runtime_error("no check " + id);
    return *c;
}

std::string dump(const Report& r) { return kgpu::doctor::to_json(r).dump(2); }

// A check may depend only on checks that run before it, and only on checks that exist.
TEST(DoctorRegistry, EveryDependencyIsAnEarlierCheck) {
    const auto ids = kgpu::doctor::check_ids();
    const auto deps = kgpu::doctor::check_dependencies();
    ASSERT_FALSE(deps.empty());
    for (const auto& d : deps) {
        auto self = std::find(ids.begin(), ids.end(), d.check);
        auto on = std::find(ids.begin(), ids.end(), d.on);
        ASSERT_NE(on, ids.end()) << d.check << " depends on unknown check " << d.on;
        EXPECT_LT(on, self) << d.check << (d.needs ? " needs " : " reads ") << d.on << ", which runs after it";
    }
}

// The tracker names a check that uses a result it did not declare, and only such a check.
TEST(DoctorRegistry, AnUndeclaredReadOrWriteIsRecorded) {
    kgpu::doctor::checks::Tracker t;
    kgpu::doctor::checks::Fact<int> result(t, "producer.check");
    t.current = "producer.check";
    result.set() = 7;
    t.current = "declared.reader";
    t.declared = {"producer.check"};
    EXPECT_EQ(result.get(), 7);
    EXPECT_THAT(t.undeclared, ::testing::IsEmpty());
    t.current = "other.check";
    t.declared = {"something.else"};
    (void)result.get();
    result.set() = 8;
    EXPECT_EQ(t.undeclared, (std::vector<std::string>{"other.check reads producer.check's result",
                                                       "other.check writes producer.check's result"}));
}

TEST(DoctorChecks, HealthySimulatedNodeIsAllOk) {
    // No API server configured: kube.api is skipped, whatever the shell running the tests has.
    ::unsetenv("KUBECONFIG");
    ::unsetenv("KUBERNETES_SERVICE_HOST");
    FakeHost host;
    host.live_kubelet();
    auto r = Doc{host}();
    EXPECT_EQ(r.exit_code(), 0) << dump(r);
    for (const auto& c : r.checks) {
        if (c.id == "driver.build_tools" || c.id == "runtime.cdi_spec" || c.id == "driver.dev_char" ||
            c.id == "deviceplugin.config" || c.id == "kube.api") {
            // driver loaded; CDI off; the fake host's device nodes are regular files, not devices;
            // no device plugin config file given
            EXPECT_EQ(c.status, Status::skipped) << c.id;
            continue;
        }
        EXPECT_EQ(c.status, Status::ok) << c.id << ": " << c.evidence << "\n" << c.fix;
        EXPECT_TRUE(c.fix.empty()) << c.id;
    }
    EXPECT_EQ(r.checks.size(), kgpu::doctor::check_ids().size());
    EXPECT_THAT(get(r, "nvml.devices").evidence, HasSubstr("4 GPU(s)"));
    EXPECT_THAT(get(r, "deviceplugin.plugin_socket").evidence,
                HasSubstr("GetDevicePluginOptions answered (pre_start_required=false, "
                          "get_preferred_allocation_available=true)"));
    EXPECT_THAT(get(r, "kubelet.pod_resources").evidence,
                HasSubstr("List answered: 1 pod(s), 1 container(s) holding nvidia.com devices"));
}

TEST(DoctorChecks, NoLibraryFailsLoadAndSkipsDependents) {
    FakeHost host;
    Doc run{host};
    run.library = host.path("/nowhere/libnvidia-ml.so.1");
    auto r = run();
    EXPECT_EQ(get(r, "nvml.load").status, Status::fail);
    EXPECT_THAT(get(r, "nvml.load").evidence, HasSubstr("/nowhere/libnvidia-ml.so.1"));
    EXPECT_THAT(get(r, "nvml.load").fix, HasSubstr("libnvidia-ml.so.1"));
    EXPECT_EQ(get(r, "nvml.init").status, Status::skipped);
    EXPECT_THAT(get(r, "nvml.init").evidence, HasSubstr("needs nvml.load, which failed"));
    EXPECT_EQ(get(r, "nvml.persistence_mode").status, Status::skipped);
    EXPECT_EQ(get(r, "driver.modules").status, Status::ok);  // host checks still run
    EXPECT_EQ(r.exit_code(), 1);
}

TEST(DoctorChecks, EmptyNodeFailsDevices) {
    FakeHost host;
    Doc run{host};
    run.node = sim_node("empty.yaml");
    auto r = run();
    EXPECT_EQ(get(r, "nvml.init").status, Status::ok);
    const auto& d = get(r, "nvml.devices");
    EXPECT_EQ(d.status, Status::fail);
    EXPECT_THAT(d.fix, HasSubstr("No devices found"));
    EXPECT_THAT(d.evidence, HasSubstr("4 NVIDIA PCI function(s)"));  // sysfs still lists the fixture's GPUs
    EXPECT_EQ(get(r, "nvml.ecc").status, Status::skipped);
}

TEST(DoctorChecks, LostGpuIsNamedWithTheFix) {
    FakeHost host;
    Doc run{host};
    run.events = "lost 2\n";
    auto r = run();
    const auto& c = get(r, "nvml.gpu_reachable");
    EXPECT_EQ(c.status, Status::fail);
    EXPECT_THAT(c.evidence, HasSubstr("GPU 2"));
    EXPECT_THAT(c.evidence, HasSubstr("GPU_IS_LOST"));
    EXPECT_THAT(c.fix, HasSubstr("nvidia-smi -r"));
    // The other GPUs are still examined; the lost one is reported as unreachable.
    EXPECT_THAT(get(r, "nvml.persistence_mode").evidence, HasSubstr("GPU 2: not reachable"));
    EXPECT_EQ(get(r, "nvml.persistence_mode").status, Status::ok);
}

TEST(DoctorChecks, DriverNotLoadedMapsToCause) {
    FakeHost host;
    kgpu::test::TempDir tmp;
    Doc run{host};
    run.node = tmp.write("node.yaml", "driver_version: \"550.54.15\"\ncuda_driver_version: 12040\n"
                                      "init_error: DRIVER_NOT_LOADED\ngpus: []\n");
    auto r = run();
    const auto& c = get(r, "nvml.init");
    EXPECT_EQ(c.status, Status::fail);
    EXPECT_THAT(c.evidence, HasSubstr("DRIVER_NOT_LOADED"));
    EXPECT_THAT(c.fix, HasSubstr("modprobe nvidia"));
    EXPECT_EQ(get(r, "nvml.devices").status, Status::skipped);
}

TEST(DoctorChecks, LibraryModuleMismatchAndNoPermission) {
    FakeHost host;
    kgpu::test::TempDir tmp;
    Doc run{host};
    run.node = tmp.write("node.yaml", "driver_version: \"550.54.15\"\ncuda_driver_version: 12040\n"
                                      "init_error: LIB_RM_VERSION_MISMATCH\ngpus: []\n");
    auto r = run();
    EXPECT_THAT(get(r, "nvml.init").fix, HasSubstr("reboot"));
    run.node = tmp.write("node2.yaml", "driver_version: \"550.54.15\"\ncuda_driver_version: 12040\n"
                                       "init_error: NO_PERMISSION\ngpus: []\n");
    r = run();
    EXPECT_THAT(get(r, "nvml.init").fix, HasSubstr("/dev/nvidiactl"));
}

TEST(DoctorChecks, VersionMismatchBetweenLibraryAndModule) {
    FakeHost host;
    host.write("/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar 5 2024\n");
    auto r = Doc{host}();
    const auto& c = get(r, "nvml.version_match");
    EXPECT_EQ(c.status, Status::fail);
    EXPECT_THAT(c.fix, HasSubstr("535.161.08"));
    EXPECT_THAT(c.fix, HasSubstr("550.54.15"));
}

TEST(DoctorChecks, NvmlChecksRunWhateverTheModuleListSays) {
    FakeHost host;
    host.remove("/proc/modules");
    host.remove("/sys");
    auto r = Doc{host}();
    EXPECT_EQ(get(r, "driver.modules").status, Status::fail);
    EXPECT_EQ(get(r, "nvml.init").status, Status::ok);
    EXPECT_EQ(get(r, "nvml.devices").status, Status::ok);
    EXPECT_EQ(get(r, "nvml.persistence_mode").status, Status::ok);
}

TEST(DoctorChecks, ModuleNotLoadedButBuiltForThisKernel) {
    FakeHost host;
    host.write("/proc/modules", "ext4 987136 2 - Live 0x0000000000000000\n");
    host.remove("/proc/driver");
    Doc run{host};
    run.library = host.path("/none.so");
    auto r = run();
    EXPECT_EQ(get(r, "driver.modules").status, Status::fail);
    EXPECT_THAT(get(r, "driver.modules").fix, HasSubstr("modprobe nvidia"));
    EXPECT_EQ(get(r, "driver.version").status, Status::skipped);
    EXPECT_EQ(get(r, "driver.device_nodes").status, Status::skipped);
    EXPECT_EQ(get(r, "driver.kernel_module").status, Status::fail);
    EXPECT_THAT(get(r, "driver.kernel_module").fix, HasSubstr("modprobe nvidia"));
    EXPECT_EQ(get(r, "driver.build_tools").status, Status::fail);  // headers missing in the fixture
}

TEST(DoctorChecks, KernelUpdatedAfterDriverInstall) {
    FakeHost host;
    host.write("/proc/modules", "ext4 987136 2 - Live 0x0000000000000000\n");
    host.write("/proc/sys/kernel/osrelease", "6.1.0-21-amd64\n");
    host.write("/lib/modules/6.1.0-21-amd64/build/Makefile", "");
    auto r = Doc{host}();
    const auto& c = get(r, "driver.kernel_module");
    EXPECT_EQ(c.status, Status::fail);
    EXPECT_THAT(c.fix, HasSubstr("kernel was updated"));
    EXPECT_THAT(c.fix, HasSubstr("6.1.0-18-amd64"));
    EXPECT_EQ(get(r, "driver.build_tools").status, Status::ok);  // gcc, make, headers present
    host.remove("/usr/bin/gcc");
    r = Doc{host}();
    EXPECT_EQ(get(r, "driver.build_tools").status, Status::fail);
    EXPECT_THAT(get(r, "driver.build_tools").evidence, HasSubstr("gcc: not found"));
    EXPECT_THAT(get(r, "driver.build_tools").fix, HasSubstr("linux-headers-$(uname -r)"));
}

// A folder a check looks through but cannot list is named in its evidence, not read as empty.
TEST(DoctorChecks, AFolderThatCannotBeListedIsSaidSo) {
    FakeHost host;
    host.write("/proc/modules", "ext4 987136 2 - Live 0x0000000000000000\n");
    host.remove("/lib/modules");
    host.write("/lib/modules", "");  // a file where the kernels' folders should be
    auto r = Doc{host}();
    const auto& c = get(r, "driver.kernel_module");
    EXPECT_EQ(c.status, Status::fail);
    EXPECT_THAT(c.evidence, HasSubstr("cannot list " + host.path("/lib/modules")));
    EXPECT_THAT(c.fix, HasSubstr("No NVIDIA driver is installed"));
}

TEST(DoctorChecks, NouveauLoaded) {
    FakeHost host;
    host.write("/proc/modules", "nouveau 2306048 0 - Live 0x0000000000000000\n");
    auto r = Doc{host}();
    EXPECT_EQ(get(r, "driver.nouveau").status, Status::fail);
    EXPECT_THAT(get(r, "driver.nouveau").fix, HasSubstr("blacklist nouveau"));
}

TEST(DoctorChecks, NoNvidiaPciFunction) {
    FakeHost host;
    for (const char* b : {"0000:1a:00.0", "0000:1b:00.0", "0000:86:00.0", "0000:87:00.0"})
        host.remove(std::string("/sys/bus/pci/devices/") + b);
    auto r = Doc{host}();
    EXPECT_EQ(get(r, "hardware.pci").status, Status::fail);
    EXPECT_THAT(get(r, "hardware.pci").fix, HasSubstr("lspci"));
}

TEST(DoctorChecks, DeviceNodesMissingOrTooStrict) {
    FakeHost host;
    host.remove("/dev/nvidia2");
    auto r = Doc{host}();
    EXPECT_EQ(get(r, "driver.device_nodes").status, Status::fail);
    EXPECT_THAT(get(r, "driver.device_nodes").evidence, HasSubstr("/dev/nvidia2: missing"));
    FakeHost strict;
    std::filesystem::permissions(strict.path("/dev/nvidiactl"), std::filesystem::perms(0600));
    r = Doc{strict}();
    EXPECT_EQ(get(r, "driver.device_nodes").status, Status::warn);
    EXPECT_THAT(get(r, "driver.device_nodes").evidence, HasSubstr("mode 0600"));
    EXPECT_THAT(get(r, "driver.device_nodes").fix, HasSubstr("0666"));
}

TEST(DoctorChecks, PersistenceOffWarns) {
    FakeHost host;
    host.live_kubelet();
    kgpu::test::TempDir tmp;
    std::string yaml = slurp(sim_node("t4x4.yaml"));
    auto at = yaml.find("    minor: 1\n");
    ASSERT_NE(at, std::string::npos);
    yaml.insert(at, "    persistence_mode: false\n");
    Doc run{host};
    run.node = tmp.write("node.yaml", yaml);
    auto r = run();
    const auto& c = get(r, "nvml.persistence_mode");
    EXPECT_EQ(c.status, Status::warn);
    EXPECT_THAT(c.evidence, HasSubstr("GPU 1: persistence mode off"));
    EXPECT_THAT(c.fix, HasSubstr("nvidia-smi -pm 1"));
    EXPECT_EQ(r.exit_code(), 0);  // a warning is not a failure
}

TEST(DoctorChecks, PendingRemapAndRecoveryActionFail) {
    FakeHost host;
    Doc run{host};
    run.events = "xid 0 48\nxid 1 95\n";
    auto r = run();
    EXPECT_EQ(get(r, "nvml.remapped_rows").status, Status::fail);
    EXPECT_THAT(get(r, "nvml.remapped_rows").evidence, HasSubstr("GPU 0: remapped rows"));
    EXPECT_THAT(get(r, "nvml.remapped_rows").fix, HasSubstr("GPU 0"));
    EXPECT_EQ(get(r, "nvml.recovery_action").status, Status::fail);
    EXPECT_THAT(get(r, "nvml.recovery_action").evidence, HasSubstr("GPU 1: recovery action GPU_RESET"));
}

TEST(DoctorChecks, ProcessNearMemoryLimitIsOomRisk) {
    FakeHost host;
    Doc run{host};
    run.events = "proc 0 4242 16000000000 python3\nproc 1 77 1000000000 small\n";
    auto r = run();
    const auto& c = get(r, "nvml.gpu_memory");
    EXPECT_EQ(c.status, Status::warn);
    EXPECT_THAT(c.fix, HasSubstr("PID 4242"));
    EXPECT_THAT(c.fix, HasSubstr("python3"));
    EXPECT_THAT(c.fix, Not(HasSubstr("PID 77")));
}

TEST(DoctorChecks, OldArchitectureWarnsAboutCuda13) {
    FakeHost host;
    kgpu::test::TempDir tmp;
    std::string yaml = slurp(sim_node("t4x4.yaml"));
    for (size_t at = yaml.find("\"7.5\""); at != std::string::npos; at = yaml.find("\"7.5\"", at)) yaml.replace(at, 5, "\"7.0\"");
    Doc run{host};
    run.node = tmp.write("node.yaml", yaml);
    auto r = run();
    EXPECT_EQ(get(r, "nvml.cuda_compat").status, Status::warn);
    EXPECT_THAT(get(r, "nvml.cuda_compat").evidence, HasSubstr("CUDA 13"));
}

TEST(DoctorChecks, XidsInTheKernelLog) {
    FakeHost host;
    host.copy_in("kern-xid79.log", "/var/log/kern.log");
    auto r = Doc{host}();
    const auto& c = get(r, "kernel.xid");
    EXPECT_EQ(c.status, Status::fail);
    EXPECT_THAT(c.evidence, HasSubstr("XID 79 (GPU has fallen off the bus) on PCI 0000:86:00"));
    EXPECT_THAT(c.fix, HasSubstr("power, cooling"));

    host.copy_in("kern-xid13.log", "/var/log/kern.log");
    r = Doc{host}();
    EXPECT_EQ(get(r, "kernel.xid").status, Status::warn);
    EXPECT_THAT(get(r, "kernel.xid").evidence, HasSubstr("application-caused"));

    Doc explicit_log{host};
    explicit_log.opt.kernel_log = "/saved/dmesg.txt";
    host.copy_in("kern-xid92.log", "/saved/dmesg.txt");
    r = explicit_log();
    EXPECT_EQ(get(r, "kernel.xid").status, Status::warn);
    EXPECT_THAT(get(r, "kernel.xid").evidence, HasSubstr("high single-bit ECC"));

    host.remove("/var/log/kern.log");
    r = Doc{host}();
    EXPECT_EQ(get(r, "kernel.xid").status, Status::warn);
    EXPECT_THAT(get(r, "kernel.xid").fix, HasSubstr("--kernel-log"));
}

// Issue #23 item 1: a CDI name two specs of one directory define is dropped by every CDI runtime's
// cache; doctor names the names and the files, and what an older kgpu left gets its own advice.
TEST(DoctorChecks, CdiNamesDefinedTwiceFailNamingTheFiles) {
    FakeHost host;
    host.live_kubelet();
    auto r = Doc{host}();
    EXPECT_EQ(get(r, "runtime.cdi_names").status, Status::ok) << get(r, "runtime.cdi_names").evidence;
    auto spec = [](const std::string& kind, const std::string& names) {
        std::string out = "cdiVersion: 0.5.0\nkind: " + kind + "\ndevices:\n";
        for (char n : names) out += std::string("- name: \"") + n + "\"\n  containerEdits:\n    env: [A=1]\n";
        return out;
    };
    host.write("/var/run/cdi/nvidia.yaml", spec("nvidia.com/gpu", "012"));
    host.write("/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json",
               R"({"cdiVersion":"0.5.0","kind":"k8s.device-plugin.nvidia.com/gpu","devices":[{"name":"0",)"
               R"("containerEdits":{"env":["A=1"]}}]})");
    r = Doc{host}();
    EXPECT_EQ(get(r, "runtime.cdi_names").status, Status::ok) << get(r, "runtime.cdi_names").evidence;
    EXPECT_THAT(get(r, "runtime.cdi_names").evidence, HasSubstr("2 spec(s) loaded, 4 device name(s) resolve"));

    host.write("/var/run/cdi/kgpu-nvidia-gpu.yaml", spec("nvidia.com/gpu", "01"));
    r = Doc{host}();
    const CheckResult& c = get(r, "runtime.cdi_names");
    EXPECT_EQ(c.status, Status::fail);
    EXPECT_THAT(c.evidence, HasSubstr("defined in " + host.path("/var/run/cdi/kgpu-nvidia-gpu.yaml") + " and " +
                                      host.path("/var/run/cdi/nvidia.yaml") +
                                      ": nvidia.com/gpu=0, nvidia.com/gpu=1; the CDI cache drops them"));
    EXPECT_THAT(c.fix, HasSubstr("kgpu-nvidia-gpu.yaml was written by an older kgpu device plugin"));

    // Across the directories the dynamic one wins: a warning names both files.
    host.remove("/var/run/cdi/kgpu-nvidia-gpu.yaml");
    host.write("/etc/cdi/nvidia.yaml", spec("nvidia.com/gpu", "2"));
    r = Doc{host}();
    EXPECT_EQ(get(r, "runtime.cdi_names").status, Status::warn);
    EXPECT_THAT(get(r, "runtime.cdi_names").evidence,
                HasSubstr("defined in " + host.path("/etc/cdi/nvidia.yaml") + " and " +
                          host.path("/var/run/cdi/nvidia.yaml") + ": nvidia.com/gpu=2; the last one is used"));
}

// Issue #23 item 2: the device plugin serves with unknown keys (NVIDIA's parser ignores them), so
// doctor is where they are errors, with file, line and key.
TEST(DoctorChecks, DevicePluginConfigUnknownKeysFail) {
    FakeHost host;
    host.live_kubelet();
    kgpu::test::TempDir dir;
    Doc run{host};
    run.opt.config_file =
        dir.write("config.yaml", "version: v1\nflags:\n  migStrategy: none\n  failOnInitErorr: false\n");
    auto r = run();
    const CheckResult& c = get(r, "deviceplugin.config");
    EXPECT_EQ(c.status, Status::fail);
    EXPECT_THAT(c.evidence, HasSubstr(run.opt.config_file + ":4: key 'flags.failOnInitErorr': unknown key"));
    EXPECT_THAT(c.fix, HasSubstr("1 unknown key(s)"));
    run.opt.config_file = dir.write("config.yaml", "version: v1\nflags:\n  migStrategy: sometimes\n");
    r = run();
    EXPECT_EQ(get(r, "deviceplugin.config").status, Status::fail);
    EXPECT_THAT(get(r, "deviceplugin.config").evidence, HasSubstr(":3: key 'flags.migStrategy'"));
    run.opt.config_file = dir.write("config.yaml", "version: v1\nflags:\n  migStrategy: mixed\n");
    r = run();
    EXPECT_EQ(get(r, "deviceplugin.config").status, Status::ok) << get(r, "deviceplugin.config").evidence;
    run.opt.config_file.clear();
    EXPECT_EQ(get(run(), "deviceplugin.config").status, Status::skipped);
}

TEST(DoctorChecks, ContainerdConfigs) {
    FakeHost host;
    host.live_kubelet();
    auto check = [&](const char* fixture) {
        host.copy_in(std::string("containerd/") + fixture, "/etc/containerd/config.toml");
        return Doc{host}();
    };
    auto r = check("no-nvidia.toml");
    EXPECT_EQ(get(r, "runtime.containerd").status, Status::fail);
    EXPECT_THAT(get(r, "runtime.containerd").fix, HasSubstr("restart containerd"));
    EXPECT_EQ(get(r, "runtime.cdi_spec").status, Status::skipped);

    r = check("not-default.toml");
    EXPECT_EQ(get(r, "runtime.containerd").status, Status::warn);
    EXPECT_THAT(get(r, "runtime.containerd").fix, HasSubstr("runtimeClassName: nvidia"));

    r = check("broken.toml");
    EXPECT_EQ(get(r, "runtime.containerd").status, Status::fail);
    EXPECT_THAT(get(r, "runtime.containerd").evidence, HasSubstr("/etc/containerd/config.toml:2:"));

    // A version containerd does not know (fuzz/corpus/doctor_containerd/crash-6d14...): an
    // error naming the line, not settings read from the version-3 plugin table.
    for (const char* text : {"version = 4\n", "version = -1\n", "version = \"2\"\n", "version = 4294967298\n"}) {
        host.write("/etc/containerd/config.toml", text);
        r = Doc{host}();
        EXPECT_EQ(get(r, "runtime.containerd").status, Status::fail) << text;
        EXPECT_THAT(get(r, "runtime.containerd").evidence, HasSubstr("/etc/containerd/config.toml:1: version")) << text;
    }

    r = check("cdi-v2.toml");
    EXPECT_EQ(get(r, "runtime.containerd").status, Status::ok);
    EXPECT_EQ(get(r, "runtime.cdi_spec").status, Status::fail);
    EXPECT_THAT(get(r, "runtime.cdi_spec").fix, HasSubstr("cdi generate"));
    host.write("/var/run/cdi/nvidia.yaml", "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n");
    r = Doc{host}();
    EXPECT_EQ(get(r, "runtime.cdi_spec").status, Status::ok);

    r = check("v3-default.toml");  // containerd 2.x: CDI on by default
    EXPECT_EQ(get(r, "runtime.containerd").status, Status::ok);
    EXPECT_THAT(get(r, "runtime.containerd").evidence, HasSubstr("CDI enabled (containerd's default)"));

    host.copy_in("containerd/conf.d/99-nvidia.toml", "/etc/containerd/conf.d/99-nvidia.toml");
    r = check("imports.toml");
    EXPECT_EQ(get(r, "runtime.containerd").status, Status::ok) << get(r, "runtime.containerd").evidence;
    EXPECT_THAT(get(r, "runtime.containerd").evidence, HasSubstr("99-nvidia.toml"));

    host.remove("/usr/bin/nvidia-container-runtime");
    r = Doc{host}();
    EXPECT_EQ(get(r, "runtime.containerd").status, Status::fail);  // BinaryName points nowhere
    EXPECT_EQ(get(r, "runtime.toolkit").status, Status::fail);
    EXPECT_THAT(get(r, "runtime.toolkit").fix, HasSubstr("nvidia-container-toolkit"));

    host.remove("/etc/containerd");
    r = Doc{host}();
    EXPECT_EQ(get(r, "runtime.containerd").status, Status::fail);
    EXPECT_THAT(get(r, "runtime.containerd").evidence, HasSubstr("config.toml"));
}

TEST(DoctorChecks, DevicePluginSockets) {
    FakeHost host;
    auto r = Doc{host}();
    EXPECT_EQ(get(r, "deviceplugin.dir").status, Status::ok);
    EXPECT_EQ(get(r, "deviceplugin.kubelet_socket").status, Status::fail);
    EXPECT_EQ(get(r, "deviceplugin.plugin_socket").status, Status::fail);
    EXPECT_THAT(get(r, "deviceplugin.plugin_socket").fix, HasSubstr("Failed to initialize NVML"));
    EXPECT_EQ(get(r, "kubelet.pod_resources").status, Status::warn);

    host.socket("/var/lib/kubelet/device-plugins/kubelet.sock");
    host.socket("/var/lib/kubelet/device-plugins/nvidia-gpu.sock", /*listen=*/false);
    r = Doc{host}();
    EXPECT_EQ(get(r, "deviceplugin.kubelet_socket").status, Status::ok);
    EXPECT_EQ(get(r, "deviceplugin.plugin_socket").status, Status::fail);
    EXPECT_THAT(get(r, "deviceplugin.plugin_socket").evidence, HasSubstr("connection refused"));

    // Something listens but does not speak the device-plugin API.
    FakeHost mute;
    mute.socket("/var/lib/kubelet/device-plugins/kubelet.sock");
    mute.socket("/var/lib/kubelet/device-plugins/nvidia-gpu.sock");
    mute.socket("/var/lib/kubelet/pod-resources/kubelet.sock");
    r = Doc{mute}();
    EXPECT_EQ(get(r, "deviceplugin.plugin_socket").status, Status::fail);
    EXPECT_THAT(get(r, "deviceplugin.plugin_socket").evidence, HasSubstr("GetDevicePluginOptions failed"));
    EXPECT_THAT(get(r, "deviceplugin.plugin_socket").fix, HasSubstr("does not answer the device-plugin API"));
    EXPECT_EQ(get(r, "kubelet.pod_resources").status, Status::warn);
    EXPECT_THAT(get(r, "kubelet.pod_resources").evidence, HasSubstr("List failed"));

    FakeHost regular;
    regular.write("/var/lib/kubelet/device-plugins/kubelet.sock", "");
    r = Doc{regular}();
    EXPECT_THAT(get(r, "deviceplugin.kubelet_socket").evidence, HasSubstr("not a unix socket"));

    regular.remove("/var/lib/kubelet/device-plugins");
    r = Doc{regular}();
    EXPECT_EQ(get(r, "deviceplugin.dir").status, Status::fail);
    EXPECT_EQ(get(r, "deviceplugin.kubelet_socket").status, Status::skipped);
    EXPECT_EQ(get(r, "deviceplugin.plugin_socket").status, Status::skipped);
}

// Issue #12 item 7: two plugin sockets answering for nvidia.com/gpu, then kgpu cut off by a
// kubelet that behaves like v1.26 (the other plugin's stream ended).
TEST(DoctorChecks, TwoPluginsForOneResourceAndKgpuCutOff) {
    using namespace std::chrono_literals;
    FakeHost host;
    const std::string dp = host.path("/var/lib/kubelet/device-plugins");
    std::filesystem::create_directories(dp);
    std::filesystem::create_directories(host.path("/var/lib/kubelet/pod-resources"));
    kgpu::test::FakeKubelet kubelet(dp);
    ASSERT_TRUE(kubelet.start());
    ASSERT_TRUE(kubelet.serve_pod_resources(host.path("/var/lib/kubelet/pod-resources/kubelet.sock")));
    kgpu::deviceplugin::ResourceServer kgpu("nvidia.com/gpu", dp + "/kgpu-nvidia-com-gpu.sock", {});
    v1beta1::ListAndWatchResponse list;
    for (const char* id : {"GPU-0", "GPU-1"}) {
        auto* d = list.add_devices();
        d->set_id(id);
        d->set_health("Healthy");
    }
    kgpu.publish(list);
    ASSERT_TRUE(kgpu.start());
    ASSERT_TRUE(kgpu::deviceplugin::register_with_kubelet(kubelet.socket_path(), "kgpu-nvidia-com-gpu.sock",
                                                          "nvidia.com/gpu"));
    ASSERT_TRUE(kubelet.wait_until([&] { return kubelet.allocatable("nvidia.com/gpu") == 2; }, 20s));
    auto r = Doc{host}();
    EXPECT_EQ(get(r, "deviceplugin.one_plugin_per_resource").status, Status::ok)
        << get(r, "deviceplugin.one_plugin_per_resource").evidence;
    EXPECT_EQ(get(r, "kubelet.allocatable").status, Status::ok) << get(r, "kubelet.allocatable").evidence;
    EXPECT_THAT(get(r, "kubelet.allocatable").evidence,
                HasSubstr("nvidia.com/gpu: the kubelet's 2 allocatable = the 2 healthy device(s) kgpu serves"));

    // NVIDIA's plugin registers the same resource: the kubelet now uses it.
    kgpu::test::FakeDevicePlugin nvidia(dp, "nvidia.com/gpu", {"GPU-a", "GPU-b"});
    ASSERT_TRUE(nvidia.start());
    ASSERT_TRUE(nvidia.register_with(kubelet.socket_path()).ok());
    ASSERT_TRUE(kubelet.wait_devices(
        "nvidia.com/gpu", [](const auto& d) { return d.contains("GPU-a") && d.size() == 2; }, 20s));
    r = Doc{host}();
    const auto& two = get(r, "deviceplugin.one_plugin_per_resource");
    EXPECT_EQ(two.status, Status::warn) << two.evidence;
    EXPECT_THAT(two.evidence, HasSubstr("nvidia.com/gpu is served by 2 plugin sockets"));
    EXPECT_THAT(two.fix, HasSubstr("one device plugin per resource"));
    EXPECT_EQ(get(r, "kubelet.allocatable").status, Status::warn) << get(r, "kubelet.allocatable").evidence;
    EXPECT_THAT(get(r, "kubelet.allocatable").evidence, HasSubstr("not kgpu's: GPU-a, GPU-b"));

    // NVIDIA's plugin goes away: its stream ends and the kubelet drops the resource's client.
    nvidia.stop();
    ASSERT_TRUE(kubelet.wait_until([&] { return kubelet.allocatable("nvidia.com/gpu") == 0; }, 20s));
    r = Doc{host}();
    EXPECT_EQ(get(r, "deviceplugin.one_plugin_per_resource").status, Status::ok);
    const auto& alloc = get(r, "kubelet.allocatable");
    EXPECT_EQ(alloc.status, Status::fail) << alloc.evidence;
    EXPECT_THAT(alloc.evidence, HasSubstr("kgpu serves 2 healthy device(s)"));
    EXPECT_THAT(alloc.evidence, HasSubstr("the kubelet has 0 allocatable"));
    EXPECT_THAT(alloc.fix, HasSubstr("Restart the kgpu pod"));
    EXPECT_EQ(r.exit_code(), 1);
}

TEST(DoctorChecks, EmptyRootGivesAUsefulReport) {
    FakeHost host(/*healthy=*/false);
    Doc run{host};
    run.library = host.path("/nothing.so");
    auto r = run();
    EXPECT_EQ(r.exit_code(), 1);
    EXPECT_EQ(r.checks.size(), kgpu::doctor::check_ids().size());
    for (const auto& c : r.checks) {
        EXPECT_FALSE(c.evidence.empty()) << c.id;
        if (c.status == Status::fail) {
            EXPECT_FALSE(c.fix.empty()) << c.id;
        }
    }
}

TEST(DoctorReport, JsonAndTextShapes) {
    FakeHost host;
    auto r = Doc{host}();
    auto j = kgpu::doctor::to_json(r);
    ASSERT_TRUE(j["checks"].is_array());
    for (const auto& c : j["checks"]) {
        for (const char* k : {"id", "layer", "status", "evidence", "fix"}) EXPECT_TRUE(c.contains(k)) << k;
        EXPECT_THAT((std::vector<std::string>{"ok", "warn", "fail", "skipped"}),
                    ::testing::Contains(c["status"].get<std::string>()));
    }
    std::ostringstream plain, colour;
    kgpu::doctor::print_text(r, plain, false);
    kgpu::doctor::print_text(r, colour, true);
    EXPECT_EQ(plain.str().find('\x1b'), std::string::npos);
    EXPECT_NE(colour.str().find('\x1b'), std::string::npos);
    EXPECT_THAT(plain.str(), HasSubstr("device plugin\n"));
    EXPECT_THAT(plain.str(), HasSubstr("[FAIL] deviceplugin.kubelet_socket"));
}

TEST(DoctorHost, Parsers) {
    using namespace kgpu::doctor;
    auto mods = parse_modules("nvidia_uvm 1 0 - Live 0x0\nnvidia 2 1 nvidia_uvm, Live 0x0\n");
    EXPECT_EQ(mods, (std::vector<std::string>{"nvidia_uvm", "nvidia"}));
    EXPECT_EQ(parse_driver_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build\n"), "570.86.15");
    EXPECT_EQ(parse_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Thu Mar 14\n"), "535.161.08");
    auto x = parse_xids("[1.0] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE\nnoise\n");
    ASSERT_EQ(x.size(), 1u);
    EXPECT_EQ(x[0].xid, 48);
    EXPECT_EQ(x[0].pci, "0000:3b:00");
    // An XID past int aborted doctor (std::stoi threw; fuzz/corpus/doctor_kernel_log/crash-717c...):
    // such a line is no XID and is skipped.
    x = parse_xids("NVRM: Xid (PCI:0000:1a:00): 10000000003, pid=1\nNVRM: Xid (PCI:0000:1b:00): 79, pid=2\n");
    ASSERT_EQ(x.size(), 1u);
    EXPECT_EQ(x[0].xid, 79);
    EXPECT_EQ(classify_xid(13), XidClass::application);
    EXPECT_EQ(classify_xid(94), XidClass::recoverable);
    EXPECT_EQ(classify_xid(79), XidClass::reset_required);
    EXPECT_EQ(classify_xid(1), XidClass::unknown);
}

}  // namespace

namespace {

// /dev/char links (driver.dev_char) need real character devices: mknod, so root only.
TEST(DoctorChecks, DevCharLinksForTheNvidiaNodes) {
    if (::geteuid() != 0) GTEST_SKIP() << "mknod needs root";
    FakeHost host;
    for (const auto& e : std::filesystem::directory_iterator(host.path("/dev")))
        if (e.path().filename().string().starts_with("nvidia")) std::filesystem::remove(e.path());
    auto mknod = [&](const std::string& p, unsigned maj, unsigned min) {
        std::filesystem::create_directories(std::filesystem::path(host.path(p)).parent_path());
        ASSERT_EQ(::mknod(host.path(p).c_str(), S_IFCHR | 0666, makedev(maj, min)), 0) << p;
    };
    mknod("/dev/nvidiactl", 195, 255);
    for (unsigned i = 0; i < 4; ++i) mknod("/dev/nvidia" + std::to_string(i), 195, i);
    mknod("/dev/nvidia-caps/nvidia-cap1", 511, 1);
    auto r = Doc{host}();
    const auto& c = get(r, "driver.dev_char");
    EXPECT_EQ(c.status, Status::warn) << c.evidence;
    EXPECT_THAT(c.evidence, HasSubstr("missing: /dev/char/195:3 (/dev/nvidia3)"));
    EXPECT_THAT(c.evidence, HasSubstr("missing: /dev/char/511:1 (/dev/nvidia-caps/nvidia-cap1)"));
    EXPECT_THAT(c.fix, HasSubstr("kgpu runtime install"));
    // What `kgpu runtime install` creates, and what udev creates (relative links), both count.
    auto created = kgpu::toolkit::create_dev_char_links(host.root());
    ASSERT_TRUE(created) << created.error().message;
    EXPECT_EQ(created->size(), 6u);
    std::filesystem::remove(host.path("/dev/char/195:0"));
    std::filesystem::create_symlink("../nvidia0", host.path("/dev/char/195:0"));
    auto again = Doc{host}();
    EXPECT_EQ(get(again, "driver.dev_char").status, Status::ok) << get(again, "driver.dev_char").evidence;
    std::filesystem::remove(host.path("/dev/char/195:1"));
    std::filesystem::create_symlink("/dev/nvidia2", host.path("/dev/char/195:1"));
    auto wrong = Doc{host}();
    EXPECT_THAT(get(wrong, "driver.dev_char").evidence, HasSubstr("points elsewhere: /dev/char/195:1"));
}

}  // namespace

namespace {

// kgpu's own runtime (`kgpu runtime install`) is a valid setup without NVIDIA's toolkit.
TEST(DoctorChecks, KgpusRuntimeCountsAsTheGpuRuntime) {
    FakeHost host;
    host.live_kubelet();
    host.write("/etc/containerd/config.toml",
               "version = 2\n"
               "[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"nvidia\"\n"
               "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\n  runtime_type = \"io.containerd.runc.v2\"\n"
               "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\n"
               "  BinaryName = \"/usr/local/kgpu/kgpu-container-runtime\"\n");
    for (const char* b : {"/usr/bin/nvidia-container-runtime", "/usr/bin/nvidia-container-runtime-hook", "/usr/bin/nvidia-ctk",
                          "/usr/bin/nvidia-container-cli"})
        host.remove(b);
    auto missing = Doc{host}();
    EXPECT_EQ(get(missing, "runtime.containerd").status, Status::fail);
    EXPECT_THAT(get(missing, "runtime.containerd").fix, HasSubstr("kgpu runtime install"));
    EXPECT_EQ(get(missing, "runtime.toolkit").status, Status::fail);
    host.write("/usr/local/kgpu/kgpu-container-runtime", "");
    auto r = Doc{host}();
    EXPECT_EQ(get(r, "runtime.containerd").status, Status::ok) << get(r, "runtime.containerd").evidence;
    EXPECT_THAT(get(r, "runtime.containerd").evidence, HasSubstr("kgpu's container runtime"));
    EXPECT_EQ(get(r, "runtime.toolkit").status, Status::ok) << get(r, "runtime.toolkit").evidence;
    EXPECT_THAT(get(r, "runtime.toolkit").evidence, HasSubstr("runtime is kgpu's"));

    // The installed copy runs on the loader it names (<install-dir>/lib/ld-linux-*, carried by the
    // install): an ELF runtime whose loader is not on the host is a failure, not a silent crash of
    // every container. (This test's own binary stands in: it names /lib64/ld-linux-x86-64.so.2.)
    std::ifstream self("/proc/self/exe", std::ios::binary);
    const std::string exe((std::istreambuf_iterator<char>(self)), std::istreambuf_iterator<char>());
    auto interp = kgpu::elf::read_interpreter(exe, "this test");
    ASSERT_TRUE(interp) << interp.error().message;
    host.remove(interp->value);
    host.write("/usr/local/kgpu/kgpu-container-runtime", exe);
    auto gone = Doc{host}();
    EXPECT_EQ(get(gone, "runtime.toolkit").status, Status::fail) << get(gone, "runtime.toolkit").evidence;
    EXPECT_THAT(get(gone, "runtime.toolkit").evidence, HasSubstr("missing: " + interp->value));
    EXPECT_THAT(get(gone, "runtime.toolkit").fix, HasSubstr("Run `kgpu runtime install` again"));
    host.write(interp->value, "loader");
    auto back = Doc{host}();
    EXPECT_EQ(get(back, "runtime.toolkit").status, Status::ok) << get(back, "runtime.toolkit").evidence;
}

}  // namespace

// kube.api (issue #27) against recorded API-server answers: reachable, the Node, and one
// SelfSubjectAccessReview per verb kgpu needs.
namespace {

struct FakeApi {
    std::set<std::string> denied;  // "verb resource"
    int version_status = 200, node_status = 200, review_status = 201;
    std::vector<std::string> calls;
    kgpu::Result<kgpu::kube::Response> operator()(std::string_view m, std::string_view p, std::string_view body, std::string_view) {
        calls.push_back(std::string(m) + " " + std::string(p));
        if (p == "/version") return kgpu::kube::Response{version_status, {}, R"({"gitVersion":"v1.32.10"})"};
        if (p.starts_with("/api/v1/nodes/")) return kgpu::kube::Response{node_status, {}, R"({"kind":"Status","message":"nodes \"n1\" not found"})"};
        auto review = nlohmann::json::parse(body);
        const auto& a = review["spec"]["resourceAttributes"];
        const bool allowed = !denied.contains(a["verb"].get<std::string>() + " " + a["resource"].get<std::string>());
        review["status"] = {{"allowed", allowed}};
        return kgpu::kube::Response{review_status, {}, review.dump()};
    }
};

CheckResult api_check(FakeApi& api, const std::string& node = "n1") {
    CheckResult r;
    kgpu::doctor::check_kube_api([&](auto m, auto p, auto b, auto t) { return api(m, p, b, t); }, "https://api:6443", node, r);
    return r;
}

}  // namespace

TEST(DoctorKubeApi, AllowedEverythingIsOkAndEachVerbIsAsked) {
    FakeApi api;
    auto r = api_check(api);
    EXPECT_EQ(r.status, Status::ok) << r.evidence;
    EXPECT_THAT(r.evidence, HasSubstr("GET https://api:6443/version: 200 v1.32.10"));
    EXPECT_THAT(r.evidence, HasSubstr("every verb kgpu needs is allowed (6 SelfSubjectAccessReviews)"));
    EXPECT_EQ(api.calls.size(), 2u + kgpu::doctor::api_needs().size());
}

TEST(DoctorKubeApi, DeniedVerbsAreNamedWithTheirFeature) {
    FakeApi api;
    api.denied = {"create events", "watch nodes"};
    auto r = api_check(api);
    EXPECT_EQ(r.status, Status::warn);
    EXPECT_THAT(r.evidence, HasSubstr("RBAC denies: create events in default (for GPU health Events on the Node"));
    EXPECT_THAT(r.evidence, HasSubstr("watch nodes (for per-node configs"));
    EXPECT_THAT(r.fix, HasSubstr("deploy/kubernetes/rbac.yaml"));
}

TEST(DoctorKubeApi, RefusedUnreachableMissingNodeAndNoReviewApi) {
    FakeApi refused;
    refused.version_status = 401;
    auto r = api_check(refused);
    EXPECT_EQ(r.status, Status::fail);
    EXPECT_THAT(r.fix, HasSubstr("refuses kgpu's credentials"));

    CheckResult down;
    kgpu::doctor::check_kube_api(
        [](auto, auto, auto, auto) -> kgpu::Result<kgpu::kube::Response> {
            return std::unexpected(kgpu::Error{kgpu::Code::unavailable, "GET https://api:6443/version: connect: Connection refused"});
        },
        "https://api:6443", "n1", down);
    EXPECT_EQ(down.status, Status::fail);
    EXPECT_THAT(down.evidence, HasSubstr("Connection refused"));

    FakeApi missing;
    missing.node_status = 404;
    r = api_check(missing);
    EXPECT_EQ(r.status, Status::warn);
    EXPECT_THAT(r.fix, HasSubstr("no Node named n1"));

    FakeApi any;
    r = api_check(any, "n1 /x");
    EXPECT_EQ(r.status, Status::warn);
    EXPECT_THAT(r.evidence, HasSubstr("expected a DNS subdomain"));
    EXPECT_EQ(std::count(any.calls.begin(), any.calls.end(), "GET /api/v1/nodes/n1 /x"), 0) << "the name reached a request line";

    FakeApi old;
    old.review_status = 404;
    r = api_check(old);
    EXPECT_EQ(r.status, Status::ok);
    EXPECT_THAT(r.evidence, HasSubstr("does not serve SelfSubjectAccessReview (404): RBAC not checked"));
}
