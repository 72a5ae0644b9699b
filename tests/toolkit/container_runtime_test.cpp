// The built binary as kgpu-container-runtime, nvidia-cdi-hook and nvidia-smi, against the
// simulator, a fake driver root and a stand-in low-level runtime that records how it was called
// (no root, no containerd: the end-to-end test with both is containerd_e2e_test.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "driver_root.h"
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

const char* kGpu3 = "GPU-2fbe396f-df9c-d5a1-4b31-c1658bb71f80";

struct Runtime : ::testing::Test {
    kgpu::test::FakeDriverRoot drv;
    TempDir dir;
    std::string bin, fake_runc, config, bundle;
    std::map<std::string, std::string> env;

    Runtime() {
        bin = dir.path() + "/bin";
        fs::create_directories(bin);
        for (const char* name : {"kgpu-container-runtime", "nvidia-cdi-hook", "nvidia-smi"})
            fs::create_symlink(KGPU_BINARY, bin + "/" + name);
        // The low-level runtime: records argv and the spec it was handed.
        fake_runc = dir.write("fake-runc", "#!/bin/sh\n"
                                           "printf '%s\\n' \"$@\" > " + dir.path() + "/runc.argv\n"
                                           "b=.; prev=; for a in \"$@\"; do [ \"$prev\" = --bundle ] && b=$a; prev=$a; done\n"
                                           "[ -f \"$b/config.json\" ] && cp \"$b/config.json\" " + dir.path() + "/runc.config.json\n"
                                           "[ \"$1\" = --version ] && echo 'runc version fake'\n"
                                           "exit 0\n");
        ::chmod(fake_runc.c_str(), 0755);
        config = dir.write("rt.toml", "low-level-runtime = \"" + fake_runc + "\"\n"
                                      "driver-root = \"" + drv.path() + "\"\n"
                                      "nvml-library = \"" KGPU_SIM_LIBRARY "\"\n"
                                      "proc-root = \"" + drv.path() + "/proc\"\n"
                                      "hook-path = \"/usr/local/kgpu/nvidia-cdi-hook\"\n");
        bundle = dir.path() + "/bundle";
        env = {{"KGPU_RUNTIME_CONFIG", config}, {"KGPU_SIM_NODE", std::string(KGPU_SOURCE_DIR) + "/sim/nodes/dgx-h100.yaml"}};
    }
    void spec(const std::vector<std::string>& extra_env) {
        nlohmann::json s = nlohmann::json::parse(R"({"ociVersion":"1.0.2","process":{"args":["sh"],"env":["PATH=/bin"],"cwd":"/"},
            "root":{"path":"rootfs"},"linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}]}}})");
        for (const auto& e : extra_env) s["process"]["env"].push_back(e);
        dir.write("bundle/config.json", s.dump());
    }
    RunResult create(const std::string& program = "kgpu-container-runtime") {
        std::vector<std::string> argv;
        if (program == "kgpu") argv = {KGPU_BINARY, "container-runtime"};
        else argv = {bin + "/" + program};
        for (const std::string& a : {std::string("--root"), dir.path() + "/state", std::string("--log"), dir.path() + "/log.json",
                                     std::string("--log-format"), std::string("json"), std::string("create"),
                                     std::string("--bundle"), bundle, std::string("c1")})
            argv.push_back(a);
        return run_process(argv, env);
    }
    bool runc_called() const { return fs::exists(dir.path() + "/runc.argv"); }
    RunResult create_with_default() {
        spec({std::string("NVIDIA_VISIBLE_DEVICES=") + kGpu3});
        return create();
    }
};

TEST_F(Runtime, InjectsTheRequestedGpuAndExecsRuncWithTheSameArguments) {
    spec({std::string("NVIDIA_VISIBLE_DEVICES=") + kGpu3});
    auto r = create();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(slurp(dir.path() + "/runc.argv"), "--root\n" + dir.path() + "/state\n--log\n" + dir.path() +
                                                   "/log.json\n--log-format\njson\ncreate\n--bundle\n" + bundle + "\nc1\n");
    auto s = nlohmann::json::parse(slurp(dir.path() + "/runc.config.json"));
    std::vector<std::string> nodes;
    for (const auto& d : s["linux"]["devices"]) nodes.push_back(d["path"]);
    EXPECT_THAT(nodes, ::testing::UnorderedElementsAre("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia3"));
    EXPECT_EQ(s["hooks"]["createContainer"][0]["path"], "/usr/local/kgpu/nvidia-cdi-hook");
    EXPECT_EQ(r.err, "");  // the container's stderr stays clean
}

