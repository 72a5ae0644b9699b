// `kgpu cdi generate` end to end: the built binary on the simulator's fixtures.
//  - NvidiaCtkShape: the driver root of nvidia-ctk v1.20's own `cdi generate` test (one GPU,
//    driver 999.88.77, libcuda with its .so.1 link and a vdpau library, IMEX channels),
//    rebuilt here, and the spec compared field by field with the one nvidia-ctk produces for
//    it (its expected YAML, written here as JSON from that shape), for each of its cases.
//  - A richer fake driver root (tests/cdi/fixtures/driver-root copied into a temp dir, device
//    nodes made by mknod as root, real ELF libraries built by this folder's CMakeLists) for what
//    that test does not cover: SONAME links, IPC sockets, firmware, binaries, DRM nodes, MIG.
// Every spec is validated against the CDI JSON schema (shared/facts/cdi-schema) by
// validate_cdi.py with Debian's python3-jsonschema.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ld_cache_builder.h"
#include "support/process.h"
#include "support/files.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using kgpu::test::run_process;
using kgpu::test::RunResult;
using kgpu::test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

using kgpu::test::slurp;

const std::string kSource = KGPU_SOURCE_DIR;

std::string schema_dir() {
    // The schema lives next to the repository in shared/; tests/cdi keeps no copy of it.
    for (const std::string& d : {kSource + "/../shared/facts/cdi-schema", std::string("/work/shared/facts/cdi-schema")})
        if (fs::exists(d + "/schema.json")) return d;
    return "";
}

bool is_root() { return ::geteuid() == 0; }

RunResult validate(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/bin/python3", kSource + "/tests/cdi/validate_cdi.py"};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv);
}

void expect_schema_valid(const std::string& spec_text, const std::string& ext) {
    const std::string dir = schema_dir();
    ASSERT_FALSE(dir.empty()) << "CDI schema not found next to the repository";
    TempDir t;
    auto v = validate({dir, t.write("spec." + ext, spec_text)});
    EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
}

// The driver root of nvidia-ctk's generate test, rebuilt: regular files stand in for device
// nodes there too (its test replaces the device lookups with fakes).
struct NvidiaRoot {
    TempDir dir;
    NvidiaRoot() {
        for (const char* f : {"dev/nvidia0", "dev/nvidiactl", "dev/nvidia-caps-imex-channels/channel0",
                              "dev/nvidia-caps-imex-channels/channel1", "dev/nvidia-caps-imex-channels/channel2047",
                              "dev/nvidia-caps/nvidia-cap1", "lib/x86_64-linux-gnu/libcuda.so.999.88.77",
                              "lib/x86_64-linux-gnu/vdpau/libvdpau_nvidia.so.999.88.77"})
            dir.write(f, "");
        fs::create_symlink("libcuda.so.999.88.77", dir.path() + "/lib/x86_64-linux-gnu/libcuda.so.1");
    }
    // The graphics files of a desktop driver (Debian's layout for the X.Org modules), in the
    // places nvidia-ctk's graphics discoverer looks: EGL/GBM/Wayland libraries, the GBM
    // allocator, the Vulkan producer, GLX, X.Org modules (a second nvidia_drv.so further down
    // the search path, not taken), GLVND/EGL/X11/OpenCL configs in /etc and /usr/share (the
    // GLVND one in both), Vulkan files in /usr/share and at the root itself (GKE).
    void add_graphics() const {
        for (const char* f : {"lib/x86_64-linux-gnu/libnvidia-egl-gbm.so.1.1.2",
                              "lib/x86_64-linux-gnu/libnvidia-egl-wayland.so.1.1.17",
                              "lib/x86_64-linux-gnu/libnvidia-allocator.so.999.88.77",
                              "lib/x86_64-linux-gnu/libnvidia-vulkan-producer.so.999.88.77",
                              "lib/x86_64-linux-gnu/libGLX_nvidia.so.999.88.77",
                              "lib/x86_64-linux-gnu/nvidia/xorg/nvidia_drv.so",
                              "lib/x86_64-linux-gnu/nvidia/xorg/libglxserver_nvidia.so.999.88.77",
                              "usr/lib/xorg/modules/drivers/nvidia_drv.so",
                              "etc/glvnd/egl_vendor.d/10_nvidia.json",
                              "usr/share/glvnd/egl_vendor.d/10_nvidia.json",
                              "usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
                              "usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
                              "usr/share/nvidia/nvoptix.bin",
                              "usr/share/X11/xorg.conf.d/10-nvidia.conf",
                              "etc/OpenCL/vendors/nvidia.icd",
                              "usr/share/vulkan/icd.d/nvidia_icd.json",
                              "vulkan/icd.d/nvidia_layers.json",
                              "usr/share/vulkan/implicit_layer.d/nvidia_layers.json"})
            dir.write(f, "{}");
        fs::create_symlink("libnvidia-egl-gbm.so.1.1.2", dir.path() + "/lib/x86_64-linux-gnu/libnvidia-egl-gbm.so.1");
        fs::create_symlink("libnvidia-allocator.so.999.88.77", dir.path() + "/lib/x86_64-linux-gnu/libnvidia-allocator.so.1");
        // A directory where a config file is looked for is not taken.
        fs::create_directories(dir.path() + "/etc/X11/xorg.conf.d/nvidia-drm-outputclass.conf");
    }
    const std::string& path() const { return dir.path(); }
};

