// NVIDIA's device plugin v0.18.2 and `kgpu device-plugin` on the same simulated node with the
// same flags and config, each registered with its own fake kubelet (tests/support, as strict
// as the v1.26 device manager), compared as data:
//  - the resources registered, the options (preferred allocation), every ListAndWatch device
//    with its health and NUMA topology;
//  - Allocate answers (envs, mounts, device specs, annotations, CDI devices, or the error code)
//    for one device, three devices in one container, and two containers;
//  - for bad flags and configs: whether each exits (and with which code) or serves.
// NVIDIA's plugin has its own socket directory built in (/var/lib/kubelet/device-plugins) and
// writes CDI specs to /var/run/cdi: it runs in a mount namespace where a temp dir is /var/lib,
// another /run, and the node's PCI sysfs /sys (parity::in_namespace). The simulator is its
// libnvidia-ml.so.1 (LD_LIBRARY_PATH), or the driver root's (DriverRoot) when the case needs a
// driver root: device specs, CDI specs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "parity/driver_root.h"
#include "parity/parity.h"
#include "parity/sysfs.h"
#include "support/fake_kubelet.h"
#include "support/process.h"
#include "support/expect.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using kgpu::parity::Flat;
using kgpu::test::ChildProcess;
using kgpu::test::FakeKubelet;
using kgpu::test::TempDir;
using kgpu::test::eventually;

