// The container toolkit end to end (issue #17): Debian's containerd and runc, an image the test
// builds from host files (busybox-static and glibc), a fake driver root (device nodes made with
// mknod, the simulator installed as the driver's libnvidia-ml.so.<version> with its symlinks,
// nvidia-smi -> kgpu), and containers run through `kgpu-container-runtime` by containerd's runc
// shim (`ctr run --runc-binary`, what the BinaryName of a containerd runtime does). Root only.
//
// One test with every case in turn: ctest runs each TEST in its own process, and starting
// containerd and importing the image is most of the time this test takes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "support/containerd.h"
#include "support/process.h"
#include "support/test_image.h"
#include "support/files.h"

namespace fs = std::filesystem;
using kgpu::test::TestContainerd;
using kgpu::test::RunResult;
using kgpu::test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

using kgpu::test::slurp;

const char* kGpu3 = "GPU-2fbe396f-df9c-d5a1-4b31-c1658bb71f80";
const char* kImage = "docker.io/library/kgpu-e2e:latest";

// Everything the suite shares: the driver root, the runtime configs, containerd, the image.
struct World {
    TempDir dir;
    std::unique_ptr<TestContainerd> containerd;
    std::string driver, bin, skip, failure;
    int runs = 0;

    void node(const std::string& rel, unsigned maj, unsigned min) {
        fs::create_directories(fs::path(driver + rel).parent_path());
        if (::mknod((driver + rel).c_str(), S_IFCHR | 0666, makedev(maj, min)) != 0) failure = "mknod " + rel + " failed";
    }

    void setup() {
        if (auto why = TestContainerd::unavailable_reason(); !why.empty()) {
            skip = why + " (runc and mknod too): this end-to-end test runs only as root";
            return;
        }
        // The driver root: device nodes, the simulator as the driver's NVML, nvidia-smi -> kgpu.
        driver = dir.path() + "/driver";
        for (unsigned i = 0; i < 8; ++i) node(fmt::format("/dev/nvidia{}", i), 195, i);
        node("/dev/nvidiactl", 195, 255);
        node("/dev/nvidia-uvm", 510, 0);
        node("/dev/nvidia-uvm-tools", 510, 1);
        fs::create_directories(driver + "/usr/lib64");
        fs::create_directories(driver + "/usr/bin");
        fs::copy_file(KGPU_SIM_LIBRARY, driver + "/usr/lib64/libnvidia-ml.so.550.54.15");
        fs::create_symlink("libnvidia-ml.so.550.54.15", driver + "/usr/lib64/libnvidia-ml.so.1");
        fs::create_symlink("libnvidia-ml.so.1", driver + "/usr/lib64/libnvidia-ml.so");
        fs::create_symlink(KGPU_BINARY, driver + "/usr/bin/nvidia-smi");

        // The runtime under the name containerd's shim runs, a recorder in front of runc, and
        // the same runtime with the secure settings (a second BinaryName, as a second
        // containerd runtime class would have).
        bin = dir.path() + "/bin";
        fs::create_directories(bin);
        fs::create_symlink(KGPU_BINARY, bin + "/kgpu-container-runtime");
        const std::string runc = dir.write("bin/runc-recorder", "#!/bin/sh\n"
                                                                "echo \"$*\" >> " + dir.path() + "/runc.calls\n"
                                                                "exec /usr/sbin/runc \"$@\"\n");
        ::chmod(runc.c_str(), 0755);
        const std::string common = "low-level-runtime = \"" + runc + "\"\n"
                                   "driver-root = \"" + driver + "\"\n"
                                   "nvml-library = \"" + driver + "/usr/lib64/libnvidia-ml.so.550.54.15\"\n"
                                   "log-file = \"" + dir.path() + "/kgpu-runtime.log\"\n"
                                   "log-level = \"debug\"\n";
        const std::string secure = dir.write("secure.toml", common +
                                                                "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n"
                                                                "accept-nvidia-visible-devices-as-volume-mounts = true\n");
        const std::string wrapper = dir.write("bin/kgpu-container-runtime-secure",
                                              "#!/bin/sh\nKGPU_RUNTIME_CONFIG=" + secure + " exec " + bin +
                                                  "/kgpu-container-runtime \"$@\"\n");
        ::chmod(wrapper.c_str(), 0755);
        const std::string config = dir.write("runtime.toml", common);

        TestContainerd::Options o;
        o.cri = false;
        o.env = {{"KGPU_RUNTIME_CONFIG", config},
                 {"KGPU_SIM_NODE", std::string(KGPU_SOURCE_DIR) + "/sim/nodes/dgx-h100.yaml"}};
        containerd = std::make_unique<TestContainerd>(dir.path() + "/containerd", o);
        if (!containerd->started()) {
            failure = containerd->error();
            return;
        }
        // The image: busybox + glibc + what the simulator and kgpu link, and the node fixture.
        kgpu::test::ImageSpec spec;
        spec.name = kImage;
        spec.ldd_of = {KGPU_BINARY, KGPU_SIM_LIBRARY};
        spec.files = {{"/sim/dgx-h100.yaml", std::string(KGPU_SOURCE_DIR) + "/sim/nodes/dgx-h100.yaml"}};
        std::string error;
        const std::string image = kgpu::test::build_image(dir.path(), spec, error);
        if (image.empty()) {
            failure = error;
            return;
        }
        // The socket appears before every service is registered: retry the import briefly.
        kgpu::test::RunResult imported;
        for (int i = 0; i < 100; ++i) {
            imported = containerd->ctr({"images", "import", image});
            if (imported.exit_code == 0) break;
            ::usleep(50000);
        }
        if (imported.exit_code != 0) failure = "ctr images import: " + imported.err;
    }

