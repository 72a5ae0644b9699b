// The container runtime's own trust decisions, tried as an attacker (or an unlucky operator)
// would (issue #22): which config file decides who gets GPUs, the hooks' command lines whatever
// kgpu's file is called, the legacy NVIDIA hook a spec may carry, a config.json built to crash
// the runtime, and the ldconfig spelling NVIDIA's own hook understands. The built binary runs as
// kgpu-container-runtime (copies and links of it) against the simulator, a fake driver root and
// a stand-in runc that records what it was handed. No root needed, except to run NVIDIA's hook.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "support/process.h"
#include "toolkit/driver_root.h"
#include "support/files.h"

namespace fs = std::filesystem;
using kgpu::test::run_process;
using kgpu::test::RunResult;
using kgpu::test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;

namespace {

using kgpu::test::slurp;

// kgpu as a regular file at `path` (a hard link when the file system allows, else a copy):
// /proc/self/exe then names `path`, as it names <install-dir>/kgpu on a node.
void place_kgpu(const std::string& path) {
    fs::create_directories(fs::path(path).parent_path());
    std::error_code ec;
    fs::create_hard_link(KGPU_BINARY, path, ec);
    if (ec) fs::copy_file(KGPU_BINARY, path);
}

struct Node : ::testing::Test {
    kgpu::test::FakeDriverRoot drv;
    TempDir dir;
    std::string fake_runc, bundle;
    std::map<std::string, std::string> env;

    Node() {
        // The low-level runtime: records argv and the spec it was handed.
        fake_runc = dir.write("fake-runc", "#!/bin/sh\n"
                                           "printf '%s\\n' \"$@\" > " + dir.path() + "/runc.argv\n"
                                           "b=.; prev=; for a in \"$@\"; do [ \"$prev\" = --bundle ] && b=$a; prev=$a; done\n"
                                           "[ -f \"$b/config.json\" ] && cp \"$b/config.json\" " + dir.path() + "/runc.config.json\n"
                                           "exit 0\n");
        ::chmod(fake_runc.c_str(), 0755);
        bundle = dir.path() + "/bundle";
        fs::create_directories(bundle + "/rootfs");
        env = {{"KGPU_SIM_NODE", std::string(KGPU_SOURCE_DIR) + "/sim/nodes/dgx-h100.yaml"}, {"PATH", "/usr/bin:/bin"}};
    }
    // The config's keys for this node, and `extra` lines.
    std::string config(const std::string& extra = "") const {
        return "low-level-runtime = \"" + fake_runc + "\"\n"
               "driver-root = \"" + drv.path() + "\"\n"
               "nvml-library = \"" KGPU_SIM_LIBRARY "\"\n"
               "proc-root = \"" + drv.path() + "/proc\"\n"
               "log-file = \"" + dir.path() + "/runtime.log\"\n" + extra;
    }
    void spec(const std::vector<std::string>& extra_env, const json& hooks = json()) {
        json s = json::parse(R"({"ociVersion":"1.0.2","process":{"args":["sh"],"env":["PATH=/bin"],"cwd":"/",
            "capabilities":{"bounding":["CAP_CHOWN"]}},"root":{"path":"rootfs"},
            "linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}]}}})");
        for (const auto& e : extra_env) s["process"]["env"].push_back(e);
        if (!hooks.is_null()) s["hooks"] = hooks;
        dir.write("bundle/config.json", s.dump());
    }
    RunResult create(const std::string& runtime) {
        fs::remove(dir.path() + "/runc.argv");
        fs::remove(dir.path() + "/runc.config.json");
        return run_process({runtime, "--root", dir.path() + "/state", "--log", dir.path() + "/log.json", "create", "--bundle",
                            bundle, "c1"},
                           env);
    }
    bool runc_called() const { return fs::exists(dir.path() + "/runc.argv"); }
    json handed_to_runc() const { return json::parse(slurp(dir.path() + "/runc.config.json")); }
    // Runs a createContainer hook as runc does: its path, its args as argv (argv[0] included),
    // the OCI state on stdin.
    RunResult run_hook(const json& hook) {
        const std::string state = dir.write("state.json", json{{"ociVersion", "1.0.2"}, {"id", "c1"}, {"pid", ::getpid()},
                                                               {"bundle", bundle}}.dump());
        std::vector<std::string> argv = {"/bin/bash", "-c", "exec -a \"$0\" \"$@\" < \"$STATE\"", hook["args"][0].get<std::string>(),
                                         hook["path"].get<std::string>()};
        for (size_t i = 1; i < hook["args"].size(); ++i) argv.push_back(hook["args"][i]);
        auto e = env;
        e["STATE"] = state;
        return run_process(argv, e);
    }
};