namespace {

const std::string kSource = KGPU_SOURCE_DIR;

struct Case {
    std::string name, fixture;
    std::vector<std::string> flags;
    std::string config;                  // a file of tests/parity/configs without .yaml, or ""
    std::vector<std::string> resources;  // what NVIDIA's plugin registers for it
    bool driver_root = false;            // needs a driver root (device specs, CDI)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.fixture << "/" << c.name; }

// One plugin with its fake kubelet.
struct Side {
    TempDir var_lib, run, aux;
    std::unique_ptr<FakeKubelet> kubelet;
    std::unique_ptr<ChildProcess> plugin;
    std::string dir() const { return var_lib.path() + "/kubelet/device-plugins"; }
    bool start_kubelet() {
        fs::create_directories(dir());
        kubelet = std::make_unique<FakeKubelet>(dir());
        return kubelet->start();
    }
    ~Side() {
        if (plugin && plugin->running()) {
            plugin->signal(SIGTERM);
            if (plugin->wait(10000) < 0) plugin->signal(SIGKILL);
        }
        kubelet.reset();
    }
};

struct Node {
    std::string node;
    TempDir sys, pod_dev, proc_driver;
    std::unique_ptr<kgpu::parity::DriverRoot> root;
};

std::string make_pod_dev(const std::string& driver_dev, const std::string& dir);

// Starts NVIDIA's plugin on side `s`.
// With a driver root, both plugins get it as the host's and as their container's
// (--driver-root-ctr-path, where NVIDIA's looks for the driver files of its CDI spec), and the
// same hook path for the CDI spec.
std::vector<std::string> root_flags(const Node& setup) {
    if (!setup.root) return {};
    return {"--driver-root-ctr-path", setup.root->path(), "--nvidia-cdi-hook-path", "/usr/bin/nvidia-cdi-hook"};
}

void start_nvidia(Side& s, const std::string& binary, const Case& c, const Node& setup) {
    std::vector<std::string> argv = {binary};
    if (setup.root) argv.insert(argv.end(), {"--driver-root", setup.root->path()});
    for (const auto& f : root_flags(setup)) argv.push_back(f);
    if (!c.config.empty()) argv.insert(argv.end(), {"--config-file", kSource + "/tests/parity/configs/" + c.config + ".yaml"});
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    // NVIDIA's plugin resolves NVML under the driver root, but its platform check dlopens
    // libnvidia-ml.so.1 by name: in its pod the toolkit has put the driver's libraries on the
    // loader's path, here LD_LIBRARY_PATH does.
    std::map<std::string, std::string> env = {
        {"KGPU_SIM_NODE", setup.node},
        {"LD_LIBRARY_PATH", setup.root ? setup.root->lib_dir() : fs::path(KGPU_SIM_LIBRARY).parent_path().string()}};
    std::vector<std::pair<std::string, std::string>> binds = {
        {s.var_lib.path(), "/var/lib"}, {s.run.path(), "/run"}, {setup.sys.path(), "/sys"}};
    if (setup.root) binds.emplace_back(setup.pod_dev.path(), "/dev");
    // NVIDIA's plugin finds MIG devices' capability nodes through the host's
    // /proc/driver/nvidia-caps/mig-minors (its device paths fail without it).
    if (setup.root) {
        binds.emplace_back(setup.root->proc_driver(), "/proc/driver");
    } else {
        setup.proc_driver.write("nvidia-caps/mig-minors", kgpu::parity::mig_minors(16));
        binds.emplace_back(setup.proc_driver.path(), "/proc/driver");
    }
    s.plugin = std::make_unique<ChildProcess>(kgpu::parity::in_namespace(binds, argv), env);
}

// The /dev of NVIDIA's plugin pod: NVIDIA_VISIBLE_DEVICES=all in its image makes the toolkit put
// every NVIDIA node there (its --pass-device-specs looks for the control nodes in its own /dev),
// beside the usual null, zero, full, random, urandom and tty.
std::string make_pod_dev(const std::string& driver_dev, const std::string& dir) {
    for (const auto& [name, dev] : std::vector<std::pair<std::string, dev_t>>{
             {"null", makedev(1, 3)}, {"zero", makedev(1, 5)}, {"full", makedev(1, 7)}, {"random", makedev(1, 8)},
             {"urandom", makedev(1, 9)}, {"tty", makedev(5, 0)}})
        if (::mknod((dir + "/" + name).c_str(), S_IFCHR | 0666, dev) != 0) return "mknod " + dir + "/" + name + " failed";
    for (const auto& e : fs::recursive_directory_iterator(driver_dev)) {
        const std::string to = dir + "/" + fs::relative(e.path(), driver_dev).string();
        struct stat st {};
        if (::lstat(e.path().c_str(), &st) != 0) return "lstat " + e.path().string() + " failed";
        if (S_ISDIR(st.st_mode)) fs::create_directories(to);
        else if (S_ISCHR(st.st_mode) && ::mknod(to.c_str(), st.st_mode, st.st_rdev) != 0) return "mknod " + to + " failed";
    }
    return "";
}

void start_kgpu(Side& s, const Case& c, const Node& setup) {
    // (kgpu's plugin reads NUMA nodes from /sys, else from NVML: the simulator's are the fixture's,
    // the same as in the sysfs NVIDIA's plugin sees.)
    std::vector<std::string> argv = {KGPU_BINARY, "device-plugin", "--device-plugin-path", s.dir(), "--cdi-spec-dir",
                                     s.run.path() + "/cdi"};
    if (setup.root) argv.insert(argv.end(), {"--nvidia-driver-root", setup.root->path(), "--proc-root", setup.root->proc()});
    else argv.insert(argv.end(), {"--nvml-library", KGPU_SIM_LIBRARY});
    for (const auto& f : root_flags(setup)) argv.push_back(f);
    if (!c.config.empty()) argv.insert(argv.end(), {"--config-file", kSource + "/tests/parity/configs/" + c.config + ".yaml"});
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    s.plugin = std::make_unique<ChildProcess>(argv, std::map<std::string, std::string>{{"KGPU_SIM_NODE", setup.node}});
}

// A comma-separated list with its items sorted, marked so when it had more than one.
std::string as_set(const std::string& value) {
    if (value.find(',') == std::string::npos) return value;
    std::vector<std::string> items;
    for (size_t from = 0;;) {
        const size_t comma = value.find(',', from);
        items.push_back(value.substr(from, comma - from));
        if (comma == std::string::npos) break;
        from = comma + 1;
    }
    std::sort(items.begin(), items.end());
    return fmt::format("{} (sorted)", fmt::join(items, ","));
}

// An Allocate answer (or its error) under `prefix`.
void allocate(Side& s, const std::string& resource, const std::vector<std::vector<std::string>>& containers,
              const std::string& prefix, Flat& out) {
    v1beta1::AllocateResponse resp;
    const auto st = s.kubelet->allocate(resource, containers, &resp);
    if (!st.ok()) {
        out[prefix + ".error"] = "gRPC code " + std::to_string(static_cast<int>(st.error_code()));
        return;
    }
    for (int i = 0; i < resp.container_responses_size(); ++i) {
        const auto& c = resp.container_responses(i);
        const std::string p = prefix + ".container" + std::to_string(i);
        // NVIDIA's plugin orders the devices of one answer through a Go map (MIG UUIDs into
        // indices, the CDI names of an answer), so the order changes from run to run: lists of
        // devices are compared as sets.
        for (const auto& [k, v] : c.envs())
            out[p + ".envs." + k] = k == "NVIDIA_VISIBLE_DEVICES" ? as_set(v) : v;
        for (const auto& m : c.mounts())
            out[p + ".mounts." + m.container_path()] = m.host_path() + (m.read_only() ? " ro" : " rw");
        for (const auto& d : c.devices()) out[p + ".devices." + d.container_path()] = d.host_path() + " " + d.permissions();
        // The CDI devices the annotations name, compared apart from the keys naming them (NVIDIA's
        // end in a random UUID per answer: cdi.k8s.io/nvidia-device-plugin_<UUID>).
        static const std::regex kAnswerId("_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$");
        std::vector<std::string> values;
        for (const auto& [k, v] : c.annotations()) {
            out[p + ".annotation-key." + std::regex_replace(k, kAnswerId, "_<answer UUID>")] = "present";
            values.push_back(as_set(v));
        }
        std::sort(values.begin(), values.end());
        for (size_t j = 0; j < values.size(); ++j) out[p + ".annotations[" + std::to_string(j) + "]"] = values[j];
        std::vector<std::string> cdi;
        for (int j = 0; j < c.cdi_devices_size(); ++j) cdi.push_back(c.cdi_devices(j).name());
        std::sort(cdi.begin(), cdi.end());
        for (size_t j = 0; j < cdi.size(); ++j) out[p + ".cdi_devices[" + std::to_string(j) + "]"] = cdi[j];
        if (c.envs().empty() && c.mounts().empty() && c.devices().empty() && c.annotations().empty() && c.cdi_devices().empty())
            out[p] = "(empty)";
    }
}

// What one side serves: registrations, devices, and Allocate answers for the same requests.
Flat observe(Side& s, const std::vector<std::string>& resources) {
    Flat f;
    for (const auto& r : resources) {
        auto reg = s.kubelet->wait_registered(r, 1, 30s);
        if (!reg) {
            f["resource." + r] = "(not registered)";
            continue;
        }
        f["resource." + r + ".version"] = reg->version;
        f["resource." + r + ".preferred_allocation"] = reg->preferred_allocation_available ? "true" : "false";
    }
    for (const auto& r : s.kubelet->resources())
        if (!f.contains("resource." + r + ".version")) f["resource." + r] = "registered";
    for (const auto& r : resources) {
        const auto devices = s.kubelet->devices(r);
        std::vector<std::string> ids;
        for (const auto& [id, st] : devices) {
            ids.push_back(id);
            std::string numa;
            for (long n : st.numa) numa += (numa.empty() ? "" : ",") + std::to_string(n);
            f["devices." + r + "." + id] = st.health + (numa.empty() ? "" : " numa " + numa);
        }
        if (ids.empty()) continue;
        f["devices." + r + ".count"] = std::to_string(ids.size());
        allocate(s, r, {{ids.front()}}, "allocate." + r + ".one", f);
        if (ids.size() >= 3) allocate(s, r, {{ids[0], ids[ids.size() / 2], ids.back()}}, "allocate." + r + ".three", f);
        if (ids.size() >= 2) allocate(s, r, {{ids.back()}, {ids[1]}}, "allocate." + r + ".two-containers", f);
    }
    return f;
}

class DevicePluginParity : public ::testing::TestWithParam<Case> {};

TEST_P(DevicePluginParity, SameDevicesAndAllocateAnswers) {
    KGPU_REQUIRE_PEER(plugin, "nvidia-device-plugin");
    const Case& c = GetParam();
    Node setup;
    setup.node = kSource + "/sim/nodes/" + c.fixture + ".yaml";
    kgpu::parity::write_sysfs(setup.sys, setup.node);
    if (c.driver_root) {
        setup.root = std::make_unique<kgpu::parity::DriverRoot>();
        if (const auto why = setup.root->make(setup.node); !why.empty()) {
            GTEST_SKIP() << why;
        }
        ASSERT_EQ(make_pod_dev(setup.root->path() + "/dev", setup.pod_dev.path()), "");
    }
    Side nv, kg;
    ASSERT_TRUE(nv.start_kubelet());
    ASSERT_TRUE(kg.start_kubelet());
    start_nvidia(nv, plugin, c, setup);
    start_kgpu(kg, c, setup);
    const Flat n = observe(nv, c.resources);
    const Flat k = observe(kg, c.resources);
    SCOPED_TRACE("NVIDIA's plugin:\n" + nv.plugin->err() + "\nkgpu:\n" + kg.plugin->err());
    kgpu::parity::expect_parity("device-plugin", c.fixture + "/" + c.name, k, n);
    // Not two empty results: NVIDIA's plugin served what the case says.
    for (const auto& r : c.resources) EXPECT_FALSE(n.contains("resource." + r)) << "NVIDIA's plugin did not register " << r;
}

const std::vector<std::string> kGpu = {"nvidia.com/gpu"};

std::vector<Case> cases() {
    // a100-mig: two GPUs in MIG mode and two not, which are nvidia.com/gpu under "mixed" (waited for
    // like the others: each plugin registers its resources one after another).
    const std::vector<std::string> mixed = {"nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb",
                                            "nvidia.com/gpu"};
    return {
        {"default", "t4x4", {}, "", kGpu},
        {"index", "t4x4", {"--device-id-strategy", "index"}, "", kGpu},
        {"volume-mounts", "t4x4", {"--device-list-strategy", "volume-mounts"}, "", kGpu},
        {"volume-mounts-index", "t4x4", {"--device-list-strategy", "volume-mounts", "--device-id-strategy", "index"}, "", kGpu},
        {"envvar-and-volume-mounts", "dgx-h100", {"--device-list-strategy", "envvar,volume-mounts"}, "", kGpu},
        {"pass-device-specs", "dgx-h100", {"--pass-device-specs"}, "", kGpu, true},
        {"cdi-annotations", "dgx-h100", {"--device-list-strategy", "cdi-annotations"}, "", kGpu, true},
        {"cdi-cri", "dgx-h100", {"--device-list-strategy", "cdi-cri"}, "", kGpu, true},
        {"cdi-both-index-envvar", "dgx-h100", {"--device-list-strategy", "envvar,cdi-annotations,cdi-cri", "--device-id-strategy", "index"}, "", kGpu, true},
        {"cdi-annotation-prefix", "t4x4", {"--device-list-strategy", "cdi-annotations", "--cdi-annotation-prefix", "example.com/cdi/"}, "", kGpu, true},
        {"gds-mofed", "t4x4", {"--gds-enabled", "--mofed-enabled"}, "", kGpu},
        {"mig-none", "a100-mig", {"--mig-strategy", "none"}, "", kGpu},
        {"mig-mixed", "a100-mig", {"--mig-strategy", "mixed"}, "", mixed},
        {"mig-mixed-index", "a100-mig", {"--mig-strategy", "mixed", "--device-id-strategy", "index"}, "", mixed},
        {"mig-mixed-device-specs", "a100-mig", {"--mig-strategy", "mixed", "--pass-device-specs"}, "", mixed, true},
        {"mig-single", "a100-mig-uniform", {"--mig-strategy", "single"}, "", kGpu},
        {"mig-single-volume-mounts", "a100-mig-uniform", {"--mig-strategy", "single", "--device-list-strategy", "volume-mounts"}, "", kGpu},
        {"time-slicing", "t4x4", {}, "time-slicing", kGpu},
        {"time-slicing-index", "t4x4", {"--device-id-strategy", "index"}, "time-slicing", kGpu},
        {"time-slicing-rename", "pcie-nvlink-pairs", {}, "time-slicing-rename", {"nvidia.com/gpu.shared"}},
        {"mig-mixed-time-slicing", "a100-mig", {"--mig-strategy", "mixed"}, "mig-time-slicing", mixed},
        {"mig-none-time-slicing", "a100-mig", {"--mig-strategy", "none"}, "mig-time-slicing", kGpu},
    };
}

std::string test_name(std::string n) {
    for (auto& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return n;
}

INSTANTIATE_TEST_SUITE_P(Configs, DevicePluginParity, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return test_name(info.param.fixture + "_" + info.param.name); });

// ---- bad flags and configs: exit code, or serving ---------------------------------------------------

struct BadCase {
    std::string name;
    std::vector<std::string> flags;
    std::string config;  // the file's text, or ""
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

// "exit N" once the plugin exited, "serving" once it registered a resource.
std::string outcome(Side& s) {
    const bool settled = eventually([&] { return !s.plugin->running() || !s.kubelet->resources().empty(); }, 30s);
    if (!settled) return "neither exited nor registered";
    if (!s.kubelet->resources().empty()) return "serving";
    return "exit " + std::to_string(s.plugin->wait(0));
}

class DevicePluginBadConfig : public ::testing::TestWithParam<BadCase> {};

TEST_P(DevicePluginBadConfig, ExitsOrServesAsNvidiaDoes) {
    KGPU_REQUIRE_PEER(plugin, "nvidia-device-plugin");
    const BadCase& b = GetParam();
    Node setup;
    setup.node = kSource + "/sim/nodes/t4x4.yaml";
    kgpu::parity::write_sysfs(setup.sys, setup.node);
    TempDir cfg;
    Case c{b.name, "t4x4", b.flags, "", kGpu};
    if (!b.config.empty()) c.flags.insert(c.flags.end(), {"--config-file", cfg.write("config.yaml", b.config)});
    Side nv, kg;
    ASSERT_TRUE(nv.start_kubelet());
    ASSERT_TRUE(kg.start_kubelet());
    start_nvidia(nv, plugin, c, setup);
    start_kgpu(kg, c, setup);
    const Flat n = {{"outcome", outcome(nv)}};
    const Flat k = {{"outcome", outcome(kg)}};
    SCOPED_TRACE("NVIDIA's plugin:\n" + nv.plugin->err() + "\nkgpu:\n" + kg.plugin->err());
    kgpu::parity::expect_parity("device-plugin", "bad-config/" + b.name, k, n);
}

std::vector<BadCase> bad_cases() {
    return {
        {"mig-strategy-flag", {"--mig-strategy", "triple"}, ""},
        {"device-list-strategy-flag", {"--device-list-strategy", "envvar,carrier-pigeon"}, ""},
        {"device-id-strategy-flag", {"--device-id-strategy", "serial"}, ""},
        {"config-not-yaml", {}, "version: v1\nflags: [unclosed\n"},
        {"config-version", {}, "version: v2\n"},
        {"config-no-version", {}, "flags:\n  migStrategy: none\n"},
        {"config-mig-strategy", {}, "version: v1\nflags:\n  migStrategy: triple\n"},
        {"config-replicas-zero", {}, "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 0\n"},
        {"config-replicas-negative", {}, "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: -2\n"},
        {"config-sharing-unknown-resource", {}, "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: example.com/gpu\n      replicas: 2\n"},
        {"config-unknown-key", {}, "version: v1\nflags:\n  failOnInitErorr: true\n"},
        {"config-missing-file", {"--config-file", "/nonexistent/config.yaml"}, ""},
        {"cdi-annotation-prefix-no-slash", {"--cdi-annotation-prefix", "cdi.k8s.io"}, ""},
        {"config-ok", {}, "version: v1\nflags:\n  migStrategy: none\n"},
    };
}

INSTANTIATE_TEST_SUITE_P(Inputs, DevicePluginBadConfig, ::testing::ValuesIn(bad_cases()),
                         [](const auto& info) { return test_name(info.param.name); });

}  // namespace
