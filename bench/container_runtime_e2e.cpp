// The container runtime's budget (issue #17): `create` through kgpu-container-runtime adds at most
// 5 ms p50 over runc alone on the same bundle, on the simulated dgx-h100. Root only (runc).
//
//   build/release/bench/kgpu_container_runtime_e2e [iterations]
//
// Bundles: a busybox rootfs and a fake driver root (mknod'ed nodes, the simulator as the
// driver's libnvidia-ml). Interleaved per iteration, each create followed by `runc delete -f`
// (not timed):
//   runc, plain          runc create on the bundle as the kubelet wrote it (no GPU request)
//   kgpu, plain          kgpu-container-runtime create on it (pass-through: reads config.json)
//   runc, edited         runc create on the bundle kgpu would produce for one GPU (nodes, mounts,
//                        hooks: the hooks run inside runc's create)
//   kgpu, one GPU        kgpu-container-runtime create on the original bundle with
//                        NVIDIA_VISIBLE_DEVICES=<uuid>: NVML, the edit, the write, then runc
// The wrapper's cost is (kgpu, one GPU) - (runc, edited) and (kgpu, plain) - (runc, plain), as wall
// time and as CPU time (user + system of the process, which is kgpu and then the runc it execs):
// on a busy machine the wall figures carry the wait for a CPU, the CPU figures do not.
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

#include "support/process.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::string slurp(const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

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
    const std::string config = dir.write("rt.toml", "low-level-runtime = \"/usr/sbin/runc\"\ndriver-root = \"" + drv +
                                                        "\"\nnvml-library = \"" + drv + "/usr/lib64/libnvidia-ml.so.550.54.15\"\n");
    // Two bundles: the plain one and the GPU one (same rootfs).
    auto bundle = [&](const std::string& name, const std::string& extra_env) {
        const std::string b = bundles + "/" + name;
        fs::create_directories(b + "/rootfs/bin");
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
    const std::vector<std::string> env = {"KGPU_RUNTIME_CONFIG=" + config,
                                          "KGPU_SIM_NODE=" + std::string(KGPU_SOURCE_DIR) + "/sim/nodes/dgx-h100.yaml"};
    // The edited bundle: what kgpu makes of the GPU bundle.
    const std::string edited = bundle("edited", "");
    {
        std::ofstream(edited + "/config.json") << gpu_original;
        if (timed({bin + "/kgpu-container-runtime", "create", "--bundle", edited, "warmup"}, env).wall < 0) {
            std::fprintf(stderr, "kgpu-container-runtime create failed\n");
            return 1;
        }
        timed({"/usr/sbin/runc", "delete", "-f", "warmup"}, {});
    }
    struct Series {
        std::vector<double> wall, cpu;
    } runc_plain, kgpu_plain, runc_edited, kgpu_gpu;
    auto once = [&](Series& out, const std::vector<std::string>& create) {
        Timing t = timed(create, env);
        if (t.wall >= 0) {
            out.wall.push_back(t.wall);
            out.cpu.push_back(t.cpu);
        }
        timed({"/usr/sbin/runc", "delete", "-f", create.back()}, {});
    };
    for (int i = 0; i < n; ++i) {
        once(runc_plain, {"/usr/sbin/runc", "create", "--bundle", plain, "b1"});
        once(kgpu_plain, {bin + "/kgpu-container-runtime", "create", "--bundle", plain, "b2"});
        once(runc_edited, {"/usr/sbin/runc", "create", "--bundle", edited, "b3"});
        std::ofstream(gpu + "/config.json") << gpu_original;
        once(kgpu_gpu, {bin + "/kgpu-container-runtime", "create", "--bundle", gpu, "b4"});
    }
    fs::remove_all(bundles);
    for (auto [label, pick] : {std::pair{"wall", &Series::wall}, std::pair{"cpu", &Series::cpu}}) {
        std::printf("create %s, median of %d (ms): runc plain %.2f | kgpu plain %.2f | runc edited %.2f | kgpu one GPU %.2f\n",
                    label, n, median(runc_plain.*pick), median(kgpu_plain.*pick), median(runc_edited.*pick),
                    median(kgpu_gpu.*pick));
        std::printf("  kgpu's own cost (%s): %.2f ms with a GPU (budget 5 ms), %.2f ms without\n", label,
                    median(kgpu_gpu.*pick) - median(runc_edited.*pick), median(kgpu_plain.*pick) - median(runc_plain.*pick));
    }
    std::printf("whole GPU injection (edit + nodes, mounts and hooks inside runc), wall: %.2f ms over plain runc\n",
                median(kgpu_gpu.wall) - median(runc_plain.wall));
    return 0;
}