// Item 2: `kgpu runtime install --runtime-config FILE` wrote FILE, and containerd starts the
// runtime with neither KGPU_RUNTIME_CONFIG nor a flag: the runtime must read FILE (through the
// install's record next to the binary) and say so, and must never fall back to NVIDIA's permissive
// defaults, under which any unprivileged pod takes every GPU with NVIDIA_VISIBLE_DEVICES=all.
TEST_F(Node, TheInstalledRuntimeReadsTheConfigTheInstallWroteAndWithoutItStartsNoGpuContainer) {
    const std::string install_dir = dir.path() + "/usr/local/kgpu";
    place_kgpu(install_dir + "/kgpu");
    fs::create_symlink("kgpu", install_dir + "/kgpu-container-runtime");
    const std::string runtime = install_dir + "/kgpu-container-runtime";
    const std::string file = dir.write("etc/custom/runtime.toml", config("accept-nvidia-visible-devices-envvar-when-unprivileged = false\n"
                                                                         "accept-nvidia-visible-devices-as-volume-mounts = true\n"));
    const std::string record = dir.write("usr/local/kgpu/container-runtime-config.path", file + "\n");

    // An unprivileged pod's own NVIDIA_VISIBLE_DEVICES=all is ignored under the recorded settings.
    spec({"NVIDIA_VISIBLE_DEVICES=all"});
    auto r = create(runtime);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_TRUE(runc_called()) << "the recorded config's low-level-runtime was not used";
    EXPECT_FALSE(handed_to_runc()["linux"].contains("devices"));
    const std::string log = slurp(dir.path() + "/runtime.log");
    EXPECT_THAT(log, HasSubstr("config " + file + " (chosen by " + record + ")"));
    EXPECT_THAT(log, HasSubstr("ignoring NVIDIA_VISIBLE_DEVICES=all in an unprivileged container"));
    // The device plugin's answer (a /dev/null volume mount) still gets the GPU.
    json s = json::parse(slurp(bundle + "/config.json"));
    s["mounts"] = json::array({{{"destination", "/var/run/nvidia-container-devices/0"}, {"source", "/dev/null"},
                                {"type", "bind"}, {"options", {"bind", "ro"}}}});
    dir.write("bundle/config.json", s.dump());
    auto allocated = create(runtime);
    ASSERT_EQ(allocated.exit_code, 0) << allocated.err;
    EXPECT_TRUE(handed_to_runc()["linux"].contains("devices"));

    // The file gone: GPU containers are refused, naming it; the rest of the node keeps working.
    fs::remove(file);
    auto refused = create(runtime);
    EXPECT_EQ(refused.exit_code, 1);
    EXPECT_FALSE(runc_called());
    EXPECT_THAT(refused.err, HasSubstr(file));
    EXPECT_THAT(refused.err, HasSubstr("as recorded in " + record));
    EXPECT_THAT(refused.err, HasSubstr("a container that asks for GPUs is not started"));
    const std::string runc_log = slurp(dir.path() + "/log.json");  // containerd's "OCI runtime create failed: ..."
    EXPECT_THAT(runc_log, HasSubstr(file));
    env["PATH"] = fs::path(fake_runc).parent_path().string() + ":/usr/bin:/bin";  // the defaults' runc
    fs::copy_file(fake_runc, fs::path(fake_runc).parent_path() / "runc");
    spec({"NVIDIA_VISIBLE_DEVICES=void"});
    auto plain = create(runtime);
    EXPECT_EQ(plain.exit_code, 0) << plain.err;
    EXPECT_TRUE(runc_called());
    // KGPU_RUNTIME_CONFIG still wins over the record (DESIGN.md's fixed interface).
    env["KGPU_RUNTIME_CONFIG"] = dir.write("env.toml", config());
    spec({"NVIDIA_VISIBLE_DEVICES=0"});
    auto by_env = create(runtime);
    EXPECT_EQ(by_env.exit_code, 0) << by_env.err;
    EXPECT_TRUE(handed_to_runc()["linux"].contains("devices"));
}

