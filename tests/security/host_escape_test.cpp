// kgpu's container runtime and hooks run as root on the host and work on root file systems that
// tenants control. Each TEST here is one class of attack on them (issue #22; NVIDIA's CVEs of the
// same class named), tried the way an attacker would: a container whose image carries the
// hostile links, run through `kgpu-container-runtime` and Debian's runc (`runc run` on a bundle,
// no containerd), or the hook binary on a hostile root where runc adds nothing to the attack.
// After each attempt, a canary directory on the host must be exactly as before.
//
// Root only (runc, mknod, namespaces): every test skips with the reason otherwise. A test builds
// its world in milliseconds (no daemon, no image import); a container run takes a fraction of a
// second.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/canary.h"
#include "support/process.h"
#include "support/files.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using kgpu::test::RunResult;
using kgpu::test::TempDir;
using kgpu::test::tree_snapshot;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

using kgpu::test::slurp;

const char* kRunc = "/usr/sbin/runc";

// Why these tests cannot run here, or "".
std::string unavailable_reason() {
    if (::geteuid() != 0) return "runs only as root (runc, mknod, namespaces)";
    if (!fs::exists(kRunc)) return std::string("no ") + kRunc + " (scripts/setup installs Debian's runc)";
    if (!fs::exists("/bin/busybox")) return "no /bin/busybox (scripts/setup installs busybox-static)";
    return {};
}

// A container image's root file system, as a function that adds the attack to a minimal one
// (busybox as /bin/sh).
using Image = std::function<void(const std::string& rootfs)>;