RunResult generate_nvidia(const NvidiaRoot& root, std::vector<std::string> extra) {
    std::vector<std::string> argv = {KGPU_BINARY, "cdi", "generate", "--nvml-library", KGPU_SIM_LIBRARY,
                                     "--driver-root", root.path(), "--sysfs-root", root.path() + "/sys",
                                     "--proc-root", root.path() + "/proc", "--vendor", "example.com", "--class",
                                     "device", "--device-name-strategy", "index", "--nvidia-cdi-hook-path",
                                     "/usr/bin/nvidia-cdi-hook", "--format", "json"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    // XDG_DATA_DIRS empty: the default /usr/local/share:/usr/share, whatever the test's environment.
    return run_process(argv, {{"KGPU_SIM_NODE", kSource + "/tests/cdi/fixtures/nodes/one-gpu.yaml"}, {"XDG_DATA_DIRS", ""}});
}

json hook(const std::vector<std::string>& args) {
    return {{"hookName", "createContainer"}, {"path", "/usr/bin/nvidia-cdi-hook"}, {"args", args},
            {"env", {"NVIDIA_CTK_DEBUG=false"}}};
}

json file_mount(const std::string& root, const std::string& path) {
    return {{"hostPath", root + path}, {"containerPath", path}, {"options", {"ro", "nosuid", "nodev", "rbind", "rprivate"}}};
}

// What nvidia-ctk v1.20 writes for that root, with the hooks `disabled` left out.
json nvidia_expected(const std::string& root, const std::set<std::string>& disabled) {
    const json gpu0 = {{"path", "/dev/nvidia0"}, {"hostPath", root + "/dev/nvidia0"}};
    json hooks = json::array();
    auto add = [&](const std::string& name, std::vector<std::string> args) {
        if (disabled.contains(name) || disabled.contains("all")) return;
        args.insert(args.begin(), {"nvidia-cdi-hook", name});
        hooks.push_back(hook(args));
    };
    add("create-symlinks", {"--link", "libcuda.so.1::/lib/x86_64-linux-gnu/libcuda.so"});
    add("enable-cuda-compat", {"--host-driver-version=999.88.77"});
    add("update-ldcache", {"--folder", "/lib/x86_64-linux-gnu", "--folder", "/lib/x86_64-linux-gnu/vdpau"});
    add("disable-device-node-modification", {});
    add("update-application-profile", {});
    json edits = {{"env", {"NVIDIA_CTK_LIBCUDA_DIR=/lib/x86_64-linux-gnu", "NVIDIA_VISIBLE_DEVICES=void"}},
                  {"deviceNodes", {{{"path", "/dev/nvidiactl"}, {"hostPath", root + "/dev/nvidiactl"}}}}};
    if (!hooks.empty()) edits["hooks"] = hooks;
    edits["mounts"] = {file_mount(root, "/lib/x86_64-linux-gnu/libcuda.so.999.88.77"),
                       file_mount(root, "/lib/x86_64-linux-gnu/vdpau/libvdpau_nvidia.so.999.88.77")};
    return {{"cdiVersion", "0.5.0"},
            {"kind", "example.com/device"},
            {"devices",
             {{{"name", "0"}, {"containerEdits", {{"deviceNodes", {gpu0}}}}},
              {{"name", "all"}, {"containerEdits", {{"deviceNodes", {gpu0}}}}}}},
            {"containerEdits", edits}};
}

// What nvidia-ctk v1.20 writes for that root with add_graphics()'s files (graphics.go's
// discoverers merged before the driver's): the graphics links in a create-symlinks hook of their
// own ahead of the driver's (whose links now include libGLX_indirect.so.0), the graphics files
// mounted read-only (but libnvidia-allocator, which the driver's mounts have), sorted with the rest.
json nvidia_graphics_expected(const std::string& root, const std::set<std::string>& disabled) {
    json spec = nvidia_expected(root, disabled);
    json& edits = spec["containerEdits"];
    const std::string lib = "/lib/x86_64-linux-gnu";
    if (!disabled.contains("create-symlinks") && !disabled.contains("all")) {
        json& hooks = edits["hooks"];
        hooks[0] = hook({"nvidia-cdi-hook", "create-symlinks", "--link", "libGLX_nvidia.so.999.88.77::" + lib + "/libGLX_indirect.so.0",
                         "--link", "libcuda.so.1::" + lib + "/libcuda.so"});
        hooks.insert(hooks.begin(),
                     hook({"nvidia-cdi-hook", "create-symlinks", "--link", "../libnvidia-allocator.so.1::" + lib + "/gbm/nvidia-drm_gbm.so",
                           "--link", "libnvidia-vulkan-producer.so.999.88.77::" + lib + "/libnvidia-vulkan-producer.so",
                           "--link", "libglxserver_nvidia.so.999.88.77::" + lib + "/nvidia/xorg/libglxserver_nvidia.so"}));
    }
    auto at = [&](const std::string& container, const std::string& host) {
        json m = file_mount(root, container);
        m["hostPath"] = root + host;
        return m;
    };
    edits["mounts"] = {
        file_mount(root, lib + "/libGLX_nvidia.so.999.88.77"),
        file_mount(root, lib + "/libcuda.so.999.88.77"),
        file_mount(root, lib + "/libnvidia-allocator.so.999.88.77"),
        file_mount(root, lib + "/libnvidia-egl-gbm.so.1.1.2"),
        file_mount(root, lib + "/libnvidia-egl-wayland.so.1.1.17"),
        file_mount(root, lib + "/libnvidia-vulkan-producer.so.999.88.77"),
        file_mount(root, "/etc/OpenCL/vendors/nvidia.icd"),
        file_mount(root, "/etc/glvnd/egl_vendor.d/10_nvidia.json"),
        at("/etc/vulkan/icd.d/nvidia_icd.json", "/usr/share/vulkan/icd.d/nvidia_icd.json"),
        at("/etc/vulkan/icd.d/nvidia_layers.json", "/vulkan/icd.d/nvidia_layers.json"),
        at("/etc/vulkan/implicit_layer.d/nvidia_layers.json", "/usr/share/vulkan/implicit_layer.d/nvidia_layers.json"),
        file_mount(root, lib + "/vdpau/libvdpau_nvidia.so.999.88.77"),
        file_mount(root, "/usr/share/nvidia/nvoptix.bin"),
        file_mount(root, lib + "/nvidia/xorg/libglxserver_nvidia.so.999.88.77"),
        file_mount(root, lib + "/nvidia/xorg/nvidia_drv.so"),
        file_mount(root, "/usr/share/X11/xorg.conf.d/10-nvidia.conf"),
        file_mount(root, "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json"),
        file_mount(root, "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json"),
        file_mount(root, "/usr/share/glvnd/egl_vendor.d/10_nvidia.json"),
    };
    return spec;
}

// Field by field, so a difference names the field; then the whole.
void expect_same_spec(const json& got, const json& want) {
    EXPECT_EQ(got["cdiVersion"], want["cdiVersion"]);
    EXPECT_EQ(got["kind"], want["kind"]);
    ASSERT_EQ(got["devices"].size(), want["devices"].size()) << got["devices"].dump(2);
    for (size_t i = 0; i < want["devices"].size(); ++i) {
        EXPECT_EQ(got["devices"][i]["name"], want["devices"][i]["name"]) << i;
        EXPECT_EQ(got["devices"][i]["containerEdits"], want["devices"][i]["containerEdits"]) << i;
    }
    for (const char* field : {"env", "deviceNodes", "hooks", "mounts"}) {
        const json g = got["containerEdits"].value(field, json());
        const json w = want["containerEdits"].value(field, json());
        EXPECT_EQ(g, w) << field << "\nkgpu:\n" << g.dump(2) << "\nnvidia-ctk:\n" << w.dump(2);
    }
    EXPECT_EQ(got, want);
}

}  // namespace