// Item 3: with no hook-path and no nvidia-cdi-hook next to it, the runtime names itself in the
// hooks. As a regular file called kgpu-container-runtime, the hooks' argv
// `kgpu-container-runtime <hook> ...` used to exec runc with the hook's name: every GPU container
// failed to start. Each hook now runs as that hook.
TEST_F(Node, HooksRunWhateverNameTheBinaryHas) {
    for (const std::string name : {"kgpu-container-runtime", "kgpu", "nvidia-ctk", "kgpu-v2"}) {
        SCOPED_TRACE(name);
        const std::string bin = dir.path() + "/copies/" + name + "/" + name;
        place_kgpu(bin);
        env["KGPU_RUNTIME_CONFIG"] = dir.write("rt-" + name + ".toml", config());
        spec({"NVIDIA_VISIBLE_DEVICES=0"});
        // Dispatched as the runtime: by its name, or by the subcommand.
        auto r = name == "kgpu-container-runtime"
                     ? create(bin)
                     : run_process({bin, "container-runtime", "--root", dir.path() + "/state", "create", "--bundle", bundle, "c1"}, env);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const json hooks = handed_to_runc()["hooks"]["createContainer"];
        ASSERT_FALSE(hooks.empty());
        bool symlinks = false;
        for (json h : hooks) {
            EXPECT_EQ(h["path"], bin);
            const size_t at = h["args"][0] == name && (name == "kgpu" || name == "nvidia-ctk") ? 2 : 1;
            const std::string hook = h["args"][at];
            if (hook == "update-ldcache") continue;  // runs the host's ldconfig in a namespace: the hooks' own tests
            if (hook == "chain") {
                // Its binary is this kgpu: the steps come as one hook (issue #26); update-ldcache left
                // out as above.
                std::vector<std::vector<std::string>> steps(1);
                for (size_t i = at + 1; i < h["args"].size(); ++i) {
                    if (h["args"][i] == "+") steps.emplace_back();
                    else steps.back().push_back(h["args"][i]);
                }
                json args = json::array();
                for (size_t i = 0; i <= at; ++i) args.push_back(h["args"][i]);
                for (const auto& step : steps) {
                    symlinks = symlinks || step.front() == "create-symlinks";
                    if (step.front() == "update-ldcache") continue;
                    if (args.size() > at + 1) args.push_back("+");
                    for (const auto& a : step) args.push_back(a);
                }
                h["args"] = args;
            }
            fs::remove(dir.path() + "/runc.argv");
            auto run = run_hook(h);
            EXPECT_EQ(run.exit_code, 0) << hook << ": " << run.err << " " << h.dump();
            EXPECT_FALSE(runc_called()) << hook << " ran runc: " << slurp(dir.path() + "/runc.argv");
            symlinks = symlinks || hook == "create-symlinks";
        }
        EXPECT_TRUE(symlinks);
        EXPECT_EQ(fs::read_symlink(bundle + "/rootfs/usr/lib64/libcuda.so"), "libcuda.so.1");
        fs::remove_all(bundle + "/rootfs");
        fs::create_directories(bundle + "/rootfs");
    }
}

// Item 5: NVIDIA's legacy prestart hook (CRI-O's hooks.d, Docker's --gpus) is removed from every
// container, as NVIDIA's runtime does in its CDI modes; else a GPU-less pod fails ("no such
// file") or, where the legacy toolkit is installed, gets GPUs injected under its looser settings.
TEST_F(Node, NvidiasLegacyPrestartHookNeverReachesRunc) {
    env["KGPU_RUNTIME_CONFIG"] = dir.write("rt.toml", config());
    place_kgpu(dir.path() + "/bin/kgpu-container-runtime");
    const json legacy = {{"prestart", {{{"path", "/usr/bin/nvidia-container-runtime-hook"}, {"args", {"nvidia-container-runtime-hook", "prestart"}}},
                                       {{"path", "/usr/local/bin/audit-hook"}}}}};
    for (const char* request : {"NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=0"}) {
        SCOPED_TRACE(request);
        spec({request}, legacy);
        auto r = create(dir.path() + "/bin/kgpu-container-runtime");
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const json prestart = handed_to_runc()["hooks"]["prestart"];
        ASSERT_EQ(prestart.size(), 1u) << prestart.dump();
        EXPECT_EQ(prestart[0]["path"], "/usr/local/bin/audit-hook");
        EXPECT_THAT(slurp(dir.path() + "/runtime.log"), HasSubstr("removed NVIDIA's legacy prestart hook /usr/bin/nvidia-container-runtime-hook"));
    }
}

// Item 6: a config.json nested 70,000 levels deep crashed the runtime (stack overflow, rc 139)
// once it wrote the spec back: for a GPU, or to drop the legacy hook from a container without one.
// Now `create` fails with a message and runc never runs, while commands that do not read the
// spec still pass through.
TEST_F(Node, ADeeplyNestedSpecIsRefusedNotACrash) {
    env["KGPU_RUNTIME_CONFIG"] = dir.write("rt.toml", config());
    place_kgpu(dir.path() + "/bin/kgpu-container-runtime");
    const std::string deep = std::string(70000, '[') + std::string(70000, ']');
    for (const std::string request : {R"("env":["NVIDIA_VISIBLE_DEVICES=0"]})",
                                      R"("env":["NVIDIA_VISIBLE_DEVICES=void"]},"hooks":{"prestart":[{"path":"/usr/bin/nvidia-container-toolkit"}]})"}) {
        SCOPED_TRACE(request);
        dir.write("bundle/config.json", R"({"ociVersion":"1.0.2","process":{)" + request + R"(,"annotations":{"x":)" + deep + "}}");
        auto r = create(dir.path() + "/bin/kgpu-container-runtime");
        EXPECT_EQ(r.exit_code, 1) << r.err;  // 139: the stack overflowed
        EXPECT_THAT(r.err, HasSubstr("config.json: JSON nested deeper than 512 levels"));
        EXPECT_FALSE(runc_called());
    }
    auto del = run_process({dir.path() + "/bin/kgpu-container-runtime", "delete", "c1"}, env);
    EXPECT_EQ(del.exit_code, 0) << del.err;
    EXPECT_TRUE(runc_called());
}