// The host side the suite shares: a fake driver root (device nodes, the simulator as NVML), the
// runtime under the name containerd runs it by with NVIDIA's default and with the secure
// settings, a base runc spec, and the canary: a host directory with a real shared object (an
// ldconfig scanning it would leave a SONAME link) and a config file.
class HostEscape : public ::testing::Test {
protected:
    void SetUp() override {
        if (auto why = unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
        driver_ = dir_.path() + "/driver";
        for (unsigned i = 0; i < 8; ++i) node(fmt::format("/dev/nvidia{}", i), 195, i);
        node("/dev/nvidiactl", 195, 255);
        node("/dev/nvidia-uvm", 510, 0);
        fs::create_directories(driver_ + "/usr/lib64");
        fs::create_directories(driver_ + "/usr/bin");
        fs::copy_file(KGPU_SIM_LIBRARY, driver_ + "/usr/lib64/libnvidia-ml.so.550.54.15");
        fs::create_symlink("libnvidia-ml.so.550.54.15", driver_ + "/usr/lib64/libnvidia-ml.so.1");
        fs::create_symlink(KGPU_BINARY, driver_ + "/usr/bin/nvidia-smi");

        fs::create_directories(dir_.path() + "/bin");
        runtime_ = dir_.path() + "/bin/kgpu-container-runtime";
        fs::create_symlink(KGPU_BINARY, runtime_);
        const std::string common = fmt::format(
            "low-level-runtime = \"{}\"\ndriver-root = \"{}\"\nnvml-library = \"{}/usr/lib64/libnvidia-ml.so.550.54.15\"\n"
            "log-file = \"{}/kgpu-runtime.log\"\n",
            kRunc, driver_, driver_, dir_.path());
        config_ = dir_.write("runtime.toml", common);
        secure_config_ = dir_.write("secure.toml", common +
                                                       "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n"
                                                       "accept-nvidia-visible-devices-as-volume-mounts = true\n");

        canary_ = dir_.path() + "/canary";
        fs::create_directories(canary_ + "/lib");
        fs::copy_file(KGPU_SIM_LIBRARY, canary_ + "/lib/libnvidia-ml.so.550.54.15");
        dir_.write("canary/etc/ld.so.conf", "/usr/local/lib\n");

        auto spec = kgpu::test::run_process({kRunc, "spec", "--bundle", dir_.path()});
        ASSERT_EQ(spec.exit_code, 0) << spec.err;
        base_spec_ = json::parse(slurp(dir_.path() + "/config.json"));
    }

    void node(const std::string& rel, unsigned maj, unsigned min) {
        fs::create_directories(fs::path(driver_ + rel).parent_path());
        ASSERT_EQ(::mknod((driver_ + rel).c_str(), S_IFCHR | 0666, makedev(maj, min)), 0) << rel;
    }

    // A bundle whose root file system is busybox plus `image`, running `script`.
    std::string bundle(const Image& image, const std::string& script, const std::vector<std::string>& env) {
        const std::string b = fmt::format("{}/bundle{}", dir_.path(), ++runs_);
        const std::string rootfs = b + "/rootfs";
        fs::create_directories(rootfs + "/bin");
        fs::copy_file("/bin/busybox", rootfs + "/bin/busybox");
        fs::create_symlink("busybox", rootfs + "/bin/sh");
        if (image) image(rootfs);
        json spec = base_spec_;
        spec["root"] = {{"path", "rootfs"}, {"readonly", false}};
        spec["process"]["terminal"] = false;
        spec["process"]["args"] = {"/bin/sh", "-c", script};
        json e = {"PATH=/bin:/usr/bin"};
        for (const auto& v : env) e.push_back(v);
        spec["process"]["env"] = e;
        std::ofstream(b + "/config.json") << spec.dump(2);
        return b;
    }

    // `kgpu-container-runtime run` of the bundle (the runtime edits it, then execs runc).
    RunResult run(const std::string& b, bool secure = false) {
        return kgpu::test::run_process(
            {runtime_, "--root", dir_.path() + "/runc-state", "run", "--bundle", b, fmt::format("kgpu-security-{}", runs_)},
            {{"KGPU_RUNTIME_CONFIG", secure ? secure_config_ : config_},
             {"KGPU_SIM_NODE", std::string(KGPU_SOURCE_DIR) + "/sim/nodes/dgx-h100.yaml"}});
    }

    // The state file runc gives hooks on stdin, for a bundle whose root.path is `root`.
    std::string hook_state(const std::string& root) {
        const std::string b = fmt::format("{}/hook-bundle{}", dir_.path(), ++runs_);
        fs::create_directories(b);
        std::ofstream(b + "/config.json") << json{{"ociVersion", "1.0.2"}, {"root", {{"path", root}}}}.dump();
        return dir_.write(fmt::format("hook-bundle{}.state", runs_),
                          json{{"ociVersion", "1.0.2"}, {"id", "c"}, {"status", "creating"}, {"pid", 1}, {"bundle", b}}.dump());
    }

    std::string log() const { return slurp(dir_.path() + "/kgpu-runtime.log"); }

    TempDir dir_;
    std::string driver_, runtime_, config_, secure_config_, canary_;
    json base_spec_;
    int runs_ = 0;
};

// CVE-2025-23267 (issue #22 item 1): runc runs createContainer hooks before pivot_root, with the
// container's procfs at <rootfs>/proc, where /proc/1/root is the host's "/". An image routing its
// /etc, an ld.so.conf.d entry, a configured library folder or a system folder through it must
// not get update-ldcache or the host's ldconfig to create anything on the host.
TEST_F(HostEscape, UpdateLdcacheThroughTheContainersProc) {
    const std::string via_proc = "/proc/1/root" + canary_;
    auto conf = [](const std::string& rootfs, const std::string& text) {
        fs::create_directories(rootfs + "/etc/ld.so.conf.d");
        std::ofstream(rootfs + "/etc/ld.so.conf.d/evil.conf") << text;
    };
    struct Case {
        const char* name;
        Image image;
        bool starts;  // the link resolves harmlessly inside the root, so the container starts
    };
    const std::vector<Case> cases = {
        {"/etc -> /proc/1/root/<canary>", [&](const std::string& r) { fs::create_symlink(via_proc + "/etc", r + "/etc"); }, false},
        {"ld.so.conf.d entry /proc/1/root/<canary>/lib", [&](const std::string& r) { conf(r, via_proc + "/lib\n"); }, true},
        {"configured folder /opt/evil -> /proc/1/root/<canary>/lib",
         [&](const std::string& r) {
             conf(r, "/opt/evil\n");
             fs::create_directories(r + "/opt");
             fs::create_symlink(via_proc + "/lib", r + "/opt/evil");
         },
         true},
        {"system folder /lib64 -> /proc/1/root/<canary>/lib",
         [&](const std::string& r) { fs::create_symlink(via_proc + "/lib", r + "/lib64"); }, true},
        {"ld.so.conf includes /proc/1/root/<canary>/etc/ld.so.conf",
         [&](const std::string& r) { conf(r, "include " + via_proc + "/etc/ld.so.conf\n" + via_proc + "/lib\n"); }, true},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        const std::string before = tree_snapshot(canary_);
        // The container checks its own linker cache: update-ldcache did its job in the root.
        auto r = run(bundle(c.image, "test -s /etc/ld.so.cache && ls /usr/lib64", {"NVIDIA_VISIBLE_DEVICES=all"}));
        EXPECT_EQ(tree_snapshot(canary_), before);
        if (c.starts) {
            EXPECT_EQ(r.exit_code, 0) << r.out << r.err << log();
            EXPECT_THAT(r.out, HasSubstr("libnvidia-ml.so.1"));
        } else {
            EXPECT_NE(r.exit_code, 0) << r.out;
            EXPECT_THAT(r.err, HasSubstr("update-ldcache"));
        }
    }
}

// Issue #22 item 4: a container root spelled "//", "/." or "/tmp/.." is the host's root, and no
// hook may work there (create-symlinks would write on the host, update-ldcache run ldconfig on it).
TEST_F(HostEscape, HooksRefuseTheHostsRootHoweverSpelled) {
    const std::string before = tree_snapshot(canary_);
    for (const std::string root : {"/", "//", "/.", "/tmp/..", "/usr/../"}) {
        SCOPED_TRACE(root);
        const std::string state = hook_state(root);
        auto links = kgpu::test::run_process({KGPU_BINARY, "hook", "create-symlinks", "--container-spec", state, "--link",
                                              "pwned::" + canary_ + "/pwned"});
        EXPECT_NE(links.exit_code, 0);
        EXPECT_THAT(links.err, HasSubstr("host's root"));
        // With a missing ldconfig the fixed and the broken guard both stop before anything runs.
        auto ld = kgpu::test::run_process(
            {KGPU_BINARY, "hook", "update-ldcache", "--container-spec", state, "--ldconfig-path", "/nonexistent/ldconfig"});
        EXPECT_NE(ld.exit_code, 0);
        EXPECT_THAT(ld.err, HasSubstr("host's root"));
    }
    EXPECT_EQ(tree_snapshot(canary_), before);
}

// Issue #22 item 6a: update-application-profile replaces an existing 10-container.conf; a hard
// link the image put there (to a file elsewhere on the same file system) is not written through.
TEST_F(HostEscape, ApplicationProfileThroughAHardLink) {
    const std::string victim = canary_ + "/etc/ld.so.conf";
    ASSERT_EQ(::chmod(victim.c_str(), 0600), 0);
    const std::string before = tree_snapshot(canary_);
    const std::string root = dir_.path() + "/profile-root";
    fs::create_directories(root + "/dev");
    ASSERT_EQ(::mknod((root + "/dev/nvidia2").c_str(), S_IFCHR | 0666, makedev(195, 2)), 0);
    const std::string conf = root + "/etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf";
    fs::create_directories(fs::path(conf).parent_path());
    fs::create_hard_link(victim, conf);
    auto r = kgpu::test::run_process({KGPU_BINARY, "hook", "update-application-profile", "--container-spec", hook_state(root)});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(tree_snapshot(canary_), before);
    EXPECT_THAT(slurp(conf), HasSubstr("EGLVisibleDGPUDevices"));
}

// CVE-2025-23266 (NVIDIAScape): createContainer hooks that inherit the container's environment
// load whatever LD_PRELOAD names, as root on the host. The hooks kgpu adds carry no environment
// of the container's: the probe library, named by the container's LD_PRELOAD and LD_AUDIT, must
// never be loaded.
TEST_F(HostEscape, HooksDoNotTakeTheContainersEnvironment) {
    const std::string marker = canary_ + "/preloaded";
    const std::vector<std::string> hostile = {std::string("LD_PRELOAD=") + KGPU_PRELOAD_PROBE,
                                              std::string("LD_AUDIT=") + KGPU_PRELOAD_PROBE, "KGPU_PRELOAD_MARKER=" + marker};
    {
        // The attack is real here: with these variables in the container, a hook that carries no
        // env of its own (NVIDIA's before 1.17.8) gets the container's from runc and loads the probe.
        const std::string check = dir_.path() + "/probe-check";
        const std::string b = bundle(nullptr, "true", {std::string("LD_PRELOAD=") + KGPU_PRELOAD_PROBE, "KGPU_PRELOAD_MARKER=" + check});
        json spec = json::parse(slurp(b + "/config.json"));
        spec["hooks"]["createContainer"] = {{{"path", KGPU_BINARY}, {"args", {"kgpu", "--version"}}}};
        std::ofstream(b + "/config.json") << spec.dump();
        auto r = kgpu::test::run_process({kRunc, "--root", dir_.path() + "/runc-state", "run", "--bundle", b, "kgpu-security-probe"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        ASSERT_THAT(slurp(check), HasSubstr(KGPU_BINARY)) << "the probe was not loaded into a hook without env";
    }
    const std::string before = tree_snapshot(canary_);
    std::vector<std::string> env = hostile;
    env.push_back("NVIDIA_VISIBLE_DEVICES=all");
    const std::string b = bundle(nullptr, "ls /usr/lib64", env);
    auto r = run(b);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err << log();
    EXPECT_THAT(r.out, HasSubstr("libnvidia-ml.so.1"));  // the hooks ran
    EXPECT_EQ(tree_snapshot(canary_), before) << slurp(marker);
    // And the spec runc ran: no hook with an environment naming the loader's variables.
    const json spec = json::parse(slurp(b + "/config.json"));
    ASSERT_TRUE(spec.contains("hooks")) << spec.dump();
    for (const auto& [kind, hooks] : spec["hooks"].items())
        for (const auto& h : hooks) EXPECT_THAT(h.value("env", json::array()).dump(), Not(HasSubstr("LD_"))) << kind;
}

// CVE-2024-0132 (symlinked mount destinations): the image's /usr/lib64 and /usr/bin, where the
// driver's files are mounted and the SONAME links created, point outside the root (an absolute
// host path, a relative climb, a way through /proc). runc resolves mount destinations inside the
// root, and create-symlinks resolves with openat2(RESOLVE_IN_ROOT).
TEST_F(HostEscape, SymlinkedMountDestinations) {
    const std::string climb = "../../../../../../../../../../.." + canary_;
    struct Case {
        const char* name;
        Image image;
    };
    const std::vector<Case> cases = {
        {"absolute host paths",
         [&](const std::string& r) {
             fs::create_directories(r + "/usr");
             fs::create_symlink(canary_ + "/lib", r + "/usr/lib64");
             fs::create_symlink(canary_ + "/bin", r + "/usr/bin");
         }},
        {"relative climbs",
         [&](const std::string& r) {
             fs::create_directories(r + "/usr");
             fs::create_symlink(climb + "/lib", r + "/usr/lib64");
             fs::create_symlink(climb + "/bin", r + "/usr/bin");
         }},
        {"through /proc/1/root",
         [&](const std::string& r) {
             fs::create_directories(r + "/usr");
             fs::create_symlink("/proc/1/root" + canary_ + "/lib", r + "/usr/lib64");
             fs::create_symlink("/proc/1/root" + canary_ + "/bin", r + "/usr/bin");
         }},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        const std::string before = tree_snapshot(canary_);
        auto r = run(bundle(c.image, "ls /usr/lib64 /usr/bin", {"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=all"}));
        EXPECT_EQ(tree_snapshot(canary_), before) << r.out << r.err;
    }
}

// A GPU-less pod setting NVIDIA_VISIBLE_DEVICES=all under the secure settings
// (accept-nvidia-visible-devices-envvar-when-unprivileged = false) gets no GPU, no driver file
// and no hook.
TEST_F(HostEscape, GpuLessPodAskingForAllUnderTheSecureSettings) {
    const std::string b = bundle(nullptr, "ls /dev; ls /usr/lib64 2>&1; true", {"NVIDIA_VISIBLE_DEVICES=all"});
    const std::string spec_before = slurp(b + "/config.json");
    auto r = run(b, true);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err << log();
    EXPECT_THAT(r.out, Not(HasSubstr("nvidia")));
    EXPECT_THAT(r.out, Not(HasSubstr("libnvidia-ml")));
    EXPECT_EQ(slurp(b + "/config.json"), spec_before);  // not even rewritten
}

// Hostile OCI specs (what containerd writes comes from the pod spec and the image): the runtime
// refuses malformed ones with an error naming config.json, before runc or any hook runs, never
// crashes, and leaves the file as it was. The low-level runtime here is a recorder, so nothing
// the spec asks for is actually done.
TEST_F(HostEscape, HostileSpecsFailCleanly) {
    const std::string calls = dir_.path() + "/low-level.calls";
    const std::string recorder = dir_.write("bin/recorder", "#!/bin/sh\necho \"$*\" >> " + calls + "\n");
    ASSERT_EQ(::chmod(recorder.c_str(), 0755), 0);
    const std::string config = dir_.write("recorder.toml", fmt::format("low-level-runtime = \"{}\"\ndriver-root = \"{}\"\n"
                                                                       "nvml-library = \"{}/usr/lib64/libnvidia-ml.so.550.54.15\"\n",
                                                                       recorder, driver_, driver_));
    const json gpu_env = {"NVIDIA_VISIBLE_DEVICES=all"};
    const std::vector<std::pair<const char*, std::string>> specs = {
        {"not JSON", "{\"ociVersion\": "},
        {"an array", "[]"},
        {"process.env a string", json{{"process", {{"env", "NVIDIA_VISIBLE_DEVICES=all"}}}, {"root", {{"path", "rootfs"}}}}.dump()},
        {"env entries numbers", json{{"process", {{"env", {1, 2}}}}, {"root", {{"path", "rootfs"}}}}.dump()},
        {"mounts an object", json{{"process", {{"env", gpu_env}}}, {"root", {{"path", "rootfs"}}}, {"mounts", {{"a", 1}}}}.dump()},
        {"linux.devices a string",
         json{{"process", {{"env", gpu_env}}}, {"root", {{"path", "rootfs"}}}, {"linux", {{"devices", "x"}}}}.dump()},
        {"hooks a number", json{{"process", {{"env", gpu_env}}}, {"root", {{"path", "rootfs"}}}, {"hooks", 7}}.dump()},
        {"annotations not strings",
         json{{"process", {{"env", json::array()}}}, {"root", {{"path", "rootfs"}}}, {"annotations", {{"cdi.k8s.io/x", 5}}}}.dump()},
    };
    const std::string before = tree_snapshot(canary_);
    for (const auto& [name, text] : specs) {
        SCOPED_TRACE(name);
        const std::string b = fmt::format("{}/hostile{}", dir_.path(), ++runs_);
        fs::create_directories(b + "/rootfs");
        std::ofstream(b + "/config.json") << text;
        fs::remove(calls);
        auto r = kgpu::test::run_process({runtime_, "create", "--bundle", b, "c"},
                                         {{"KGPU_RUNTIME_CONFIG", config},
                                          {"KGPU_SIM_NODE", std::string(KGPU_SOURCE_DIR) + "/sim/nodes/dgx-h100.yaml"}});
        EXPECT_LT(r.exit_code, 128) << "crashed: " << r.err;
        EXPECT_EQ(slurp(b + "/config.json"), text);
        if (r.exit_code != 0) {
            EXPECT_THAT(r.err, HasSubstr("config.json"));
            EXPECT_FALSE(fs::exists(calls)) << slurp(calls);
        } else {
            // Passed on untouched (nothing asked for a GPU): runc gets it and judges it.
            EXPECT_THAT(slurp(calls), HasSubstr("create --bundle " + b));
        }
    }
    EXPECT_EQ(tree_snapshot(canary_), before);
}

}  // namespace
