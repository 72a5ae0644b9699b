// nvidia-container-runtime v1.20 and `kgpu container-runtime` on the same bundles: the OCI spec
// each hands to the low-level runtime (a stand-in that keeps the config.json it was given)
// compared as data. NVIDIA's runtime runs in its `jit-cdi` mode (the spec generated in memory
// from the driver root, as kgpu does) and in its `cdi` mode (devices from the spec nvidia-ctk
// generated for the same driver root into the runtime's spec-dirs); its `legacy` mode needs
// libnvidia-container, which is not here. Both get the same driver root (DriverRoot), the same
// simulated node and the same settings (volume mounts and unprivileged env requests accepted).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "parity/driver_root.h"
#include "parity/parity.h"
#include "support/process.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using kgpu::parity::Flat;
using kgpu::test::run_process;
using kgpu::test::TempDir;

namespace {

const std::string kSource = KGPU_SOURCE_DIR;

struct Case {
    std::string name, fixture;
    std::vector<std::string> env;                  // added to process.env
    std::map<std::string, std::string> annotations = {};
    std::vector<std::string> device_mounts = {};    // /dev/null mounted at these container paths
    bool privileged = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.fixture << "/" << c.name; }

json bundle_spec(const Case& c) {
    json s = json::parse(R"({"ociVersion":"1.2.0",
        "process":{"terminal":false,"user":{"uid":0,"gid":0},"args":["sh"],"env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"cwd":"/",
                   "capabilities":{"bounding":["CAP_CHOWN","CAP_KILL"],"effective":["CAP_CHOWN","CAP_KILL"],"permitted":["CAP_CHOWN","CAP_KILL"]}},
        "root":{"path":"rootfs"},"hostname":"c1",
        "mounts":[{"destination":"/proc","type":"proc","source":"proc"}],
        "linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}]},"namespaces":[{"type":"pid"},{"type":"mount"}]}})");
    for (const auto& e : c.env) s["process"]["env"].push_back(e);
    for (const auto& [k, v] : c.annotations) s["annotations"][k] = v;
    for (const auto& m : c.device_mounts)
        s["mounts"].push_back({{"destination", m}, {"type", "bind"}, {"source", "/dev/null"}, {"options", {"rbind", "ro"}}});
    if (c.privileged)
        for (const char* set : {"bounding", "effective", "permitted"}) s["process"]["capabilities"][set].push_back("CAP_SYS_ADMIN");
    return s;
}

// The OCI spec as data: env by variable, mounts by destination, devices by path; the order of
// hooks, cgroup device rules and everything else kept.
Flat spec_data(const std::string& text) {
    json s = json::parse(text, nullptr, false);
    if (s.is_discarded()) return {{"config.json", "(not JSON) " + text}};
    if (s.contains("process") && s["process"].contains("env")) {
        json env = json::object();
        for (const auto& e : s["process"]["env"]) {
            const std::string t = e.get<std::string>();
            const auto eq = t.find('=');
            env[t.substr(0, eq)] = eq == std::string::npos ? "" : t.substr(eq + 1);
        }
        s["process"]["env"] = env;
    }
    if (s.contains("mounts")) {
        json m = json::object();
        for (const auto& x : s["mounts"]) m[x.value("destination", "?")] = x;
        s["mounts"] = m;
    }
    // Hooks by name, their order as one value: a hook's repeated flags (create-symlinks' --link,
    // update-ldcache's --folder) are keyed by what they name, merged over the hooks of one name,
    // so one link more or less is one difference, and one hook more is one more in the order.
    if (s.contains("hooks")) {
        for (auto& [phase, list] : s["hooks"].items()) {
            json out = json::object();
            std::string order;
            for (const auto& h : list) {
                std::vector<std::string> args;
                for (const auto& a : h.value("args", json::array())) args.push_back(a.get<std::string>());
                const std::string name = args.size() > 1 ? args[1] : h.value("path", "?");
                order += (order.empty() ? "" : ",") + name;
                json& e = out[name];
                e["path"] = h.value("path", "");
                if (!args.empty()) e["args[0]"] = args[0];
                if (h.contains("env")) e["env"] = h["env"];
                for (size_t j = 2; j < args.size(); ++j) {
                    std::string flag = args[j], value = "true";
                    if (const auto eq = flag.find('='); eq != std::string::npos) {
                        value = flag.substr(eq + 1);
                        flag = flag.substr(0, eq);
                    } else if (j + 1 < args.size() && !args[j + 1].starts_with("--")) {
                        value = args[++j];
                    }
                    if (flag == "--link") {  // TARGET::LINK
                        const auto sep = value.find("::");
                        e["--link"][sep == std::string::npos ? value : value.substr(sep + 2)] = value.substr(0, sep);
                    } else if (flag == "--folder") {
                        e["--folder"][value] = "yes";
                    } else {
                        e[flag] = value;
                    }
                }
            }
            out["(order)"] = order;
            s["hooks"][phase] = out;
        }
    }
    // The cgroup device rules: the bundle's deny-all first, then allows whose order means nothing.
    if (s.contains("linux") && s["linux"].contains("resources") && s["linux"]["resources"].contains("devices")) {
        json rules = json::object();
        for (const auto& r : s["linux"]["resources"]["devices"]) {
            const std::string rule = std::string(r.value("allow", false) ? "allow " : "deny ") + r.value("type", "a") + " " +
                                     (r.contains("major") ? r["major"].dump() : "*") + ":" +
                                     (r.contains("minor") ? r["minor"].dump() : "*") + " " + r.value("access", "");
            rules[rule] = "yes";
        }
        s["linux"]["resources"]["devices"] = rules;
    }
    if (s.contains("linux") && s["linux"].contains("devices")) {
        json d = json::object();
        for (const auto& x : s["linux"]["devices"]) d[x.value("path", "?")] = x;
        s["linux"]["devices"] = d;
    }
    return kgpu::parity::flatten(s);
}

// The low-level runtime: keeps the config.json of the bundle it is handed, and its argv.
std::string fake_runc(const TempDir& dir) {
    const std::string p = dir.write("fake-runc", "#!/bin/sh\n"
                                                 "printf '%s\\n' \"$@\" > \"$0.argv\"\n"
                                                 "b=.; prev=; for a in \"$@\"; do [ \"$prev\" = --bundle ] && b=$a; prev=$a; done\n"
                                                 "cp \"$b/config.json\" \"$0.config.json\"\n");
    ::chmod(p.c_str(), 0755);
    return p;
}

struct Handed {
    int exit_code = -1;
    std::string log;
    Flat spec;
};

// Runs `argv0 --root … --log … create --bundle <bundle> c1` with `env`, then reads what the
// stand-in low-level runtime was handed.
Handed create(const std::vector<std::string>& argv0, const Case& c, const std::string& runc, const TempDir& dir,
              std::map<std::string, std::string> env, const std::vector<std::pair<std::string, std::string>>& binds = {}) {
    const std::string bundle = dir.path() + "/bundle";
    fs::create_directories(bundle + "/rootfs");
    dir.write("bundle/config.json", bundle_spec(c).dump(2));
    fs::remove(runc + ".config.json");
    std::vector<std::string> argv = argv0;
    argv.insert(argv.end(), {"--root", dir.path() + "/state", "--log", dir.path() + "/runc-log.json", "--log-format", "json",
                             "create", "--bundle", bundle, "c1"});
    const auto r = run_process(binds.empty() ? argv : kgpu::parity::in_namespace(binds, argv), env);
    Handed out;
    out.exit_code = r.exit_code;
    out.log = r.out + r.err + kgpu::parity::slurp(dir.path() + "/runc-log.json");
    if (fs::exists(runc + ".config.json")) out.spec = spec_data(kgpu::parity::slurp(runc + ".config.json"));
    out.spec["exit"] = std::to_string(r.exit_code);
    out.spec["low-level runtime called"] = fs::exists(runc + ".config.json") ? "yes" : "no";
    return out;
}

class RuntimeParity : public ::testing::TestWithParam<std::tuple<std::string, Case>> {};

TEST_P(RuntimeParity, NvidiaAndKgpuHandTheLowLevelRuntimeTheSameSpec) {
    KGPU_REQUIRE_PEER(nvidia_runtime, "nvidia-container-runtime");
    KGPU_REQUIRE_PEER(ctk, "nvidia-ctk");
    const auto& [mode, c] = GetParam();
    const std::string node = kSource + "/sim/nodes/" + c.fixture + ".yaml";
    kgpu::parity::DriverRoot root;
    if (const auto why = root.make(node); !why.empty()) {
        GTEST_SKIP() << why;
    }
    TempDir nv, kg, xdg;
    const std::string specs = xdg.path() + "/cdi";
    fs::create_directories(specs);
    // NVIDIA's cdi mode finds nvidia.com/gpu devices in the spec nvidia-ctk writes for the root.
    const std::string hook = "/usr/bin/nvidia-cdi-hook";
    const auto gen = run_process(kgpu::parity::in_namespace({{root.proc_driver(), "/proc/driver"}},
                                                            {ctk, "cdi", "generate", "--driver-root", root.path(), "--nvidia-cdi-hook-path", hook,
                                                             "--output", specs + "/nvidia.yaml"}),
                                 {{"KGPU_SIM_NODE", node}, {"XDG_CONFIG_HOME", xdg.path()}});
    ASSERT_EQ(gen.exit_code, 0) << gen.err;

    const std::string nv_runc = fake_runc(nv);
    xdg.write("nvidia-container-runtime/config.toml",
              "accept-nvidia-visible-devices-envvar-when-unprivileged = true\n"
              "accept-nvidia-visible-devices-as-volume-mounts = true\n"
              "[nvidia-container-cli]\nroot = \"" + root.path() + "\"\n"
              "[nvidia-container-runtime]\nlog-level = \"debug\"\ndebug = \"" + nv.path() + "/runtime.log\"\n"
              "mode = \"" + mode + "\"\nruntimes = [\"" + nv_runc + "\"]\n"
              "[nvidia-container-runtime.modes.cdi]\nannotation-prefixes = [\"cdi.k8s.io/\"]\n"
              "default-kind = \"nvidia.com/gpu\"\nspec-dirs = [\"" + specs + "\"]\n"
              "[nvidia-ctk]\npath = \"" + hook + "\"\n");
    const Handed n = create({nvidia_runtime}, c, nv_runc,
                            nv, {{"XDG_CONFIG_HOME", xdg.path()}, {"KGPU_SIM_NODE", node}, {"PATH", "/usr/sbin:/usr/bin:/sbin:/bin"}},
                            {{root.proc_driver(), "/proc/driver"}});

    const std::string kg_runc = fake_runc(kg);
    const std::string config = kg.write("runtime.toml",
                                        "low-level-runtime = \"" + kg_runc + "\"\n"
                                        "driver-root = \"" + root.path() + "\"\n"
                                        "proc-root = \"" + root.proc() + "\"\n"
                                        // The fake root's /proc has a loaded driver: the inventory
                                        // is kept in the test's directory, never the host's /run.
                                        "inventory-cache = \"" + kg.path() + "/inventory.json\"\n"
                                        "hook-path = \"" + hook + "\"\n"
                                        "accept-nvidia-visible-devices-envvar-when-unprivileged = true\n"
                                        "accept-nvidia-visible-devices-as-volume-mounts = true\n");
    const Handed k = create({KGPU_BINARY, "container-runtime"}, c, kg_runc, kg,
                         {{"KGPU_RUNTIME_CONFIG", config}, {"KGPU_SIM_NODE", node}, {"PATH", "/usr/sbin:/usr/bin:/sbin:/bin"}});

    SCOPED_TRACE("nvidia-container-runtime:\n" + n.log + kgpu::parity::slurp(nv.path() + "/runtime.log") + "\nkgpu:\n" + k.log);
    // Both runtimes' bundles sit in their own temp dirs, the driver root is shared: the same text.
    auto norm = [&](const Flat& f, const std::string& own) {
        Flat g;
        for (auto [key, v] : f) {
            for (const auto& [from, to] : {std::pair{root.path(), std::string("<root>")}, std::pair{own, std::string("<dir>")}})
                for (size_t p; (p = v.find(from)) != std::string::npos;) v.replace(p, from.size(), to);
            g[key] = v;
        }
        return g;
    };
    kgpu::parity::expect_parity("container-runtime", mode + "/" + c.fixture + "/" + c.name, norm(k.spec, kg.path()), norm(n.spec, nv.path()));
}

const char* const kH100_3 = "GPU-2fbe396f-df9c-d5a1-4b31-c1658bb71f80";  // dgx-h100's GPU 3

std::vector<Case> cases() {
    return {
        {"index", "dgx-h100", {"NVIDIA_VISIBLE_DEVICES=1"}},
        {"uuid", "dgx-h100", {std::string("NVIDIA_VISIBLE_DEVICES=") + kH100_3}},
        {"two", "dgx-h100", {"NVIDIA_VISIBLE_DEVICES=0,2"}},
        {"all", "dgx-h100", {"NVIDIA_VISIBLE_DEVICES=all"}},
        {"none", "dgx-h100", {"NVIDIA_VISIBLE_DEVICES=none"}},
        {"void", "dgx-h100", {"NVIDIA_VISIBLE_DEVICES=void"}},
        {"no-request", "dgx-h100", {}},
        {"legacy-cuda-image", "dgx-h100", {"CUDA_VERSION=12.4.1"}},
        {"capabilities-all", "t4x4", {"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"}},
        {"capabilities-compute", "t4x4", {"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute"}},
        {"capabilities-video-graphics", "t4x4", {"NVIDIA_VISIBLE_DEVICES=3", "NVIDIA_DRIVER_CAPABILITIES=video,graphics,utility"}},
        {"mig-index", "a100-mig", {"NVIDIA_VISIBLE_DEVICES=1:0"}},
        {"mig-uuid", "a100-mig", {"NVIDIA_VISIBLE_DEVICES=MIG-4b69808b-66a3-1662-f86c-3b76eedd0860"}},
        {"mig-gpu-all", "a100-mig", {"NVIDIA_VISIBLE_DEVICES=all"}},
        {"cdi-annotation", "dgx-h100", {}, {{"cdi.k8s.io/nvidia-device-plugin_abc", "nvidia.com/gpu=2"}}},
        {"cdi-annotations-two-keys", "dgx-h100", {"NVIDIA_VISIBLE_DEVICES=all"},
         {{"cdi.k8s.io/b", "nvidia.com/gpu=5"}, {"cdi.k8s.io/a", "nvidia.com/gpu=4,nvidia.com/gpu=1"}}},
        {"volume-mounts", "dgx-h100", {"NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices"}, {},
         {"/var/run/nvidia-container-devices/6", "/var/run/nvidia-container-devices/7"}},
        {"volume-mount-uuid", "dgx-h100", {"NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices"}, {},
         {std::string("/var/run/nvidia-container-devices/") + kH100_3}},
        {"privileged-all", "t4x4", {"NVIDIA_VISIBLE_DEVICES=all"}, {}, {}, true},
    };
}

std::string test_name(std::string n) {
    for (auto& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return n;
}

// NVIDIA's runtime reads CDI annotations only in its cdi mode (which its auto mode picks when a
// bundle has them): bundles that ask by annotation are compared in that mode only.
std::vector<std::tuple<std::string, Case>> matrix() {
    std::vector<std::tuple<std::string, Case>> out;
    for (const char* mode : {"jit-cdi", "cdi"})
        for (const auto& c : cases())
            if (c.annotations.empty() || std::string(mode) == "cdi") out.emplace_back(mode, c);
    return out;
}

INSTANTIATE_TEST_SUITE_P(Bundles, RuntimeParity, ::testing::ValuesIn(matrix()),
                         [](const auto& info) {
                             return test_name(std::get<0>(info.param) + "_" + std::get<1>(info.param).fixture + "_" +
                                              std::get<1>(info.param).name);
                         });

}  // namespace