TEST_F(Runtime, NoRequestLeavesTheSpecByteForByte) {
    spec({"NVIDIA_VISIBLE_DEVICES=void"});
    const std::string before = slurp(bundle + "/config.json");
    struct stat st_before {};
    ::stat((bundle + "/config.json").c_str(), &st_before);
    auto r = create();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(slurp(dir.path() + "/runc.config.json"), before);
    struct stat st_after {};
    ::stat((bundle + "/config.json").c_str(), &st_after);
    EXPECT_EQ(st_before.st_ino, st_after.st_ino);  // not even rewritten
}

TEST_F(Runtime, UnmetRequirementFailsBeforeRuncWithTheReason) {
    spec({"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=12.8"});
    const std::string before = slurp(bundle + "/config.json");
    auto r = create();
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_FALSE(runc_called());
    EXPECT_THAT(r.err, HasSubstr("NVIDIA_REQUIRE_CUDA=\"cuda>=12.8\""));
    EXPECT_THAT(r.err, HasSubstr("driver 550.54.15"));
    EXPECT_THAT(r.err, HasSubstr("570.26"));
    EXPECT_EQ(slurp(bundle + "/config.json"), before);
    // containerd quotes the last error of runc's --log file in "OCI runtime create failed: ...".
    const std::string log = slurp(dir.path() + "/log.json");
    auto last = nlohmann::json::parse(log.substr(log.rfind('{')));
    EXPECT_EQ(last["level"], "error");
    EXPECT_THAT(last["msg"].get<std::string>(), HasSubstr("cuda>=12.8"));
}

TEST_F(Runtime, UnknownDeviceFailsBeforeRunc) {
    spec({"NVIDIA_VISIBLE_DEVICES=GPU-ffffffff-0000"});
    auto r = create("kgpu");  // the subcommand spelling
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_FALSE(runc_called());
    EXPECT_THAT(r.err, HasSubstr("unknown device 'GPU-ffffffff-0000'"));
}

TEST_F(Runtime, BrokenConfigFailsCreateButNotDelete) {
    env["KGPU_RUNTIME_CONFIG"] = dir.write("bad.toml", "low-level-runtime = \"" + fake_runc + "\"\nbogus = 1\n");
    spec({"NVIDIA_VISIBLE_DEVICES=0"});
    auto r = create();
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("bad.toml:2: unknown key 'bogus'"));
    EXPECT_FALSE(runc_called());
    // A broken config falls back to the defaults (runc in PATH) for everything else.
    fs::copy_file(fake_runc, bin + "/runc");
    env["PATH"] = bin;
    auto del = run_process({bin + "/kgpu-container-runtime", "--log", dir.path() + "/log.json", "delete", "c1"}, env);
    EXPECT_EQ(del.exit_code, 0) << del.err;
    EXPECT_EQ(slurp(dir.path() + "/runc.argv"), "--log\n" + dir.path() + "/log.json\ndelete\nc1\n");
    EXPECT_THAT(slurp(dir.path() + "/log.json"), HasSubstr("\"level\":\"warning\""));
}

TEST_F(Runtime, VersionAndHelp) {
    auto v = run_process({bin + "/kgpu-container-runtime", "--version"}, env);
    EXPECT_EQ(v.exit_code, 0) << v.err;
    EXPECT_THAT(v.out, HasSubstr("kgpu container runtime"));
    EXPECT_THAT(v.out, HasSubstr("runc version fake"));
    auto h = run_process({KGPU_BINARY, "container-runtime", "--help"}, env);
    EXPECT_EQ(h.exit_code, 0);
    EXPECT_THAT(h.out, HasSubstr("KGPU_RUNTIME_CONFIG"));
}