TEST(NvidiaCtkShape, DefaultSpec) {
    NvidiaRoot root;
    auto r = generate_nvidia(root, {});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_same_spec(json::parse(r.out), nvidia_expected(root.path(), {}));
    expect_schema_valid(r.out, "json");
}

TEST(NvidiaCtkShape, DisabledHooks) {
    NvidiaRoot root;
    auto one = generate_nvidia(root, {"--disable-hook", "enable-cuda-compat"});
    ASSERT_EQ(one.exit_code, 0) << one.err;
    expect_same_spec(json::parse(one.out), nvidia_expected(root.path(), {"enable-cuda-compat"}));
    auto two = generate_nvidia(root, {"--disable-hook", "enable-cuda-compat", "--disable-hooks", "update-ldcache"});
    ASSERT_EQ(two.exit_code, 0) << two.err;
    expect_same_spec(json::parse(two.out), nvidia_expected(root.path(), {"enable-cuda-compat", "update-ldcache"}));
    auto all = generate_nvidia(root, {"--disable-hook", "all"});
    ASSERT_EQ(all.exit_code, 0) << all.err;
    expect_same_spec(json::parse(all.out), nvidia_expected(root.path(), {"all"}));
    expect_schema_valid(all.out, "json");
}

TEST(NvidiaCtkShape, GraphicsFiles) {
    NvidiaRoot root;
    root.add_graphics();
    auto r = generate_nvidia(root, {});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_same_spec(json::parse(r.out), nvidia_graphics_expected(root.path(), {}));
    expect_schema_valid(r.out, "json");
    // Both create-symlinks hooks go with the hook.
    auto off = generate_nvidia(root, {"--disable-hook", "create-symlinks"});
    ASSERT_EQ(off.exit_code, 0) << off.err;
    expect_same_spec(json::parse(off.out), nvidia_graphics_expected(root.path(), {"create-symlinks"}));
}

