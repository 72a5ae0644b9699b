// Every command that writes a file goes through files::write_atomic (issue #14 items 7 and 8):
// `runtime configure`, `cdi generate --output`, `labels --output-file` write through a symlinked
// path to its target (the link stays, the target keeps its mode), refuse a dangling link, and
// create files and directories with fixed modes whatever the umask, as the device plugin does for
// its CDI spec.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/fake_kubelet.h"
#include "support/process.h"
#include "support/files.h"

namespace fs = std::filesystem;
using kgpu::test::run_process;
using kgpu::test::RunResult;
using kgpu::test::TempDir;
using ::testing::HasSubstr;

namespace {

using kgpu::test::slurp;

const std::string kSource = KGPU_SOURCE_DIR;

unsigned mode_of(const fs::path& p) {
    struct stat st {};
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
}

// The umask kgpu inherits for one test.
struct Umask {
    explicit Umask(mode_t m) : old(::umask(m)) {}
    ~Umask() { ::umask(old); }
    mode_t old;
};

// A config in real/ and a symlink to it in etc/ (relative, as distributions and config
// management lay them out): the write must land in real/ and leave the link.
struct Linked {
    TempDir dir;
    fs::path real, link;
    Linked(const std::string& name, const std::string& content, unsigned mode) {
        fs::create_directories(fs::path(dir.path()) / "real");
        fs::create_directories(fs::path(dir.path()) / "etc");
        real = fs::path(dir.path()) / "real" / name;
        link = fs::path(dir.path()) / "etc" / name;
        std::ofstream(real) << content;
        fs::permissions(real, fs::perms(mode));
        fs::create_symlink("../real/" + name, link);
    }
    void expect_written_through(const std::string& what) const {
        EXPECT_TRUE(fs::is_symlink(link)) << what << ": the link was replaced by a regular file";
        EXPECT_EQ(fs::read_symlink(link), "../real/" + real.filename().string()) << what;
        for (const auto& d : {real.parent_path(), link.parent_path()})
            for (const auto& e : fs::directory_iterator(d))
                EXPECT_THAT(e.path().filename().string(), Not(HasSubstr(".tmp-"))) << what << ": a temporary file is left";
    }
};

RunResult configure(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {KGPU_BINARY, "runtime", "configure"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_process(argv);
}

// A driver root for `cdi generate` (tests/cdi/fixtures/driver-root plus device nodes).
struct DriverRoot {
    TempDir dir;
    DriverRoot() {
        fs::copy(kSource + "/tests/cdi/fixtures/driver-root", dir.path(),
                 fs::copy_options::recursive | fs::copy_options::copy_symlinks);
        fs::create_directories(dir.path() + "/dev");
        node("/dev/nvidiactl", 195, 255);
        node("/dev/nvidia-uvm", 508, 0);
        node("/dev/nvidia-uvm-tools", 508, 1);
        for (unsigned i = 0; i < 4; ++i) node("/dev/nvidia" + std::to_string(i), 195, i);
    }
    void node(const std::string& path, unsigned maj, unsigned min) const {
        const std::string p = dir.path() + path;
        if (::geteuid() != 0 || ::mknod(p.c_str(), S_IFCHR | 0666, makedev(maj, min)) != 0) std::ofstream(p) << "stand-in\n";
    }
};

RunResult cdi_generate(const DriverRoot& root, const std::string& output) {
    return run_process({KGPU_BINARY, "cdi", "generate", "--nvml-library", KGPU_SIM_LIBRARY, "--driver-root", root.dir.path(),
                        "--proc-root", root.dir.path() + "/proc", "--sysfs-root", root.dir.path() + "/sys", "--output", output},
                       {{"KGPU_SIM_NODE", kSource + "/sim/nodes/t4x4.yaml"}});
}

RunResult labels(const std::string& output) {
    TempDir sysfs;
    return run_process({KGPU_BINARY, "labels", "--oneshot", "--nvml-library", KGPU_SIM_LIBRARY, "--sysfs-root", sysfs.path(),
                        "--output-file", output},
                       {{"KGPU_SIM_NODE", kSource + "/sim/nodes/t4x4.yaml"}});
}

}  // namespace

TEST(Writers, RuntimeConfigureWritesThroughASymlinkedConfig) {
    Linked c("config.toml", slurp(kSource + "/tests/runtime/fixtures/v2-systemd.toml"), 0600);
    auto r = configure({"--config", c.link.string(), "--drop-in-config=", "--set-as-default"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    c.expect_written_through("runtime configure");
    EXPECT_THAT(slurp(c.real), HasSubstr("default_runtime_name = \"nvidia\""));
    EXPECT_EQ(mode_of(c.real), 0600u);
}

TEST(Writers, CdiGenerateWritesThroughASymlinkedOutput) {
    DriverRoot root;
    Linked c("nvidia.yaml", "old spec\n", 0640);
    auto r = cdi_generate(root, c.link.string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    c.expect_written_through("cdi generate");
    EXPECT_THAT(slurp(c.real), HasSubstr("kind: nvidia.com/gpu"));
    EXPECT_EQ(mode_of(c.real), 0640u);
}

TEST(Writers, LabelsWriteThroughASymlinkedOutput) {
    Linked c("gfd", "old=labels\n", 0644);
    auto r = labels(c.link.string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    c.expect_written_through("labels");
    EXPECT_THAT(slurp(c.real), HasSubstr("nvidia.com/gpu.count=4"));
}

TEST(Writers, DanglingLinksAreErrorsAndCreateNothing) {
    TempDir dir;
    const fs::path link = fs::path(dir.path()) / "out";
    fs::create_symlink("missing/target", link);
    auto rt = configure({"--config", link.string(), "--drop-in-config="});
    EXPECT_NE(rt.exit_code, 0);
    EXPECT_THAT(rt.err, HasSubstr("which does not exist (a dangling link)"));
    DriverRoot root;
    auto cdi = cdi_generate(root, link.string());
    EXPECT_NE(cdi.exit_code, 0);
    EXPECT_THAT(cdi.err, HasSubstr("which does not exist (a dangling link)"));
    auto lb = labels(link.string());
    EXPECT_NE(lb.exit_code, 0);
    EXPECT_THAT(lb.err, HasSubstr("which does not exist (a dangling link)"));
    EXPECT_TRUE(fs::is_symlink(link));
    EXPECT_FALSE(fs::exists(fs::path(dir.path()) / "missing"));
}

TEST(Writers, ModesDoNotDependOnTheUmask) {
    Umask open_umask(0);
    TempDir dir;
    const fs::path d(dir.path());
    // A new config, and a drop-in in directories that do not exist yet.
    auto r = configure({"--config", (d / "config.toml").string(), "--drop-in", (d / "conf.d/nvidia/99-nvidia.toml").string()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(mode_of(d / "config.toml"), 0644u);
    EXPECT_EQ(mode_of(d / "conf.d"), 0755u);
    EXPECT_EQ(mode_of(d / "conf.d/nvidia"), 0755u);
    EXPECT_EQ(mode_of(d / "conf.d/nvidia/99-nvidia.toml"), 0644u);
    DriverRoot root;
    auto c = cdi_generate(root, (d / "spec.yaml").string());
    ASSERT_EQ(c.exit_code, 0) << c.err;
    EXPECT_EQ(mode_of(d / "spec.yaml"), 0644u);
    auto l = labels((d / "gfd").string());
    ASSERT_EQ(l.exit_code, 0) << l.err;
    EXPECT_EQ(mode_of(d / "gfd"), 0644u);
}

TEST(Writers, DevicePluginCdiSpecDirectoryAndSpecModesDoNotDependOnTheUmask) {
    TempDir dir;
    kgpu::test::FakeKubelet kubelet(dir.path());
    ASSERT_TRUE(kubelet.start());
    const fs::path cdi = fs::path(dir.path()) / "run/cdi";
    Umask open_umask(0);
    kgpu::test::ChildProcess plugin({KGPU_BINARY, "device-plugin", "--device-plugin-path", dir.path(), "--nvml-library",
                                     KGPU_SIM_LIBRARY, "--device-list-strategy", "cdi-annotations", "--cdi-spec-dir",
                                     cdi.string()},
                                    {{"KGPU_SIM_NODE", kSource + "/sim/nodes/t4x4.yaml"}});
    ASSERT_TRUE(kubelet.wait_registered("nvidia.com/gpu", 1, std::chrono::seconds(20))) << plugin.err();
    ASSERT_TRUE(fs::exists(cdi / "k8s.device-plugin.nvidia.com-gpu.json")) << plugin.err();
    EXPECT_EQ(mode_of(fs::path(dir.path()) / "run"), 0755u);
    EXPECT_EQ(mode_of(cdi), 0755u);
    EXPECT_EQ(mode_of(cdi / "k8s.device-plugin.nvidia.com-gpu.json"), 0644u);
    plugin.signal(SIGTERM);
    plugin.wait(10000);
}