    // `ctr run --rm` of `script` (busybox sh) with the given extra ctr flags; the container's
    // environment points the simulator at its fixture and its /dev, and nvidia-smi's NVML at
    // the bare SONAME (so only the linker cache can find it). Its output comes from the shim's
    // logger (TestContainerd::ctr_run): ctr's copy of a short-lived container's stdout loses its
    // end now and then (stop 49: "ls /dev; echo ---; nvidia-smi -L" exited 0 with only the
    // listing).
    RunResult run(const std::string& script, std::vector<std::string> flags, const std::string& runtime = "kgpu-container-runtime") {
        const std::string id = fmt::format("c{}", ++runs);
        std::vector<std::string> args = {"--rm", "--runc-binary", bin + "/" + runtime,
                                         "--env", "KGPU_SIM_NODE=/sim/dgx-h100.yaml", "--env", "KGPU_SIM_DEV_ROOT=/",
                                         "--env", "KGPU_NVML_LIBRARY=libnvidia-ml.so.1"};
        args.insert(args.end(), flags.begin(), flags.end());
        for (const std::string& a : {std::string(kImage), id, std::string("/bin/sh"), std::string("-c"), script}) args.push_back(a);
        last_id = id;
        return containerd->ctr_run(args);
    }
    // Whether the recorder in front of runc saw `create ... <id>`.
    bool runc_created(const std::string& id) const {
        std::istringstream calls(slurp(dir.path() + "/runc.calls"));
        for (std::string l; std::getline(calls, l);)
            if (l.find(" create ") != std::string::npos && l.ends_with(" " + id)) return true;
        return false;
    }
    std::string last_id;
};

// The GPU device nodes (nvidia<N>) in an `ls /dev` listing.
std::vector<std::string> gpu_nodes(const std::string& ls) {
    std::vector<std::string> out;
    std::istringstream in(ls);
    for (std::string l; std::getline(in, l);)
        if (l.size() > 6 && l.starts_with("nvidia") && std::isdigit(static_cast<unsigned char>(l[6]))) out.push_back(l);
    return out;
}

void one_gpu_by_uuid(World& w) {
    SCOPED_TRACE("NVIDIA_VISIBLE_DEVICES=<uuid of GPU 3>");
    auto r = w.run("ls /dev; echo ---; nvidia-smi -L", {"--env", std::string("NVIDIA_VISIBLE_DEVICES=") + kGpu3});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err << slurp(w.dir.path() + "/kgpu-runtime.log");
    const std::string ls = r.out.substr(0, r.out.find("---"));
    EXPECT_THAT(gpu_nodes(ls), ::testing::ElementsAre("nvidia3"));
    EXPECT_THAT(ls, HasSubstr("nvidiactl"));
    // libnvidia-ml.so.1 by its bare name: only the container's linker cache knows /usr/lib64.
    EXPECT_EQ(r.out.substr(r.out.find("---") + 4), std::string("GPU 0: NVIDIA H100 80GB HBM3 (UUID: ") + kGpu3 + ")\n");
}