TEST_F(Runtime, NvidiaCdiHookIsKgpusHook) {
    spec({});
    fs::create_directories(bundle + "/rootfs");
    const std::string state = dir.write("state.json", "{\"bundle\":\"" + bundle + "\"}");
    auto r = run_process({bin + "/nvidia-cdi-hook", "create-symlinks", "--link", "libcuda.so.1::/usr/lib64/libcuda.so",
                          "--container-spec", state});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(fs::read_symlink(bundle + "/rootfs/usr/lib64/libcuda.so"), "libcuda.so.1");
    auto k = run_process({KGPU_BINARY, "hook", "create-symlinks", "--link", "x::/y", "--container-spec", state});
    EXPECT_EQ(k.exit_code, 0) << k.err;
    // Behind a global flag the main parser takes it, with the same result.
    auto g = run_process({KGPU_BINARY, "--log-level", "debug", "hook", "create-symlinks", "--link", "z::/w", "--container-spec", state});
    EXPECT_EQ(g.exit_code, 0) << g.err;
    EXPECT_EQ(fs::read_symlink(bundle + "/rootfs/w"), "z");
    auto unknown = run_process({bin + "/nvidia-cdi-hook", "no-such-hook"});
    EXPECT_NE(unknown.exit_code, 0);
}

// Issue #26: with kgpu as the hooks' binary the runtime writes one `chain` hook (one exec per
// container start), holding the steps it writes as separate hooks for any other binary, in order.
TEST_F(Runtime, HooksAreOneChainWhenTheHookBinaryIsKgpu) {
    spec({std::string("NVIDIA_VISIBLE_DEVICES=") + kGpu3});
    ASSERT_EQ(create().exit_code, 0);
    const auto apart = nlohmann::json::parse(slurp(dir.path() + "/runc.config.json"))["hooks"]["createContainer"];
    ASSERT_GT(apart.size(), 1u);  // /usr/local/kgpu/nvidia-cdi-hook is not this binary
    std::vector<std::string> expected = {"nvidia-cdi-hook", "chain"};
    for (size_t i = 0; i < apart.size(); ++i) {
        if (i > 0) expected.push_back("+");
        for (size_t k = 1; k < apart[i]["args"].size(); ++k) expected.push_back(apart[i]["args"][k]);
    }

    std::string text = slurp(config);
    text.replace(text.find("/usr/local/kgpu/nvidia-cdi-hook"), 31, bin + "/nvidia-cdi-hook");
    dir.write("rt.toml", text + "log-file = \"" + dir.path() + "/rt.log\"\n");
    spec({std::string("NVIDIA_VISIBLE_DEVICES=") + kGpu3});
    auto r = create();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto chained = nlohmann::json::parse(slurp(dir.path() + "/runc.config.json"))["hooks"]["createContainer"];
    ASSERT_EQ(chained.size(), 1u) << chained.dump();
    EXPECT_EQ(chained[0]["path"], bin + "/nvidia-cdi-hook");
    EXPECT_EQ(chained[0]["args"].get<std::vector<std::string>>(), expected);
    EXPECT_EQ(chained[0]["env"], apart[0]["env"]);
    EXPECT_THAT(slurp(dir.path() + "/rt.log"), HasSubstr("1 hooks (" + std::to_string(apart.size()) + " steps chained)"));
}

