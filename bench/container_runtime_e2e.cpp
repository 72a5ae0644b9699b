// The container runtime's budget (issues #17, #26): `create` through kgpu-container-runtime against
// runc alone and against NVIDIA's runtime on the same bundle, on the simulated dgx-h100. Root only
// (runc).
//
//   build/release/bench/kgpu_container_runtime_e2e [iterations]
//
// Bundles: a busybox rootfs (with an empty /etc, as images have) and a fake driver root
// (mknod'ed nodes, the simulator as the driver's libnvidia-ml). Interleaved per iteration, each
// create followed by `runc delete -f` and the rootfs's linker cache files removed (not timed):
//   runc, plain          runc create on the bundle as the kubelet wrote it (no GPU request)
//   kgpu, plain          kgpu-container-runtime create on it (pass-through: reads config.json)
//   runc, edited         runc create on the bundle kgpu would produce for one GPU (nodes, mounts,
//                        hooks: the hooks run inside runc's create); kgpu is the hooks' binary, so
//                        they are one `chain` hook
//   runc, edited apart   the same spec with one hook per step (NVIDIA's form): the chain's gain
//   runc, edited, with no hook / with /bin/true as its hook / with the chain less update-ldcache:
//                        where runc's part of the edit goes (the nodes and mounts, running a hook,
//                        kgpu's hook process, ldconfig)
//   kgpu, one GPU        kgpu-container-runtime create on the original bundle with
//                        NVIDIA_VISIBLE_DEVICES=<uuid>: the inventory (from the cache, as on a
//                        node whose driver shows /proc), the edit, the write, then runc
//   kgpu, one GPU, NVML  the same with inventory-cache = "": NVML on every create
// With NVIDIA's binaries in $KGPU_SHARED_DIR/peers/nvidia (default <source>/../shared), also:
//   nvidia, plain        nvidia-container-runtime v1.20 (cdi mode) create on the plain bundle
//   nvidia, one GPU      the same on the GPU bundle: the device from a CDI spec prepared before the
//                        run (`kgpu cdi generate`, NVIDIA's nvidia-cdi-hook as the hooks' binary:
//                        the spec nvidia-ctk writes for this root, tests/parity), NVIDIA's hooks
// The wrapper's cost is (kgpu, one GPU) - (runc, edited) and (kgpu, plain) - (runc, plain), as wall
// time and as CPU time (user + system of the process, which is kgpu and then the runc it execs):
// on a busy machine the wall figures carry the wait for a CPU, the CPU figures do not. The hooks'
// CPU is in neither CPU figure: runc runs them from the container's init, which outlives
// `runc create` (so the chain's gain shows in wall time only).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/files.h"
#include "support/process.h"

namespace fs = std::filesystem;
using kgpu::test::slurp;
using Clock = std::chrono::steady_clock;