// --config-search-path: the configuration files are looked for in those host directories only
// (the Vulkan files then fall back to the root itself).
TEST(NvidiaCtkShape, ConfigSearchPath) {
    NvidiaRoot root;
    root.add_graphics();
    auto r = generate_nvidia(root, {"--config-search-path", root.path() + "/etc"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::set<std::string> containers;
    const json spec = json::parse(r.out);
    for (const auto& m : spec["containerEdits"]["mounts"]) containers.insert(m["containerPath"].get<std::string>());
    EXPECT_TRUE(containers.contains("/etc/glvnd/egl_vendor.d/10_nvidia.json"));
    EXPECT_TRUE(containers.contains("/etc/vulkan/icd.d/nvidia_layers.json"));  // <root>/vulkan
    EXPECT_FALSE(containers.contains("/usr/share/glvnd/egl_vendor.d/10_nvidia.json"));
    EXPECT_FALSE(containers.contains("/etc/vulkan/icd.d/nvidia_icd.json"));  // only in /usr/share
    EXPECT_FALSE(containers.contains("/usr/share/nvidia/nvoptix.bin"));
}

// A driver installed where only ld.so.conf.d points (here /usr/lib64/nvidia, a .run install's
// choice on some distributions): found through the driver root's /etc/ld.so.cache, and in the
// spec exactly as one in a standard directory (mounts, NVIDIA_CTK_LIBCUDA_DIR, update-ldcache,
// links). Without the cache it is the missing-libraries error, which names the cache.
TEST(NvidiaCtkShape, DriverFoundThroughTheLdSoCache) {
    NvidiaRoot root;
    const std::string dir = "/usr/lib64/nvidia";
    fs::create_directories(root.path() + dir + "/vdpau");
    for (const char* f : {"/libcuda.so.999.88.77", "/vdpau/libvdpau_nvidia.so.999.88.77", "/libcuda.so.1"})
        fs::rename(root.path() + "/lib/x86_64-linux-gnu" + f, root.path() + dir + f);
    auto missing = generate_nvidia(root, {});
    EXPECT_EQ(missing.exit_code, 1);
    EXPECT_THAT(missing.err, HasSubstr(root.path() + "/etc/ld.so.cache (missing)"));
    root.dir.write("etc/ld.so.cache", kgpu::test::ld_so_cache({{"libcuda.so.1", dir + "/libcuda.so.1"}}));
    auto r = generate_nvidia(root, {});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::string want = nvidia_expected(root.path(), {}).dump();
    for (std::string::size_type at; (at = want.find("/lib/x86_64-linux-gnu")) != std::string::npos;)
        want.replace(at, std::string("/lib/x86_64-linux-gnu").size(), dir);
    expect_same_spec(json::parse(r.out), json::parse(want));
    // A cache that is not one: a warning naming it, and the missing-libraries error.
    root.dir.write("etc/ld.so.cache", "garbage that is long enough to be looked at\n");
    auto bad = generate_nvidia(root, {});
    EXPECT_EQ(bad.exit_code, 1);
    EXPECT_THAT(bad.err, HasSubstr("warn"));
    EXPECT_THAT(bad.err, HasSubstr(root.path() + "/etc/ld.so.cache: not an ld.so.cache"));
}

TEST(NvidiaCtkShape, InvalidDeviceIdIsAnError) {
    NvidiaRoot root;
    auto r = generate_nvidia(root, {"--device-id", "99"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("'99'"));
    EXPECT_TRUE(r.out.empty());
}

TEST(NvidiaCtkShape, ImexChannels) {
    NvidiaRoot root;
    auto r = generate_nvidia(root, {"--mode", "imex", "--class", "imex-channel"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto spec = json::parse(r.out);
    auto node = [&](const std::string& n) {
        return json{{"path", "/dev/nvidia-caps-imex-channels/channel" + n},
                    {"hostPath", root.path() + "/dev/nvidia-caps-imex-channels/channel" + n}};
    };
    const json want = {
        {"cdiVersion", "0.5.0"},
        {"kind", "example.com/imex-channel"},
        {"devices",
         {{{"name", "0"}, {"containerEdits", {{"deviceNodes", {node("0")}}}}},
          {{"name", "1"}, {"containerEdits", {{"deviceNodes", {node("1")}}}}},
          {{"name", "2047"}, {"containerEdits", {{"deviceNodes", {node("2047")}}}}},
          {{"name", "all"}, {"containerEdits", {{"deviceNodes", {node("0"), node("1"), node("2047")}}}}}}},
        {"containerEdits", {{"env", {"NVIDIA_VISIBLE_DEVICES=void"}}}}};
    expect_same_spec(spec, want);
    expect_schema_valid(r.out, "json");
}

TEST(NvidiaCtkShape, HookBinaryChoices) {
    NvidiaRoot root;
    for (const auto& [flag, argv0] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"--nvidia-ctk-path=/usr/local/bin/nvidia-ctk", {"nvidia-ctk", "hook"}},
             {"--nvidia-cdi-hook-path=/usr/local/bin/kgpu", {"kgpu", "hook"}},
             {"--hook-path=/opt/nvidia/nvidia-cdi-hook", {"nvidia-cdi-hook"}}}) {
        auto r = generate_nvidia(root, {flag});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const auto hooks = json::parse(r.out)["containerEdits"]["hooks"];
        ASSERT_EQ(hooks.size(), 5u) << flag;
        for (const auto& h : hooks) {
            EXPECT_EQ(h["path"], flag.substr(flag.find('=') + 1));
            for (size_t i = 0; i < argv0.size(); ++i) EXPECT_EQ(h["args"][i], argv0[i]) << flag;
        }
    }
    // Through the environment too.
    std::vector<std::string> argv = {KGPU_BINARY, "cdi", "generate", "--nvml-library", KGPU_SIM_LIBRARY, "--driver-root",
                                     root.path(), "--format", "json"};
    auto env = run_process(argv, {{"KGPU_SIM_NODE", kSource + "/tests/cdi/fixtures/nodes/one-gpu.yaml"},
                                  {"NVIDIA_CTK_CDI_HOOK_PATH", "/srv/kgpu"}});
    ASSERT_EQ(env.exit_code, 0) << env.err;
    EXPECT_EQ(json::parse(env.out)["containerEdits"]["hooks"][0]["args"][1], "hook");
}

// nvidia-ctk's own environment: NVIDIA_CTK_DRIVER_ROOT and NVIDIA_CTK_DEV_ROOT name the roots
// (after kgpu's flags and NVIDIA_DRIVER_ROOT), and its --config-search-path is taken.
TEST(NvidiaCtkShape, NvidiaCtkEnvironmentAndFlags) {
    NvidiaRoot root;
    std::vector<std::string> argv = {KGPU_BINARY, "cdi", "generate", "--nvml-library", KGPU_SIM_LIBRARY,
                                     "--format", "json", "--config-search-path", "/etc/nvidia-container-runtime"};
    const std::string node = kSource + "/tests/cdi/fixtures/nodes/one-gpu.yaml";
    auto r = run_process(argv, {{"KGPU_SIM_NODE", node}, {"NVIDIA_CTK_DRIVER_ROOT", root.path()},
                                {"NVIDIA_CTK_DEV_ROOT", root.path()}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("ignored"), std::string::npos) << r.err;  // used: the graphics configs are looked for there
    const auto spec = json::parse(r.out);
    EXPECT_NE(spec.dump().find(root.path() + "/lib/x86_64-linux-gnu/libcuda.so.999.88.77"), std::string::npos);
    // kgpu's own variable wins over nvidia-ctk's.
    auto both = run_process(argv, {{"KGPU_SIM_NODE", node}, {"NVIDIA_CTK_DRIVER_ROOT", root.path()},
                                   {"NVIDIA_DRIVER_ROOT", root.path() + "/nowhere"}});
    EXPECT_EQ(both.exit_code, 1);
    EXPECT_NE(both.err.find(root.path() + "/nowhere"), std::string::npos) << both.err;
}

TEST(NvidiaCtkShape, NoAllDeviceAndNoneDevice) {
    NvidiaRoot root;
    auto r = generate_nvidia(root, {"--no-all-device"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto spec = json::parse(r.out);
    ASSERT_EQ(spec["devices"].size(), 1u);
    EXPECT_EQ(spec["devices"][0]["name"], "0");
    auto none = generate_nvidia(root, {"--device-id", "none"});
    ASSERT_EQ(none.exit_code, 0) << none.err;
    auto ns = json::parse(none.out);
    ASSERT_EQ(ns["devices"].size(), 1u);
    EXPECT_EQ(ns["devices"][0]["name"], "none");
    EXPECT_EQ(ns["devices"][0]["containerEdits"]["env"], json::array({"NVCT_EMPTY_DEVICE="}));
}

// ---- kgpu's richer fake driver root ----

namespace {

// A driver root in a temp dir: the committed fixture plus /dev nodes with fixed numbers, the
// real ELF libraries built next to this test, sockets, DRM nodes and their sysfs entries.
struct FakeRoot {
    TempDir dir;
    FakeRoot() {
        fs::copy(kSource + "/tests/cdi/fixtures/driver-root", dir.path(),
                 fs::copy_options::recursive | fs::copy_options::copy_symlinks);
        fs::create_directories(dir.path() + "/dev/nvidia-caps");
        fs::create_directories(dir.path() + "/dev/dri/by-path");
        node("/dev/nvidiactl", 195, 255);
        node("/dev/nvidia-uvm", 508, 0);
        node("/dev/nvidia-uvm-tools", 508, 1);
        for (unsigned i = 0; i < 8; ++i) node(fmt::format("/dev/nvidia{}", i), 195, i);
        for (unsigned c = 1; c < 543; ++c) node(fmt::format("/dev/nvidia-caps/nvidia-cap{}", c), 511, c);
        // GPU 0 of t4x4 (bus 0000:1a:00.0) has DRM nodes and by-path links.
        node("/dev/dri/card1", 226, 1);
        node("/dev/dri/renderD128", 226, 128);
        fs::create_symlink("../card1", dir.path() + "/dev/dri/by-path/pci-0000:1a:00.0-card");
        fs::create_symlink("../renderD128", dir.path() + "/dev/dri/by-path/pci-0000:1a:00.0-render");
        for (const char* n : {"card1", "renderD128"}) dir.write(std::string("sys/bus/pci/devices/0000:1a:00.0/drm/") + n + "/dev", "");
        // Real ELF libraries with SONAMEs, replacing the stand-ins of version 550.54.15.
        const std::string lib = dir.path() + "/usr/lib/x86_64-linux-gnu/";
        for (const char* name : {"libcuda.so.550.54.15", "libnvidia-ptxjitcompiler.so.550.54.15"}) fs::remove(lib + name);
        fs::copy_file(std::string(KGPU_FAKE_DRIVER_DIR) + "/libcuda.so.550.54.15", lib + "libcuda.so.550.54.15");
        fs::copy_file(std::string(KGPU_FAKE_DRIVER_DIR) + "/libnvidia-ptxjitcompiler.so.550.54.15",
                      lib + "libnvidia-ptxjitcompiler.so.550.54.15");
        fs::create_symlink("libnvidia-ptxjitcompiler.so.550.54.15", lib + "libnvidia-ptxjitcompiler.so.1");
        fs::create_symlink("libcuda.so.1", lib + "libcuda.so");
        dir.write("run/nvidia-fabricmanager/socket", "");
        fs::create_directories(dir.path() + "/tmp/nvidia-mps");
        const std::string imex = dir.write("usr/bin/nvidia-imex", "#!/bin/sh\n");
        ::chmod(imex.c_str(), 0755);
    }
    void node(const std::string& path, unsigned maj, unsigned min) const {
        const std::string p = dir.path() + path;
        if (is_root()) {
            ASSERT_EQ(::mknod(p.c_str(), S_IFCHR | 0666, makedev(maj, min)), 0) << p;
            ::chmod(p.c_str(), 0666);
        } else {
            std::ofstream(p) << "stand-in\n";
        }
    }
    const std::string& path() const { return dir.path(); }
};

RunResult generate(const std::string& fixture, const FakeRoot& root, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {KGPU_BINARY, "cdi", "generate", "--nvml-library", KGPU_SIM_LIBRARY,
                                     "--driver-root", root.path(), "--proc-root", root.path() + "/proc",
                                     "--sysfs-root", root.path() + "/sys", "--nvidia-cdi-hook-path",
                                     "/usr/bin/nvidia-cdi-hook"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_process(argv, {{"KGPU_SIM_NODE", kSource + "/sim/nodes/" + fixture + ".yaml"}});
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
    return s;
}

const json* device(const json& spec, const std::string& name) {
    for (const auto& d : spec["devices"])
        if (d["name"] == name) return &d;
    return nullptr;
}

class CdiFixture : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(CdiFixture, YamlAndJsonAreSchemaValidEqualAndMatchTheExpectedSpec) {
    ASSERT_FALSE(schema_dir().empty()) << "CDI schema not found next to the repository";
    FakeRoot root;
    TempDir out;
    auto yaml = generate(GetParam(), root, {"--output", out.path() + "/spec.yaml"});
    ASSERT_EQ(yaml.exit_code, 0) << yaml.err;
    auto js = generate(GetParam(), root, {"--format", "json"});
    ASSERT_EQ(js.exit_code, 0) << js.err;
    const std::string json_path = out.write("spec.json", js.out);
    auto v = validate({schema_dir(), out.path() + "/spec.yaml", json_path});
    EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
    auto same = validate({"--equal", out.path() + "/spec.yaml", json_path});
    EXPECT_EQ(same.exit_code, 0) << same.out << same.err;

    if (!is_root()) GTEST_SKIP() << "not root: device nodes are regular files, expected-file comparison skipped";
    const std::string got = replace_all(slurp(out.path() + "/spec.yaml"), root.path(), "@ROOT@");
    const std::string expected_path = kSource + "/tests/cdi/expected/" + GetParam() + ".yaml";
    if (std::getenv("KGPU_UPDATE_EXPECTED")) std::ofstream(expected_path) << got;
    EXPECT_EQ(got, slurp(expected_path)) << "regenerate with KGPU_UPDATE_EXPECTED=1 after checking the difference";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CdiFixture, ::testing::Values("dgx-h100", "t4x4", "a100-mig", "pcie-nvlink-pairs"),
                         [](const auto& info) {
                             std::string n = info.param;
                             for (auto& c : n)
                                 if (c == '-') c = '_';
                             return n;
                         });

TEST(CdiGenerate, DriverFilesLinksSocketsAndDrmNodes) {
    FakeRoot root;
    auto r = generate("dgx-h100", root, {"--format", "json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto spec = json::parse(replace_all(r.out, root.path(), "@ROOT@"));
    const auto& edits = spec["containerEdits"];
    // SONAME links from the real ELF files, plus libcuda.so.
    EXPECT_EQ(edits["hooks"][0]["args"][1], "create-symlinks");
    std::vector<std::string> links;
    for (const auto& a : edits["hooks"][0]["args"])
        if (a != "--link") links.push_back(a);
    EXPECT_THAT(links, ::testing::Contains("libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so"));
    EXPECT_THAT(links, ::testing::Contains("libcuda.so.550.54.15::/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
    EXPECT_THAT(links,
                ::testing::Contains("libnvidia-ptxjitcompiler.so.550.54.15::/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1"));
    std::map<std::string, json> mounts;
    for (const auto& m : edits["mounts"]) mounts[m["containerPath"]] = m;
    EXPECT_EQ(mounts["/run/nvidia-persistenced/socket"]["options"],
              json::array({"nosuid", "nodev", "rbind", "rprivate", "noexec"}));
    EXPECT_TRUE(mounts.contains("/run/nvidia-fabricmanager/socket"));
    EXPECT_FALSE(mounts.contains("/tmp/nvidia-mps"));  // a directory: nvidia-ctk's locator skips it
    EXPECT_TRUE(mounts.contains("/usr/bin/nvidia-imex"));
    EXPECT_TRUE(mounts.contains("/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin"));
    EXPECT_FALSE(mounts.contains("/usr/lib/x86_64-linux-gnu/libz.so.1.2.13"));
    EXPECT_EQ(edits["env"][0], "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu");
    // Mounts are sorted by depth, then path.
    std::vector<std::string> order;
    for (const auto& m : edits["mounts"]) order.push_back(m["containerPath"]);
    auto sorted = order;
    std::stable_sort(sorted.begin(), sorted.end(), [](const std::string& a, const std::string& b) {
        auto da = std::count(a.begin(), a.end(), '/'), db = std::count(b.begin(), b.end(), '/');
        return da != db ? da < db : a < b;
    });
    EXPECT_EQ(order, sorted);
}

TEST(CdiGenerate, DrmNodesAndByPathLinksOfAGpu) {
    FakeRoot root;
    auto r = generate("t4x4", root, {"--format", "json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto spec = json::parse(r.out);
    const json* gpu0 = device(spec, "0");
    ASSERT_NE(gpu0, nullptr);
    std::vector<std::string> nodes;
    for (const auto& n : (*gpu0)["containerEdits"]["deviceNodes"]) nodes.push_back(n["path"]);
    EXPECT_EQ(nodes, (std::vector<std::string>{"/dev/nvidia0", "/dev/dri/card1", "/dev/dri/renderD128"}));
    const auto& hooks = (*gpu0)["containerEdits"]["hooks"];
    ASSERT_EQ(hooks.size(), 1u);
    EXPECT_EQ(hooks[0]["args"], json::array({"nvidia-cdi-hook", "create-symlinks", "--link",
                                             "../card1::/dev/dri/by-path/pci-0000:1a:00.0-card", "--link",
                                             "../renderD128::/dev/dri/by-path/pci-0000:1a:00.0-render"}));
    if (is_root()) {
        const auto& n = (*gpu0)["containerEdits"]["deviceNodes"][0];
        EXPECT_EQ(n["type"], "c");
        EXPECT_EQ(n["major"], 195);
        EXPECT_EQ(n["fileMode"], 0666);
        EXPECT_EQ(n["permissions"], "rwm");
    }
    // GPU 1 has none.
    EXPECT_EQ((*device(spec, "1"))["containerEdits"]["deviceNodes"].size(), 1u);
}

TEST(CdiGenerate, MigDevicesCarryTheParentAndCapsNodesWithNumbers) {
    FakeRoot root;
    auto r = generate("a100-mig", root, {"--format", "json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto spec = json::parse(r.out);
    const json* mig = device(spec, "1:0");
    ASSERT_NE(mig, nullptr);
    const auto& nodes = (*mig)["containerEdits"]["deviceNodes"];
    ASSERT_EQ(nodes.size(), 3u);
    EXPECT_EQ(nodes[0]["path"], "/dev/nvidia1");
    // GPU minor 1, GI 2, CI 0 in the driver's layout: 3 + 1*135 + 2*9 = 156, CI 0 = 157.
    EXPECT_EQ(nodes[1]["path"], "/dev/nvidia-caps/nvidia-cap156");
    EXPECT_EQ(nodes[2]["path"], "/dev/nvidia-caps/nvidia-cap157");
    if (is_root()) {
        EXPECT_EQ(nodes[1]["major"], 511);
        EXPECT_EQ(nodes[1]["minor"], 156);
        EXPECT_EQ(nodes[1]["type"], "c");
    }
    EXPECT_NE(device(spec, "MIG-7b8347a7-1fe5-eb5c-1670-8c5b74d9ad48"), nullptr);
    // GPUs 0 and 1 are in MIG mode: no full-GPU device for them, as nvidia-ctk.
    EXPECT_EQ(device(spec, "0"), nullptr);
    EXPECT_EQ(device(spec, "1"), nullptr);
    EXPECT_NE(device(spec, "2"), nullptr);
}

TEST(CdiGenerate, TypeIndexNamesAndNoHooks) {
    FakeRoot root;
    auto r = generate("a100-mig", root, {"--format", "json", "--device-name-strategy", "type-index", "--no-hooks"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto spec = json::parse(r.out);
    EXPECT_EQ(spec["devices"][0]["name"], "all");  // sorted by name: "all" < "gpu0" < "mig..."
    EXPECT_NE(device(spec, "gpu2"), nullptr);
    EXPECT_NE(device(spec, "mig1:0"), nullptr);
    EXPECT_FALSE(spec["containerEdits"].contains("hooks"));
}

TEST(CdiGenerate, OutputFileIsJsonByExtensionAndLeavesNoTemporaryFiles) {
    FakeRoot root;
    TempDir out;
    auto r = generate("t4x4", root, {"--output", out.path() + "/nvidia.json", "--vendor", "example.com", "--class", "acc"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto spec = json::parse(slurp(out.path() + "/nvidia.json"));
    EXPECT_EQ(spec["kind"], "example.com/acc");
    size_t files = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(out.path())) ++files;
    EXPECT_EQ(files, 1u);
    // t4x4 runs driver 535.161.08: its libraries, not the 550 ones of the same root.
    EXPECT_THAT(spec.dump(), HasSubstr("libcuda.so.535.161.08"));
    EXPECT_THAT(spec.dump(), Not(HasSubstr("libcuda.so.550.54.15")));
}

TEST(CdiGenerate, NoDriverLibrariesIsAnErrorUnlessAllowed) {
    TempDir empty_root;
    std::vector<std::string> argv = {KGPU_BINARY, "cdi", "generate", "--nvml-library", KGPU_SIM_LIBRARY, "--driver-root",
                                     empty_root.path(), "--format", "json"};
    const std::map<std::string, std::string> env = {{"KGPU_SIM_NODE", kSource + "/sim/nodes/t4x4.yaml"}};
    auto r = run_process(argv, env);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("no driver libraries lib*.so.535.161.08"));
    EXPECT_THAT(r.err, HasSubstr(empty_root.path() + "/usr/lib/x86_64-linux-gnu"));
    EXPECT_TRUE(r.out.empty());
    argv.push_back("--allow-missing-libraries");
    auto allowed = run_process(argv, env);
    ASSERT_EQ(allowed.exit_code, 0) << allowed.err;
    EXPECT_FALSE(json::parse(allowed.out)["containerEdits"].contains("mounts"));
}

TEST(CdiGenerate, ErrorsNameTheInput) {
    FakeRoot root;
    auto empty = generate("empty", root);
    EXPECT_EQ(empty.exit_code, 1);
    EXPECT_THAT(empty.err, HasSubstr("no devices"));
    auto strategy = generate("t4x4", root, {"--device-name-strategy", "index,serial"});
    EXPECT_EQ(strategy.exit_code, 2);
    EXPECT_THAT(strategy.err, HasSubstr("'serial'"));
    auto mode = generate("t4x4", root, {"--mode", "csv"});
    EXPECT_EQ(mode.exit_code, 2);
    EXPECT_THAT(mode.err, HasSubstr("--mode 'csv'"));
    fs::remove(root.path() + "/proc/driver/nvidia-caps/mig-minors");
    auto minors = generate("a100-mig", root);
    EXPECT_EQ(minors.exit_code, 1);
    EXPECT_THAT(minors.err, HasSubstr("mig-minors"));
    const std::string file = root.dir.write("a-file", "");
    auto unwritable = generate("t4x4", root, {"--output", file + "/dir/spec.yaml"});
    EXPECT_EQ(unwritable.exit_code, 1);
    EXPECT_THAT(unwritable.err, HasSubstr(file + " is not a directory"));
}

// Issue #22: /var/run/cdi does not exist after a reboot; nvidia-ctk creates the output's directory
// (MkdirAll 0755), and so does kgpu, whatever the umask.
TEST(CdiGenerate, CreatesTheOutputsDirectory) {
    FakeRoot root;
    TempDir out;
    const std::string spec = out.path() + "/var/run/cdi/nvidia.yaml";
    const mode_t old = ::umask(0);
    auto r = generate("t4x4", root, {"--output", spec});
    ::umask(old);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(fs::exists(spec));
    for (const std::string d : {"/var", "/var/run", "/var/run/cdi"}) {
        struct stat st {};
        ASSERT_EQ(::stat((out.path() + d).c_str(), &st), 0) << d;
        EXPECT_EQ(st.st_mode & 07777, 0755u) << d;
    }
}