// `chain`: every step parsed before any runs, the state read once, steps in order, the first
// failure ends it naming its position; under either name and behind kgpu's global flags.
TEST_F(Runtime, ChainRunsItsStepsInOrderAndRefusesABadStepBeforeAnyRuns) {
    spec({});
    fs::create_directories(bundle + "/rootfs/d");
    const std::string state = dir.write("state.json", "{\"bundle\":\"" + bundle + "\"}");
    const std::string hook = bin + "/nvidia-cdi-hook";
    const std::string root = bundle + "/rootfs";
    // In order: the third step replaces the first one's link.
    auto ok = run_process({hook, "chain", "--container-spec", state, "create-symlinks", "--link", "a::/x", "+", "chmod", "--mode", "700",
                           "--path", "/d", "+", "create-symlinks", "--link", "b::/x", "--link", "b::/y"});
    ASSERT_EQ(ok.exit_code, 0) << ok.err;
    EXPECT_EQ(fs::read_symlink(root + "/x"), "b");
    EXPECT_EQ(fs::read_symlink(root + "/y"), "b");
    EXPECT_EQ(fs::status(root + "/d").permissions(), fs::perms::owner_all);

    // Refused while parsing: nothing done (exit 2), the step named.
    for (const auto& [tail, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
             {{"+", "no-such-hook"}, "step 2: expected a hook's name"},
             {{"+", "chmod", "--mode", "9z", "--path", "/d"}, "step 2 (chmod): --mode '9z'"},
             {{"+", "create-symlinks", "--link", "c::/w", "--container-spec", state}, "step 2: --container-spec goes before the first hook"},
             {{"+"}, "step 2: expected a hook's name"},
             {{"+", "update-ldcache", "--no-such-flag"}, "step 2 (update-ldcache)"}}) {
        std::vector<std::string> argv = {hook, "chain", "--container-spec", state, "create-symlinks", "--link", "c::/z"};
        argv.insert(argv.end(), tail.begin(), tail.end());
        auto r = run_process(argv);
        EXPECT_EQ(r.exit_code, 2) << says;
        EXPECT_THAT(r.err, HasSubstr(says));
        EXPECT_FALSE(fs::is_symlink(root + "/z")) << says;
    }
    // Failing while running: the steps before it stay done, the ones after never run (exit 1).
    auto bad = run_process({KGPU_BINARY, "hook", "chain", "--container-spec", state, "create-symlinks", "--link", "e::/e", "+",
                            "create-symlinks", "--link", "no-separator", "+", "create-symlinks", "--link", "f::/f"});
    EXPECT_EQ(bad.exit_code, 1);
    EXPECT_THAT(bad.err, HasSubstr("kgpu hook chain: step 2 (create-symlinks): create-symlinks: --link 'no-separator'"));
    EXPECT_TRUE(fs::is_symlink(root + "/e"));
    EXPECT_FALSE(fs::is_symlink(root + "/f"));
    // Behind kgpu's global flags (the main parser) and nvidia-cdi-hook's.
    auto g = run_process({KGPU_BINARY, "--log-level", "debug", "hook", "chain", "--container-spec", state, "create-symlinks", "--link",
                          "g::/g", "+", "create-symlinks", "--link", "h::/h"});
    EXPECT_EQ(g.exit_code, 0) << g.err;
    EXPECT_EQ(fs::read_symlink(root + "/h"), "h");
    auto d = run_process({hook, "--debug", "chain", "--container-spec=" + state, "create-symlinks", "--link", "i::/i"});
    EXPECT_EQ(d.exit_code, 0) << d.err;
    EXPECT_EQ(fs::read_symlink(root + "/i"), "i");
    auto help = run_process({KGPU_BINARY, "hook", "--help"});
    EXPECT_THAT(help.out, HasSubstr("chain"));
}

// Issue #26 goal 2: the node's inventory is kept between creates (inventory-cache) with a witness
// of the driver's /proc entries, device nodes and library; the simulator keeps /proc as the driver
// does (KGPU_SIM_PROC_ROOT).
struct RuntimeCache : Runtime {
    std::string proc, cache, events;
    RuntimeCache() {
        proc = dir.path() + "/hostproc";
        cache = dir.path() + "/run/kgpu/container-runtime/inventory.json";
        events = dir.write("sim-events", "");
        std::string text = slurp(config);
        const std::string from = "proc-root = \"" + drv.path() + "/proc\"";
        text.replace(text.find(from), from.size(), "proc-root = \"" + proc + "\"");
        dir.write("rt.toml", text + "inventory-cache = \"" + cache + "\"\n");
        env["KGPU_SIM_PROC_ROOT"] = proc;
        env["KGPU_SIM_EVENTS"] = events;
    }
    // The runtime's last line in runc's --log file.
    std::string last_log() {
        const std::string log = slurp(dir.path() + "/log.json");
        return nlohmann::json::parse(log.substr(log.rfind('{')))["msg"];
    }
    RunResult create_with(const std::vector<std::string>& request) {
        spec(request);
        return create();
    }
    void proc_instance(const std::string& rel) {
        fs::create_directories(fs::path(proc + "/" + rel).parent_path());
        std::ofstream(proc + "/" + rel) << "DeviceFileMinor: 4\n";
    }
    // What a loaded driver does before any container starts: its /proc entries exist (the
    // simulator writes them when a process first uses it).
    void load_driver() {
        auto e = env;
        e["KGPU_NVML_LIBRARY"] = KGPU_SIM_LIBRARY;
        auto r = run_process({KGPU_BINARY, "info"}, e);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        ASSERT_TRUE(fs::exists(proc + "/driver/nvidia/version"));
    }
};