// Item 5: with hook-path = NVIDIA's nvidia-cdi-hook, the update-ldcache hook gets the ldconfig as
// a plain host path: NVIDIA's hook adds the "@" itself, and "@/sbin/ldconfig" (kgpu's config
// spelling, which kgpu used to pass on) failed the container with "stat @/sbin/ldconfig". The
// default, "@/sbin/ldconfig", is no flag at all, as NVIDIA's runtime writes it (both hooks
// default to /sbin/ldconfig); another configured one is handed on as a plain path.
TEST_F(Node, NvidiasHookGetsTheLdconfigSpellingItUnderstands) {
    place_kgpu(dir.path() + "/bin/kgpu-container-runtime");
    auto ldcache_args = [&](const std::string& ldconfig) {
        env["KGPU_RUNTIME_CONFIG"] = dir.write("rt.toml", config("hook-path = \"/usr/bin/nvidia-cdi-hook\"\n"
                                                                 "ldconfig-path = \"" + ldconfig + "\"\n"));
        spec({"NVIDIA_VISIBLE_DEVICES=0"});
        auto r = create(dir.path() + "/bin/kgpu-container-runtime");
        EXPECT_EQ(r.exit_code, 0) << r.err;
        const json hooks = handed_to_runc()["hooks"]["createContainer"];
        json ldcache;
        for (const auto& h : hooks)
            if (h["args"][1] == "update-ldcache") ldcache = h;
        EXPECT_FALSE(ldcache.is_null()) << hooks.dump();
        return ldcache;
    };
    {
        const std::vector<std::string> args = ldcache_args("@/sbin/ldconfig")["args"];
        EXPECT_EQ(std::find(args.begin(), args.end(), "--ldconfig-path"), args.end());
    }
    json ldcache = ldcache_args("@/usr/sbin/ldconfig");
    const std::vector<std::string> args = ldcache["args"];
    auto at = std::find(args.begin(), args.end(), "--ldconfig-path");
    ASSERT_NE(at, args.end());
    EXPECT_EQ(*(at + 1), "/usr/sbin/ldconfig");

    // NVIDIA's own hook runs with that argv (root: it pivots into the container's root).
    std::string archive;
    for (const std::string& d : {std::string(KGPU_SOURCE_DIR) + "/../shared/peers/nvidia", std::string("/work/shared/peers/nvidia")})
        if (fs::exists(d + "/nvidia-cdi-hook.xz")) archive = d + "/nvidia-cdi-hook.xz";
    if (archive.empty() || ::geteuid() != 0 || !fs::exists("/usr/sbin/ldconfig") || !fs::exists("/usr/bin/unshare"))
        GTEST_SKIP() << "running NVIDIA's nvidia-cdi-hook needs it (../shared/peers/nvidia), root, ldconfig and unshare";
    const std::string hook = dir.path() + "/nvidia-cdi-hook";
    auto unpack = run_process({"/bin/sh", "-c", "xz -dc '" + archive + "' > '" + hook + "' && chmod 755 '" + hook + "'"});
    ASSERT_EQ(unpack.exit_code, 0) << unpack.err;
    ldcache["path"] = hook;
    fs::create_directories(bundle + "/rootfs/etc");  // every image has one; NVIDIA's hook writes ld.so.conf there
    // runc runs the hook with the container's root a mount point; here a bind mount in a private
    // mount namespace stands in.
    const std::string state = dir.write("state.json", json{{"ociVersion", "1.0.2"}, {"id", "c1"}, {"pid", ::getpid()},
                                                           {"bundle", bundle}}.dump());
    std::string command = "mount --make-rprivate / && mount --bind '" + bundle + "/rootfs' '" + bundle + "/rootfs' && exec '" + hook + "'";
    for (size_t i = 1; i < args.size(); ++i) command += " '" + args[i] + "'";
    auto run = run_process({"/usr/bin/unshare", "-m", "/bin/sh", "-c", command + " < '" + state + "'"});
    EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
    EXPECT_THAT(run.err, Not(HasSubstr("@/sbin/ldconfig")));
    EXPECT_TRUE(fs::exists(bundle + "/rootfs/etc/ld.so.cache"));
}

}  // namespace