namespace {

struct Timing {
    double wall = -1, cpu = -1;  // ms; cpu: user + system of the process (kgpu, then the runc it execs)
};

// Runs argv to completion with stdio to /dev/null (wall -1 on failure).
Timing timed(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    auto t0 = Clock::now();
    pid_t pid = ::fork();
    if (pid == 0) {
        int null = ::open("/dev/null", O_RDWR);
        ::dup2(null, 0);
        ::dup2(null, 1);
        ::dup2(null, 2);
        for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
        std::vector<char*> a;
        for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
        a.push_back(nullptr);
        ::execv(a[0], a.data());
        ::_exit(127);
    }
    int status = 0;
    rusage ru{};
    ::wait4(pid, &status, 0, &ru);
    Timing t;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return t;
    t.wall = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    auto ms = [](const timeval& v) { return static_cast<double>(v.tv_sec) * 1e3 + static_cast<double>(v.tv_usec) / 1e3; };
    t.cpu = ms(ru.ru_utime) + ms(ru.ru_stime);
    return t;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    const int n = argc > 1 ? std::atoi(argv[1]) : 30;
    if (::geteuid() != 0) {
        std::fprintf(stderr, "kgpu_container_runtime_e2e: needs root (runc, mknod)\n");
        return 1;
    }
    kgpu::test::TempDir dir;
    // Bundles on tmpfs, where containerd keeps them (/run/containerd/io.containerd.runtime.v2.task).
    const std::string bundles = "/dev/shm/kgpu-bench-" + std::to_string(::getpid());
    fs::create_directories(bundles);
    const std::string drv = dir.path() + "/driver";
    fs::create_directories(drv + "/usr/lib64");
    fs::create_directories(drv + "/dev");
    for (unsigned i = 0; i < 8; ++i) ::mknod((drv + "/dev/nvidia" + std::to_string(i)).c_str(), S_IFCHR | 0666, makedev(195, i));
    ::mknod((drv + "/dev/nvidiactl").c_str(), S_IFCHR | 0666, makedev(195, 255));
    ::mknod((drv + "/dev/nvidia-uvm").c_str(), S_IFCHR | 0666, makedev(510, 0));
    fs::copy_file(KGPU_SIM_LIBRARY, drv + "/usr/lib64/libnvidia-ml.so.550.54.15");
    const std::string bin = dir.path() + "/bin";
    fs::create_directories(bin);
    fs::create_symlink(KGPU_BINARY, bin + "/kgpu-container-runtime");
    fs::create_symlink(KGPU_BINARY, bin + "/nvidia-cdi-hook");
    // The simulator keeps the driver's /proc entries there (KGPU_SIM_PROC_ROOT), which the
    // inventory cache's witness reads, as on a node with a loaded driver.
    const std::string proc = dir.path() + "/proc";
    const std::string base_config = "low-level-runtime = \"/usr/sbin/runc\"\ndriver-root = \"" + drv + "\"\nnvml-library = \"" + drv +
                                    "/usr/lib64/libnvidia-ml.so.550.54.15\"\nproc-root = \"" + proc + "\"\n";
    const std::string config = dir.write("rt.toml", base_config + "inventory-cache = \"" + dir.path() + "/run/inventory.json\"\n");
    const std::string config_nvml = dir.write("rt-nvml.toml", base_config + "inventory-cache = \"\"\n");
    // Two bundles: the plain one and the GPU one (same rootfs).
    auto bundle = [&](const std::string& name, const std::string& extra_env) {
        const std::string b = bundles + "/" + name;
        fs::create_directories(b + "/rootfs/bin");
        fs::create_directories(b + "/rootfs/etc");
        fs::copy_file("/bin/busybox", b + "/rootfs/bin/busybox");
        kgpu::test::run_process({"/usr/sbin/runc", "spec", "--bundle", b});
        std::string s = slurp(b + "/config.json");
        s.replace(s.find("\"terminal\": true"), 16, "\"terminal\": false");
        s.replace(s.find("\"sh\""), 4, "\"/bin/busybox\",\"true\"");
        if (!extra_env.empty()) s.replace(s.find("\"TERM=xterm\""), 12, "\"TERM=xterm\",\"" + extra_env + "\"");
        std::ofstream(b + "/config.json") << s;
        return b;
    };
    const std::string plain = bundle("plain", "");
    const std::string gpu = bundle("gpu", "NVIDIA_VISIBLE_DEVICES=GPU-2fbe396f-df9c-d5a1-4b31-c1658bb71f80");
    const std::string gpu_original = slurp(gpu + "/config.json");
    const std::string sim_node = "KGPU_SIM_NODE=" + std::string(KGPU_SOURCE_DIR) + "/sim/nodes/dgx-h100.yaml";
    const std::vector<std::string> env = {"KGPU_RUNTIME_CONFIG=" + config, sim_node, "KGPU_SIM_PROC_ROOT=" + proc};
    const std::vector<std::string> env_nvml = {"KGPU_RUNTIME_CONFIG=" + config_nvml, sim_node, "KGPU_SIM_PROC_ROOT=" + proc};
    // The edited bundle: what kgpu makes of the GPU bundle.
    const std::string edited = bundle("edited", "");
    {
        // Twice: the first loads the "driver" (the simulator writes /proc), the second keeps the
        // inventory.
        for (int i = 0; i < 2; ++i) {
            std::ofstream(edited + "/config.json") << gpu_original;
            if (timed({bin + "/kgpu-container-runtime", "create", "--bundle", edited, "warmup"}, env).wall < 0) {
                std::fprintf(stderr, "kgpu-container-runtime create failed\n");
                return 1;
            }
            timed({"/usr/sbin/runc", "delete", "-f", "warmup"}, {});
        }
        if (!fs::exists(dir.path() + "/run/inventory.json")) {
            std::fprintf(stderr, "kgpu-container-runtime kept no inventory\n");
            return 1;
        }
    }
    // The same edit with one hook per step: the chain split at its separators.
    const std::string apart = bundle("apart", "");
    {
        auto spec = nlohmann::json::parse(slurp(edited + "/config.json"));
        nlohmann::json split = nlohmann::json::array();
        for (const auto& h : spec["hooks"]["createContainer"]) {
            const auto& args = h["args"];
            size_t at = 0;
            while (at < args.size() && args[at] != "chain") ++at;
            if (at == args.size()) {
                split.push_back(h);
                continue;
            }
            nlohmann::json one = h;
            one["args"] = nlohmann::json(std::vector<nlohmann::json>(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(at)));
            for (size_t i = at + 1; i <= args.size(); ++i) {
                if (i == args.size() || args[i] == "+") {
                    split.push_back(one);
                    one["args"] = nlohmann::json(std::vector<nlohmann::json>(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(at)));
                } else {
                    one["args"].push_back(args[i]);
                }
            }
        }
        std::printf("hooks in kgpu's edit: %zu (steps: %zu)\n", spec["hooks"]["createContainer"].size(), split.size());
        spec["hooks"]["createContainer"] = split;
        std::ofstream(apart + "/config.json") << spec.dump();
    }
    // Where runc's part of the edit goes: the edit with no hook, with /bin/true as its one hook, and
    // with the chain less its update-ldcache step.
    const std::string nohooks = bundle("nohooks", "");
    const std::string truehook = bundle("truehook", "");
    const std::string noldcache = bundle("noldcache", "");
    {
        auto spec = nlohmann::json::parse(slurp(edited + "/config.json"));
        const nlohmann::json chain = spec["hooks"]["createContainer"];
        spec["hooks"].erase("createContainer");
        std::ofstream(nohooks + "/config.json") << spec.dump();
        spec["hooks"]["createContainer"] = nlohmann::json::array({{{"path", "/bin/true"}, {"args", {"true"}}}});
        std::ofstream(truehook + "/config.json") << spec.dump();
        spec["hooks"]["createContainer"] = chain;
        for (auto& h : spec["hooks"]["createContainer"]) {
            // The steps are separated by "+"; drop the one that starts with update-ldcache.
            std::vector<std::vector<nlohmann::json>> steps(1);
            for (const auto& a : h["args"]) {
                if (a == "+") steps.emplace_back();
                else steps.back().push_back(a);
            }
            nlohmann::json args = nlohmann::json::array();
            for (const auto& step : steps) {
                if (!step.empty() && step.front() == "update-ldcache") continue;
                if (!args.empty() && args.back() != "chain") args.push_back("+");
                for (const auto& a : step) args.push_back(a);
            }
            h["args"] = args;
        }
        std::ofstream(noldcache + "/config.json") << spec.dump();
    }
    // NVIDIA's runtime, when its binaries are there.
    const std::string peers = [] {
        const char* d = std::getenv("KGPU_SHARED_DIR");
        return (d ? std::string(d) : std::string(KGPU_SOURCE_DIR) + "/../shared") + "/peers/nvidia";
    }();
    const bool nvidia = fs::exists(peers + "/nvidia-container-runtime.xz") && fs::exists(peers + "/nvidia-cdi-hook.xz");
    std::vector<std::string> nv_env;
    const std::string nv_gpu = bundle("nvgpu", "NVIDIA_VISIBLE_DEVICES=GPU-2fbe396f-df9c-d5a1-4b31-c1658bb71f80");
    if (nvidia) {
        for (const char* n : {"nvidia-container-runtime", "nvidia-cdi-hook"}) {
            const std::string out = bin + "/nv-" + n;
            if (kgpu::test::run_process({"/bin/sh", "-c", "xz -dc " + peers + "/" + n + ".xz > " + out + " && chmod 755 " + out}).exit_code != 0) {
                std::fprintf(stderr, "cannot unpack %s/%s.xz\n", peers.c_str(), n);
                return 1;
            }
        }
        fs::create_directories(dir.path() + "/cdi");
        auto gen = kgpu::test::run_process({KGPU_BINARY, "cdi", "generate", "--driver-root", drv, "--nvml-library",
                                            drv + "/usr/lib64/libnvidia-ml.so.550.54.15", "--nvidia-cdi-hook-path",
                                            bin + "/nv-nvidia-cdi-hook", "--format", "json", "--output", dir.path() + "/cdi/nvidia.json"},
                                           {{"KGPU_SIM_NODE", std::string(KGPU_SOURCE_DIR) + "/sim/nodes/dgx-h100.yaml"}});
        if (gen.exit_code != 0) {
            std::fprintf(stderr, "kgpu cdi generate failed: %s\n", gen.err.c_str());
            return 1;
        }
        dir.write("xdg/nvidia-container-runtime/config.toml",
                  "accept-nvidia-visible-devices-envvar-when-unprivileged = true\n"
                  "[nvidia-container-runtime]\nlog-level = \"error\"\nmode = \"cdi\"\nruntimes = [\"/usr/sbin/runc\"]\n"
                  "[nvidia-container-runtime.modes.cdi]\ndefault-kind = \"nvidia.com/gpu\"\nspec-dirs = [\"" + dir.path() + "/cdi\"]\n");
        nv_env = {"XDG_CONFIG_HOME=" + dir.path() + "/xdg"};
    } else {
        std::printf("no NVIDIA binaries in %s: kgpu and runc only\n", peers.c_str());
    }
    const std::string nv_gpu_original = slurp(nv_gpu + "/config.json");

    struct Series {
        std::vector<double> wall, cpu;
    } runc_plain, kgpu_plain, runc_edited, runc_apart, runc_nohooks, runc_noldcache, runc_true, kgpu_gpu, kgpu_gpu_nvml, nv_plain, nv_one;
    // Each create starts from an image without a linker cache of its own (the hooks write one).
    auto fresh_rootfs = [&](const std::string& b) {
        std::error_code ec;
        fs::remove_all(b + "/rootfs/etc", ec);
        fs::create_directories(b + "/rootfs/etc");
    };
    auto once = [&](Series& out, const std::vector<std::string>& create, const std::vector<std::string>& e) {
        const std::string b = create[create.size() - 2];
        fresh_rootfs(b);
        Timing t = timed(create, e);
        if (t.wall >= 0) {
            out.wall.push_back(t.wall);
            out.cpu.push_back(t.cpu);
        }
        timed({"/usr/sbin/runc", "delete", "-f", create.back()}, {});
    };
    for (int i = 0; i < n; ++i) {
        once(runc_plain, {"/usr/sbin/runc", "create", "--bundle", plain, "b1"}, env);
        once(kgpu_plain, {bin + "/kgpu-container-runtime", "create", "--bundle", plain, "b2"}, env);
        once(runc_edited, {"/usr/sbin/runc", "create", "--bundle", edited, "b3"}, env);
        once(runc_apart, {"/usr/sbin/runc", "create", "--bundle", apart, "b5"}, env);
        once(runc_nohooks, {"/usr/sbin/runc", "create", "--bundle", nohooks, "b9"}, env);
        once(runc_noldcache, {"/usr/sbin/runc", "create", "--bundle", noldcache, "b10"}, env);
        once(runc_true, {"/usr/sbin/runc", "create", "--bundle", truehook, "b11"}, env);
        std::ofstream(gpu + "/config.json") << gpu_original;
        once(kgpu_gpu, {bin + "/kgpu-container-runtime", "create", "--bundle", gpu, "b4"}, env);
        std::ofstream(gpu + "/config.json") << gpu_original;
        once(kgpu_gpu_nvml, {bin + "/kgpu-container-runtime", "create", "--bundle", gpu, "b8"}, env_nvml);
        if (nvidia) {
            once(nv_plain, {bin + "/nv-nvidia-container-runtime", "create", "--bundle", plain, "b6"}, nv_env);
            std::ofstream(nv_gpu + "/config.json") << nv_gpu_original;
            once(nv_one, {bin + "/nv-nvidia-container-runtime", "create", "--bundle", nv_gpu, "b7"}, nv_env);
        }
    }
    fs::remove_all(bundles);
    double load[3] = {0, 0, 0};
    if (::getloadavg(load, 3) < 1) load[0] = -1;
    std::printf("load average at the end: %.2f\n", load[0]);
    for (auto [label, pick] : {std::pair{"wall", &Series::wall}, std::pair{"cpu", &Series::cpu}}) {
        auto m = [&](const Series& x) { return median(x.*pick); };
        std::printf("create %s, median of %d (ms): runc plain %.2f | kgpu plain %.2f | runc edited %.2f | runc edited apart %.2f | "
                    "kgpu one GPU %.2f",
                    label, n, m(runc_plain), m(kgpu_plain), m(runc_edited), m(runc_apart), m(kgpu_gpu));
        if (nvidia) std::printf(" | nvidia plain %.2f | nvidia one GPU %.2f", m(nv_plain), m(nv_one));
        std::printf("\n  kgpu's own cost (%s): %.2f ms with a GPU, %.2f ms without\n", label, m(kgpu_gpu) - m(runc_edited),
                    m(kgpu_plain) - m(runc_plain));
        std::printf("  runc's part of the edit over plain runc (%s): no hook %+.2f ms, /bin/true as the hook %+.2f ms, the chain "
                    "without update-ldcache %+.2f ms, the whole chain %+.2f ms\n",
                    label, m(runc_nohooks) - m(runc_plain), m(runc_true) - m(runc_plain), m(runc_noldcache) - m(runc_plain),
                    m(runc_edited) - m(runc_plain));
        std::printf("  the hooks as one chain (%s): %.2f ms less than one exec per step\n", label, m(runc_apart) - m(runc_edited));
        std::printf("  the inventory from the cache (%s): kgpu one GPU %.2f ms, asking NVML every time %.2f ms (%.2f ms less)", label,
                    m(kgpu_gpu), m(kgpu_gpu_nvml), m(kgpu_gpu_nvml) - m(kgpu_gpu));
        if (nvidia) std::printf("; kgpu / nvidia %.2fx cached, %.2fx NVML every time", m(kgpu_gpu) / m(nv_one), m(kgpu_gpu_nvml) / m(nv_one));
        std::printf("\n");
        std::printf("  one GPU over plain runc (%s): kgpu %+.2f ms (%.2fx)", label, m(kgpu_gpu) - m(runc_plain), m(kgpu_gpu) / m(runc_plain));
        if (nvidia)
            std::printf(", nvidia %+.2f ms (%.2fx); kgpu / nvidia %.2fx; without a GPU kgpu / nvidia %.2fx", m(nv_one) - m(runc_plain),
                        m(nv_one) / m(runc_plain), m(kgpu_gpu) / m(nv_one), m(kgpu_plain) / m(nv_plain));
        std::printf("\n");
    }
    return 0;
}