TEST_F(RuntimeCache, TheSecondCreateNeverOpensNvml) {
    load_driver();
    auto first = create_with({std::string("NVIDIA_VISIBLE_DEVICES=") + kGpu3});
    ASSERT_EQ(first.exit_code, 0) << first.err;
    EXPECT_THAT(last_log(), HasSubstr("from NVML, cache written"));
    const std::string edited = slurp(dir.path() + "/runc.config.json");
    struct stat st {};
    ASSERT_EQ(::stat(cache.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    EXPECT_EQ(fs::status(fs::path(cache).parent_path()).permissions(), fs::perms::owner_all);

    // A simulator that cannot start: the create works only if NVML is never opened.
    env["KGPU_SIM_NODE"] = dir.path() + "/no-such-node.yaml";
    fs::remove(dir.path() + "/runc.config.json");
    auto second = create_with({std::string("NVIDIA_VISIBLE_DEVICES=") + kGpu3});
    ASSERT_EQ(second.exit_code, 0) << second.err;
    EXPECT_THAT(last_log(), HasSubstr("from cache"));
    EXPECT_EQ(slurp(dir.path() + "/runc.config.json"), edited);
}

TEST_F(RuntimeCache, AMigChangeIsSeenByTheNextCreate) {
    env["KGPU_SIM_NODE"] = std::string(KGPU_SOURCE_DIR) + "/sim/nodes/a100-mig.yaml";
    // GPU 0's first MIG device (GI 7, CI 0) and its capability nodes.
    const std::string mig = "MIG-4b69808b-66a3-1662-f86c-3b76eedd0860";
    drv.link("dev/nvidia-caps/nvidia-cap66", "/dev/urandom");
    drv.link("dev/nvidia-caps/nvidia-cap67", "/dev/urandom");
    load_driver();
    auto first = create_with({"NVIDIA_VISIBLE_DEVICES=" + mig});
    ASSERT_EQ(first.exit_code, 0) << first.err;
    EXPECT_THAT(last_log(), HasSubstr("cache written"));
    ASSERT_EQ(create_with({"NVIDIA_VISIBLE_DEVICES=" + mig}).exit_code, 0);
    EXPECT_THAT(last_log(), HasSubstr("from cache"));

    // MIG disabled on GPU 0: the driver drops its instances' /proc entries (here: the simulator,
    // when a process using it applies the change).
    dir.write("sim-events", "mig 0 off\n");
    load_driver();
    ASSERT_FALSE(fs::exists(proc + "/driver/nvidia/capabilities/gpu0/mig/gi7"));
    auto gone = create_with({"NVIDIA_VISIBLE_DEVICES=" + mig});
    EXPECT_EQ(gone.exit_code, 1);
    EXPECT_THAT(gone.err, HasSubstr("unknown device '" + mig + "'"));
    EXPECT_FALSE(runc_called() && slurp(dir.path() + "/runc.config.json").find(mig) != std::string::npos);
    // The whole GPU now, from what NVML said after the change.
    auto whole = create_with({"NVIDIA_VISIBLE_DEVICES=0"});
    ASSERT_EQ(whole.exit_code, 0) << whole.err;
    EXPECT_THAT(last_log(), HasSubstr("from cache"));  // kept by the failed create, with the new witness
}

TEST_F(RuntimeCache, AFileTheRuntimeDidNotWriteIsNeverTrusted) {
    load_driver();
    ASSERT_EQ(create_with({"NVIDIA_VISIBLE_DEVICES=0"}).exit_code, 0);
    // Writable by others: refused and replaced by a file of the runtime's own.
    ::chmod(cache.c_str(), 0666);
    ASSERT_EQ(create_with({"NVIDIA_VISIBLE_DEVICES=0"}).exit_code, 0);
    EXPECT_THAT(last_log(), HasSubstr("from NVML, cache written"));
    struct stat st {};
    ASSERT_EQ(::lstat(cache.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    // A symlink at the path: not followed for reading or writing; its target stays as it was.
    const std::string target = dir.write("elsewhere.json", slurp(cache));
    ::chmod(target.c_str(), 0600);
    fs::remove(cache);
    fs::create_symlink(target, cache);
    const std::string before = slurp(target);
    ASSERT_EQ(create_with({"NVIDIA_VISIBLE_DEVICES=0"}).exit_code, 0);
    EXPECT_THAT(last_log(), HasSubstr("from NVML, cache written"));
    EXPECT_FALSE(fs::is_symlink(cache));
    EXPECT_EQ(slurp(target), before);
    // Not JSON: NVML again, and a good file after.
    dir.write("run/kgpu/container-runtime/inventory.json", "{not json");
    ::chmod(cache.c_str(), 0600);
    ASSERT_EQ(create_with({"NVIDIA_VISIBLE_DEVICES=0"}).exit_code, 0);
    EXPECT_THAT(last_log(), HasSubstr("from NVML, cache written"));
    ASSERT_EQ(create_with({"NVIDIA_VISIBLE_DEVICES=0"}).exit_code, 0);
    EXPECT_THAT(last_log(), HasSubstr("from cache"));
}

// What no witness covers is asked of NVML again: a device the cached inventory does not know (a
// real driver gives MIG devices re-created in the same layout new UUIDs); "all" on a node with
// MIG-capable GPUs likewise (runtime_unit_test.cpp: Modify.AskedAgainOnly...).
TEST_F(RuntimeCache, WhatTheCacheCannotVouchForIsAskedOfNvml) {
    load_driver();
    ASSERT_EQ(create_with({"NVIDIA_VISIBLE_DEVICES=0"}).exit_code, 0);
    // The cache as it would be had GPU 3 got another UUID since (same witness).
    std::string text = slurp(cache);
    const std::string other = "GPU-2fbe396f-df9c-d5a1-4b31-000000000000";
    for (size_t at; (at = text.find(kGpu3)) != std::string::npos;) text.replace(at, std::string(kGpu3).size(), other);
    kgpu::test::TempDir scratch;
    fs::copy_file(scratch.write("inventory.json", text), cache, fs::copy_options::overwrite_existing);
    ASSERT_EQ(create_with({"NVIDIA_VISIBLE_DEVICES=0"}).exit_code, 0);
    EXPECT_THAT(last_log(), HasSubstr("from cache"));
    auto r = create_with({std::string("NVIDIA_VISIBLE_DEVICES=") + kGpu3});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(last_log(), HasSubstr("from NVML (the cached inventory did not serve this request), cache written"));
    EXPECT_EQ(slurp(cache).find(other), std::string::npos);
    ASSERT_EQ(create_with({std::string("NVIDIA_VISIBLE_DEVICES=") + kGpu3}).exit_code, 0);
    EXPECT_THAT(last_log(), HasSubstr("from cache"));
}

TEST_F(RuntimeCache, NothingIsKeptThatDisagreesWithTheDriversProc) {
    load_driver();
    // An instance the driver shows that NVML did not list (being created; on a GPU the simulator
    // does not keep /proc entries for, so they stay): not kept.
    proc_instance("driver/nvidia/capabilities/gpu9/mig/gi7/ci0/access");
    ASSERT_EQ(create_with({"NVIDIA_VISIBLE_DEVICES=0"}).exit_code, 0);
    EXPECT_THAT(last_log(), HasSubstr("not cached: NVML shows 0 MIG devices, the driver's /proc 1"));
    EXPECT_FALSE(fs::exists(cache));
    fs::remove_all(proc + "/driver/nvidia/capabilities/gpu9");
    ASSERT_EQ(create_with({"NVIDIA_VISIBLE_DEVICES=0"}).exit_code, 0);
    EXPECT_THAT(last_log(), HasSubstr("cache written"));
}

TEST_F(RuntimeCache, AHardLinkOrADirectoryOthersMayWriteIsNotUsed) {
    load_driver();
    ASSERT_EQ(create_with({"NVIDIA_VISIBLE_DEVICES=0"}).exit_code, 0);
    // A second name for the file: refused (it could be one planted before the file was replaced).
    fs::create_hard_link(cache, dir.path() + "/second-name");
    ASSERT_EQ(create_with({"NVIDIA_VISIBLE_DEVICES=0"}).exit_code, 0);
    EXPECT_THAT(last_log(), HasSubstr("from NVML, cache written"));
    ASSERT_EQ(create_with({"NVIDIA_VISIBLE_DEVICES=0"}).exit_code, 0);
    EXPECT_THAT(last_log(), HasSubstr("from cache"));  // the new file has one name
    // Its directory writable by others: nothing is written there.
    const std::string d = fs::path(cache).parent_path().string();
    fs::remove(cache);
    ::chmod(d.c_str(), 0777);
    ASSERT_EQ(create_with({"NVIDIA_VISIBLE_DEVICES=0"}).exit_code, 0);
    EXPECT_THAT(last_log(), HasSubstr("cache not written: " + d + ": not this user's own directory"));
    EXPECT_FALSE(fs::exists(cache));
    ::chmod(d.c_str(), 0700);
}

TEST_F(Runtime, WithoutALoadedDriverInProcEveryCreateAsksNvml) {
    auto r = create_with_default();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string log = slurp(dir.path() + "/log.json");
    EXPECT_THAT(log, HasSubstr("from NVML (no cache: no " + drv.path() + "/proc/driver/nvidia/version)"));
}

TEST_F(Runtime, NvidiaSmiSeesOnlyTheDevRootsGpus) {
    TempDir devroot;
    devroot.write("dev/nvidia3", "");
    env["KGPU_SIM_DEV_ROOT"] = devroot.path();
    env["KGPU_NVML_LIBRARY"] = KGPU_SIM_LIBRARY;
    auto l = run_process({bin + "/nvidia-smi", "-L"}, env);
    ASSERT_EQ(l.exit_code, 0) << l.err;
    EXPECT_EQ(l.out, std::string("GPU 0: NVIDIA H100 80GB HBM3 (UUID: ") + kGpu3 + ")\n");
    auto t = run_process({bin + "/nvidia-smi"}, env);
    ASSERT_EQ(t.exit_code, 0) << t.err;
    EXPECT_THAT(t.out, HasSubstr("00000000:5D:00.0 Off |"));  // Disp.A: nvmlDeviceGetDisplayActive
    EXPECT_THAT(t.out, Not(HasSubstr("00000000:18:00.0")));
    auto s = run_process({KGPU_BINARY, "smi", "-i", "7"}, env);
    EXPECT_EQ(s.exit_code, 6);
}

// MIG devices come from the inventory (profile from slices and memory), live values from NVML.
TEST_F(Runtime, NvidiaSmiListsMigDevicesWithTheirProfiles) {
    env["KGPU_SIM_NODE"] = std::string(KGPU_SOURCE_DIR) + "/sim/nodes/a100-mig.yaml";
    env["KGPU_NVML_LIBRARY"] = KGPU_SIM_LIBRARY;
    auto l = run_process({KGPU_BINARY, "smi", "-L", "-i", "1"}, env);
    ASSERT_EQ(l.exit_code, 0) << l.err;
    EXPECT_EQ(l.out,
              "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-51f34de5-fb30-d2be-2d0f-a742c74f58f8)\n"
              "  MIG 3g.40gb      Device  0: (UUID: MIG-7b8347a7-1fe5-eb5c-1670-8c5b74d9ad48)\n"
              "  MIG 2g.20gb      Device  1: (UUID: MIG-0b1774c7-2e0d-0f88-933a-65cbf69b2e16)\n"
              "  MIG 1g.10gb      Device  2: (UUID: MIG-6fdb8a69-cebe-b4c1-ea4b-353499403a8a)\n"
              "  MIG 1g.10gb      Device  3: (UUID: MIG-92710a87-5682-21ae-58be-98927cf50673)\n");
    auto t = run_process({KGPU_BINARY, "smi", "-i", "GPU-51f3"}, env);
    ASSERT_EQ(t.exit_code, 0) << t.err;
    EXPECT_THAT(t.out, HasSubstr("|  1    2   0    0 |                  0MiB / 40192MiB |  42   N/A |  3   0    2    0    0 |"));
    EXPECT_THAT(t.out, Not(HasSubstr("00000000:07:00.0")));
}

}  // namespace