void all_gives_eight(World& w) {
    SCOPED_TRACE("NVIDIA_VISIBLE_DEVICES=all");
    auto r = w.run("ls /dev; echo ---; nvidia-smi -L", {"--env", "NVIDIA_VISIBLE_DEVICES=all"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(gpu_nodes(r.out.substr(0, r.out.find("---"))).size(), 8u);
    const std::string smi = r.out.substr(r.out.find("---") + 4);
    EXPECT_EQ(std::count(smi.begin(), smi.end(), '\n'), 8);
    EXPECT_THAT(smi, HasSubstr("GPU 7: NVIDIA H100 80GB HBM3"));
}

void no_variable_no_change(World& w) {
    SCOPED_TRACE("no NVIDIA_VISIBLE_DEVICES");
    auto r = w.run("ls /dev; ls /usr/lib64 2>&1; true", {});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_THAT(gpu_nodes(r.out), ::testing::IsEmpty());
    EXPECT_THAT(r.out, Not(HasSubstr("nvidiactl")));
    EXPECT_THAT(r.out, Not(HasSubstr("libnvidia-ml")));
    EXPECT_THAT(slurp(w.dir.path() + "/kgpu-runtime.log"), HasSubstr("no GPU requested; the spec is left untouched"));
}

void unmet_requirement_stops_create_before_runc(World& w) {
    SCOPED_TRACE("NVIDIA_REQUIRE_CUDA=cuda>=12.8 on a CUDA 12.4 driver");
    auto r = w.run("true", {"--env", "NVIDIA_VISIBLE_DEVICES=all", "--env", "NVIDIA_REQUIRE_CUDA=cuda>=12.8"});
    EXPECT_NE(r.exit_code, 0);
    // What the pod's event shows: containerd's "OCI runtime create failed: <our message>".
    EXPECT_THAT(r.err, HasSubstr("OCI runtime create failed"));
    EXPECT_THAT(r.err, HasSubstr("cuda>=12.8"));
    EXPECT_THAT(r.err, HasSubstr("driver 550.54.15"));
    EXPECT_THAT(r.err, HasSubstr("CUDA 12.4"));
    EXPECT_THAT(r.err, HasSubstr("570.26"));
    EXPECT_FALSE(w.runc_created(w.last_id)) << slurp(w.dir.path() + "/runc.calls");
    EXPECT_TRUE(w.runc_created("c1"));  // the recorder does see the creates that happen
}

void secure_mode(World& w) {
    SCOPED_TRACE("secure settings");
    auto stolen = w.run("ls /dev", {"--env", "NVIDIA_VISIBLE_DEVICES=all"}, "kgpu-container-runtime-secure");
    ASSERT_EQ(stolen.exit_code, 0) << stolen.out << stolen.err;
    EXPECT_THAT(gpu_nodes(stolen.out), ::testing::IsEmpty());
    // The device plugin's volume-mounts answer: /dev/null mounted per device, which a pod spec
    // cannot forge.
    auto mounted = w.run("ls /dev", {"--env", "NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices", "--mount",
                                     std::string("type=bind,src=/dev/null,dst=/var/run/nvidia-container-devices/") + kGpu3 +
                                         ",options=rbind:ro"},
                         "kgpu-container-runtime-secure");
    ASSERT_EQ(mounted.exit_code, 0) << mounted.out << mounted.err;
    EXPECT_THAT(gpu_nodes(mounted.out), ::testing::ElementsAre("nvidia3"));
    // The CDI annotation of the device plugin's cdi-annotations strategy.
    auto annotated = w.run("ls /dev", {"--annotation", "cdi.k8s.io/kgpu_nvidia.com-gpu=nvidia.com/gpu=5"},
                           "kgpu-container-runtime-secure");
    ASSERT_EQ(annotated.exit_code, 0) << annotated.out << annotated.err;
    EXPECT_THAT(gpu_nodes(annotated.out), ::testing::ElementsAre("nvidia5"));
    // A privileged container is believed, as NVIDIA's rules say.
    auto privileged = w.run("nvidia-smi -L", {"--privileged", "--env", "NVIDIA_VISIBLE_DEVICES=all"},
                            "kgpu-container-runtime-secure");
    ASSERT_EQ(privileged.exit_code, 0) << privileged.out << privileged.err;
    EXPECT_EQ(std::count(privileged.out.begin(), privileged.out.end(), '\n'), 8);
}

TEST(ContainerdE2E, GpusThroughKgpusRuntime) {
    World w;
    w.setup();
    if (!w.skip.empty()) GTEST_SKIP() << w.skip;
    ASSERT_EQ(w.failure, "") << (w.containerd ? w.containerd->process().err() : "");
    one_gpu_by_uuid(w);
    all_gives_eight(w);
    no_variable_no_change(w);
    unmet_requirement_stops_create_before_runc(w);
    secure_mode(w);
    EXPECT_EQ(w.containerd->stop(), 0) << w.containerd->process().err();
}

}  // namespace
