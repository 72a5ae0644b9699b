// `kgpu runtime install` with the built binary, into a fake host root that has nothing but glibc
// (the dynamic loader, libc, libm; this machine's, or Debian 11's older one): the installed kgpu
// must run there on the glibc it carries (the install runs it under chroot), containerd's config
// gets kgpu's runtime, a stand-in containerd is restarted by SIGHUP
// only when its config changed, /dev/char links appear, and a second run changes nothing.
// Root only (chroot, mknod).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "common/unix_socket.h"
#include "support/files.h"
#include "support/process.h"

namespace fs = std::filesystem;
using kgpu::test::ChildProcess;
using kgpu::test::RunResult;
using kgpu::test::run_process;
using kgpu::test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

using kgpu::test::slurp;

// A process listening on a unix socket that, like containerd, does not handle SIGHUP.
struct FakeContainerd {
    pid_t pid = -1;
    explicit FakeContainerd(const std::string& socket) {
        fs::create_directories(fs::path(socket).parent_path());
        fs::remove(socket);
        int ready[2];
        if (::pipe(ready) != 0) return;
        pid = ::fork();
        if (pid == 0) {
            const kgpu::Fd fd = kgpu::unix_bind(socket);
            if (!fd || ::listen(fd.get(), 16) != 0) ::_exit(2);
            (void)!::write(ready[1], "x", 1);
            for (;;) ::pause();
        }
        char c;
        (void)!::read(ready[0], &c, 1);
        ::close(ready[0]);
        ::close(ready[1]);
    }
    // The signal that ended it, 0 while it runs.
    int ended_by() {
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) != pid) return 0;
        pid = -1;
        return WIFSIGNALED(status) ? WTERMSIG(status) : -1;
    }
    ~FakeContainerd() {
        if (pid > 0) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
        }
    }
};

struct Host {
    TempDir dir;
    std::string root() const { return dir.path(); }
    std::string path(const std::string& p) const { return dir.path() + p; }
    Host() {
        // Only glibc: the loader and the libraries of libc6 the binary may use.
        for (const char* lib : {"/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libm.so.6"}) {
            fs::create_directories(fs::path(path(lib)).parent_path());
            fs::copy_file(lib, path(lib));
        }
        dir.write("etc/containerd/config.toml", "version = 2\n"
                                                "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n"
                                                "  runtime_type = \"io.containerd.runc.v2\"\n"
                                                "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n"
                                                "  SystemdCgroup = true\n");
        fs::create_directories(path("/dev/nvidia-caps"));
        for (unsigned i = 0; i < 2; ++i) node("/dev/nvidia" + std::to_string(i), 195, i);
        node("/dev/nvidiactl", 195, 255);
        node("/dev/nvidia-caps/nvidia-cap1", 511, 1);
    }
    void node(const std::string& p, unsigned maj, unsigned min) const {
        ::mknod(path(p).c_str(), S_IFCHR | 0666, makedev(maj, min));
    }
};

// The versioned directory a `runtime install` reports carrying the glibc into.
std::string carried_dir(const std::string& out) {
    std::smatch m;
    static const std::regex re(R"((?:carried|unchanged:) (/\S*)/\{ld-linux)");
    return std::regex_search(out, m, re) ? m[1].str() : std::string();
}

TEST(RuntimeInstall, OntoAHostWithOnlyGlibcThenIdempotent) {
    if (::geteuid() != 0) GTEST_SKIP() << "chroot and mknod need root";
    Host host;
    const std::string socket = host.path("/run/containerd/containerd.sock");
    FakeContainerd containerd(socket);
    // The install restarts containerd (SIGHUP: it exits) and waits for it to serve its socket
    // again; this test is the service manager that starts it again.
    ChildProcess install({KGPU_BINARY, "runtime", "install", "--host-root", host.root()});
    for (int i = 0; i < 3000 && containerd.pid > 0; ++i) {
        if (containerd.ended_by() == SIGHUP) break;
        ::usleep(10000);
    }
    EXPECT_EQ(containerd.pid, -1) << "the stand-in containerd got no SIGHUP";
    FakeContainerd restarted(socket);
    RunResult r;
    r.exit_code = install.wait(60000);
    r.out = install.out();
    r.err = install.err();
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("containerd serves /run/containerd/containerd.sock again"));
    EXPECT_THAT(r.out, HasSubstr("installed /usr/local/kgpu/kgpu"));
    // The copy runs inside the host's root, with only glibc there.
    EXPECT_THAT(r.out, HasSubstr("verified: /usr/local/kgpu/kgpu --version runs on the host"));
    // The copy runs on the loader and glibc it carries, whatever the host's glibc.
    // ... in a directory of their own, named by their contents: an upgrade never mixes two glibcs.
    const std::string lib = carried_dir(r.out);
    ASSERT_THAT(lib, ::testing::MatchesRegex("/usr/local/kgpu/lib/[0-9a-f]{12}")) << r.out;
    EXPECT_THAT(r.out, HasSubstr("carried " + lib + "/{ld-linux-x86-64.so.2,libc.so.6,libm.so.6,libpthread.so.0"));
    for (const char* name : {"ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1"})
        EXPECT_TRUE(slurp(host.path(lib + "/" + name)) == slurp(std::string("/lib/x86_64-linux-gnu/") + name)) << name;
    auto elf = run_process({"/usr/bin/readelf", "-l", "-d", host.path("/usr/local/kgpu/kgpu")});
    EXPECT_THAT(elf.out, HasSubstr("[Requesting program interpreter: " + lib + "/ld-linux-x86-64.so.2]"));
    EXPECT_THAT(elf.out, HasSubstr("Library rpath: [" + lib + "]"));
    // Without the build's debug information: every container start executes the copy.
    const size_t built = slurp(KGPU_BINARY).size(), installed = slurp(host.path("/usr/local/kgpu/kgpu")).size();
    EXPECT_LT(installed, built / 2) << built << " -> " << installed;
    EXPECT_THAT(r.out, HasSubstr(std::string(KGPU_BINARY) + " is "));
    EXPECT_THAT(r.out, HasSubstr("MB with its debug information, not copied"));
    auto sections = run_process({"/usr/bin/readelf", "-S", "-W", host.path("/usr/local/kgpu/kgpu")});
    EXPECT_THAT(sections.out, Not(HasSubstr(".debug_info")));
    EXPECT_EQ(sections.err, "");
    EXPECT_EQ(fs::read_symlink(host.path("/usr/local/kgpu/kgpu-container-runtime")), "kgpu");
    EXPECT_EQ(fs::read_symlink(host.path("/usr/local/kgpu/nvidia-cdi-hook")), "kgpu");
    EXPECT_EQ(slurp(host.path("/usr/local/kgpu/container-runtime-config.path")), "/etc/kgpu/container-runtime.toml\n");
    const std::string rc = slurp(host.path("/etc/kgpu/container-runtime.toml"));
    EXPECT_THAT(rc, HasSubstr("accept-nvidia-visible-devices-envvar-when-unprivileged = false"));
    EXPECT_THAT(rc, HasSubstr("accept-nvidia-visible-devices-as-volume-mounts = true"));
    EXPECT_THAT(rc, HasSubstr("hook-path = \"/usr/local/kgpu/nvidia-cdi-hook\""));
    const std::string cfg = slurp(host.path("/etc/containerd/config.toml"));
    EXPECT_THAT(cfg, HasSubstr("BinaryName = \"/usr/local/kgpu/kgpu-container-runtime\""));
    // The runc runtime's options are copied (SystemdCgroup), as nvidia-ctk does.
    const auto nvidia = cfg.find("runtimes.nvidia.options]");
    ASSERT_NE(nvidia, std::string::npos) << cfg;
    EXPECT_THAT(cfg.substr(nvidia), HasSubstr("SystemdCgroup = true"));
    EXPECT_TRUE(fs::exists(host.path("/etc/containerd/config.toml.bak")));
    EXPECT_THAT(r.out, HasSubstr("restarting containerd: SIGHUP to pid"));
    EXPECT_EQ(fs::read_symlink(host.path("/dev/char/195:1")), "/dev/nvidia1");
    EXPECT_EQ(fs::read_symlink(host.path("/dev/char/511:1")), "/dev/nvidia-caps/nvidia-cap1");
    EXPECT_THAT(r.out, HasSubstr("created 4 /dev/char links"));

    // Again: nothing to do, and containerd is left alone.
    FakeContainerd& again = restarted;
    struct stat before {};
    ::stat(host.path("/usr/local/kgpu/kgpu").c_str(), &before);
    auto r2 = run_process({KGPU_BINARY, "runtime", "install", "--host-root", host.root()});
    ASSERT_EQ(r2.exit_code, 0) << r2.out << r2.err;
    EXPECT_THAT(r2.out, HasSubstr("unchanged: /usr/local/kgpu/kgpu"));
    EXPECT_THAT(r2.out, HasSubstr("unchanged: " + lib + "/{ld-linux-x86-64.so.2,"));
    EXPECT_THAT(r2.out, HasSubstr("unchanged: /etc/kgpu/container-runtime.toml"));
    EXPECT_THAT(r2.out, HasSubstr("unchanged: /usr/local/kgpu/container-runtime-config.path"));
    EXPECT_THAT(r2.out, HasSubstr("containerd not restarted: its config did not change"));
    EXPECT_THAT(r2.out, HasSubstr("unchanged: /dev/char links for 4 NVIDIA device nodes"));
    EXPECT_THAT(r2.out, Not(HasSubstr("SIGHUP")));
    struct stat after {};
    ::stat(host.path("/usr/local/kgpu/kgpu").c_str(), &after);
    EXPECT_EQ(before.st_ino, after.st_ino);
    ::usleep(50000);
    EXPECT_EQ(again.ended_by(), 0);
}

// A copy of the built kgpu that runs on its own copy of this machine's glibc (the build's RPATH
// is $ORIGIN/lib////…, searched before the system's), with `marker` appended to librt.so.1: to
// the install, which carries the glibc it runs on, another glibc (as in a newer image).
std::string kgpu_on_another_glibc(const TempDir& dir, const std::string& name, const std::string& marker) {
    const fs::path bin = fs::path(dir.path()) / name;
    fs::create_directories(bin / "lib");
    fs::copy_file(KGPU_BINARY, bin / "kgpu");
    for (const char* lib : {"ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1"})
        fs::copy_file(fs::canonical(std::string("/lib/x86_64-linux-gnu/") + lib), bin / "lib" / lib);
    std::ofstream(bin / "lib/librt.so.1", std::ios::app) << marker;
    return (bin / "kgpu").string();
}

std::string interpreter_of(const std::string& binary) {
    auto elf = run_process({"/usr/bin/readelf", "-l", binary});
    std::smatch m;
    static const std::regex re(R"(program interpreter: (\S+)\])");
    return std::regex_search(elf.out, m, re) ? m[1].str() : std::string();
}

// An upgrade to an image with another glibc: the new loader and libraries go to a directory of
// their own, complete before the binary that names them is swapped in (one rename), so a runtime
// or hook exec'ed meanwhile runs either the old binary on the old glibc or the new on the new, never
// a mix. The previous directory stays (the old binary may still be starting); older ones go.
TEST(RuntimeInstall, AnUpgradeToAnotherGlibcKeepsThePreviousOne) {
    if (::geteuid() != 0) GTEST_SKIP() << "chroot needs root";
    Host host;
    TempDir images;
    auto install = [&](const std::string& binary) {
        return run_process({binary, "runtime", "install", "--host-root", host.root(), "--restart-mode", "none", "--no-dev-char-links"});
    };
    const std::string installed = host.path("/usr/local/kgpu/kgpu");
    auto first = install(KGPU_BINARY);
    ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
    const std::string a = carried_dir(first.out);
    ASSERT_FALSE(a.empty()) << first.out;
    EXPECT_EQ(interpreter_of(installed), a + "/ld-linux-x86-64.so.2");

    const std::string image1 = kgpu_on_another_glibc(images, "image1", "glibc one");
    auto second = install(image1);
    ASSERT_EQ(second.exit_code, 0) << second.out << second.err;
    const std::string b = carried_dir(second.out);
    ASSERT_FALSE(b.empty()) << second.out;
    EXPECT_NE(a, b);
    EXPECT_THAT(second.out, HasSubstr("carried " + b + "/{"));
    EXPECT_THAT(second.out, HasSubstr("installed /usr/local/kgpu/kgpu"));
    EXPECT_THAT(second.out, HasSubstr("verified: /usr/local/kgpu/kgpu --version runs on the host"));
    EXPECT_THAT(second.out, HasSubstr("kept " + a + ":"));
    EXPECT_EQ(interpreter_of(installed), b + "/ld-linux-x86-64.so.2");
    EXPECT_TRUE(slurp(host.path(b + "/librt.so.1")).ends_with("glibc one"));
    // The old directory is whole: a binary that still names it finds the glibc it was started with.
    for (const char* lib : {"ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1"})
        EXPECT_TRUE(slurp(host.path(a + "/" + lib)) == slurp(std::string("/lib/x86_64-linux-gnu/") + lib)) << lib;

    const std::string image2 = kgpu_on_another_glibc(images, "image2", "glibc two");
    auto third = install(image2);
    ASSERT_EQ(third.exit_code, 0) << third.out << third.err;
    const std::string c = carried_dir(third.out);
    EXPECT_NE(c, b);
    EXPECT_EQ(interpreter_of(installed), c + "/ld-linux-x86-64.so.2");
    EXPECT_TRUE(fs::exists(host.path(b + "/libc.so.6"))) << "the previous glibc was removed";
    EXPECT_FALSE(fs::exists(host.path(a))) << "the glibc before the previous one is still there";
    EXPECT_THAT(third.out, HasSubstr("kept " + b + ":"));
    EXPECT_THAT(third.out, HasSubstr("removed " + a + ":"));

    // The same image again: nothing changes, nothing is removed.
    struct stat before {};
    ::stat(installed.c_str(), &before);
    auto again = install(image2);
    ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
    EXPECT_THAT(again.out, HasSubstr("unchanged: " + c + "/{"));
    EXPECT_THAT(again.out, HasSubstr("unchanged: /usr/local/kgpu/kgpu"));
    EXPECT_THAT(again.out, Not(HasSubstr("removed")));
    EXPECT_THAT(again.out, Not(HasSubstr("kept")));
    struct stat after {};
    ::stat(installed.c_str(), &after);
    EXPECT_EQ(before.st_ino, after.st_ino);
    EXPECT_TRUE(fs::exists(host.path(b + "/libc.so.6")));
    std::vector<std::string> dirs;
    for (const auto& e : fs::directory_iterator(host.path("/usr/local/kgpu/lib"))) dirs.push_back(e.path().filename().string());
    std::ranges::sort(dirs);
    std::vector<std::string> expected = {fs::path(b).filename().string(), fs::path(c).filename().string()};
    std::ranges::sort(expected);
    EXPECT_EQ(dirs, expected);

    // kgpu doctor follows the interpreter the installed runtime names: a library missing from
    // its directory fails runtime.toolkit.
    auto ok = run_process({KGPU_BINARY, "doctor", "--root", host.root(), "--json"});
    EXPECT_THAT(ok.out, HasSubstr("(present, with the glibc it carries)")) << ok.out << ok.err;
    fs::remove(host.path(c + "/libm.so.6"));
    auto broken = run_process({KGPU_BINARY, "doctor", "--root", host.root(), "--json"});
    EXPECT_THAT(broken.out, HasSubstr("missing: " + c + "/libm.so.6")) << broken.out << broken.err;
}

// An upgrade whose new copy does not run on the host (here: its carried loader is broken) is not
// put in place: the binary containerd runs stays the old one, on its old glibc.
TEST(RuntimeInstall, AnUpgradeThatDoesNotRunLeavesTheOldBinary) {
    if (::geteuid() != 0) GTEST_SKIP() << "chroot needs root";
    Host host;
    TempDir images;
    auto install = [&](const std::string& binary) {
        return run_process({binary, "runtime", "install", "--host-root", host.root(), "--restart-mode", "none", "--no-dev-char-links"});
    };
    const std::string installed = host.path("/usr/local/kgpu/kgpu");
    auto first = install(KGPU_BINARY);
    ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
    const std::string a = carried_dir(first.out);
    const std::string before = slurp(installed);
    const std::string image = kgpu_on_another_glibc(images, "broken", "");
    std::ofstream(fs::path(image).parent_path() / "lib/ld-linux-x86-64.so.2", std::ios::trunc) << "not a loader";
    auto broken = install(image);
    EXPECT_EQ(broken.exit_code, 1) << broken.out << broken.err;
    EXPECT_THAT(broken.err, HasSubstr("does not run on this host"));
    EXPECT_THAT(broken.err, HasSubstr("it was not put in place (/usr/local/kgpu/kgpu is the binary from before)"));
    EXPECT_TRUE(slurp(installed) == before);
    EXPECT_EQ(interpreter_of(installed), a + "/ld-linux-x86-64.so.2");
    EXPECT_FALSE(fs::exists(host.path("/usr/local/kgpu/.kgpu.new")));
    auto still = run_process({"/usr/sbin/chroot", host.root(), "/usr/local/kgpu/kgpu", "--version"});
    EXPECT_EQ(still.exit_code, 0) << still.out << still.err;
}

TEST(RuntimeInstall, RestartModes) {
    if (::geteuid() != 0) GTEST_SKIP() << "chroot and mknod need root";
    Host host;
    auto none = run_process({KGPU_BINARY, "runtime", "install", "--host-root", host.root(), "--restart-mode", "none", "--no-verify"});
    ASSERT_EQ(none.exit_code, 0) << none.err;
    EXPECT_THAT(none.out, HasSubstr("containerd not restarted (--restart-mode none): restart it to apply"));
    // systemd through the host's D-Bus socket: none here, so a clear error, after the config was written.
    Host other;
    auto systemd = run_process({KGPU_BINARY, "runtime", "install", "--host-root", other.root(), "--restart-mode", "systemd", "--no-verify"});
    EXPECT_EQ(systemd.exit_code, 1);
    EXPECT_THAT(systemd.err, HasSubstr("restarting containerd through systemd"));
    EXPECT_THAT(systemd.err, HasSubstr(other.path("/run/dbus/system_bus_socket")));
    // signal with no containerd listening: the error names the socket.
    Host third;
    auto signal = run_process({KGPU_BINARY, "runtime", "install", "--host-root", third.root(), "--no-verify"});
    EXPECT_EQ(signal.exit_code, 1);
    EXPECT_THAT(signal.err, HasSubstr(third.path("/run/containerd/containerd.sock")));
}

// SIGHUP makes containerd exit; when nothing starts it again (no service manager watching it),
// the install says so and fails, instead of leaving the node without a container runtime
// silently; and what it did before is printed as it happened (in the DaemonSet, a container's
// output after containerd went away never reaches its log).
TEST(RuntimeInstall, AContainerdNobodyRestartsIsAnError) {
    if (::geteuid() != 0) GTEST_SKIP() << "chroot and mknod need root";
    Host host;
    FakeContainerd containerd(host.path("/run/containerd/containerd.sock"));
    auto r = run_process({KGPU_BINARY, "runtime", "install", "--host-root", host.root(), "--no-verify", "--restart-timeout", "1"});
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_EQ(containerd.ended_by(), SIGHUP);
    EXPECT_THAT(r.err, HasSubstr("containerd did not serve /run/containerd/containerd.sock again within 1 s"));
    EXPECT_THAT(r.err, HasSubstr("nothing started it again"));
    EXPECT_THAT(r.out, HasSubstr("installed /usr/local/kgpu/kgpu"));
    EXPECT_THAT(r.out, HasSubstr("restarting containerd: SIGHUP to pid"));
    EXPECT_THAT(slurp(host.path("/etc/containerd/config.toml")), HasSubstr("kgpu-container-runtime"));
    // --restart-timeout 0: the install does not wait (a caller that supervises containerd itself).
    Host other;
    FakeContainerd unwatched(other.path("/run/containerd/containerd.sock"));
    auto quick = run_process({KGPU_BINARY, "runtime", "install", "--host-root", other.root(), "--no-verify", "--restart-timeout", "0"});
    EXPECT_EQ(quick.exit_code, 0) << quick.out << quick.err;
    EXPECT_THAT(quick.out, Not(HasSubstr("containerd serves")));
}

// The install directory on a noexec mount: the copy cannot run, whatever it carries.
struct NoexecMount {
    std::string dir;
    bool mounted = false;
    explicit NoexecMount(std::string d) : dir(std::move(d)) {
        fs::create_directories(dir);
        mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOEXEC, nullptr) == 0;
    }
    ~NoexecMount() {
        if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
    }
};

TEST(RuntimeInstall, ACopyThatCannotRunChangesNothingElse) {
    if (::geteuid() != 0) GTEST_SKIP() << "chroot and mknod need root";
    Host host;
    NoexecMount noexec(host.path("/usr/local/kgpu"));
    if (!noexec.mounted) GTEST_SKIP() << "cannot mount a noexec tmpfs here: " << std::strerror(errno);
    const std::string before = slurp(host.path("/etc/containerd/config.toml"));
    FakeContainerd containerd(host.path("/run/containerd/containerd.sock"));
    auto r = run_process({KGPU_BINARY, "runtime", "install", "--host-root", host.root()});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("does not run on this host"));
    EXPECT_THAT(r.err, HasSubstr("left as they were"));
    EXPECT_EQ(slurp(host.path("/etc/containerd/config.toml")), before);
    EXPECT_FALSE(fs::exists(host.path("/etc/kgpu/container-runtime.toml")));
    EXPECT_EQ(containerd.ended_by(), 0);
}

// A host whose only libraries are an old glibc (Debian 11's 2.31, unpacked by scripts/setup --all into
// build/old-glibc/root), as on Ubuntu 20.04/22.04 or RHEL 8/9 nodes: kgpu as built (glibc 2.36)
// does not run there; the installed copy does, as kgpu, as the runtime, as the CDI hook, and
// with the driver's NVML (the simulator and the C++ libraries it links, copied in as the driver).
TEST(RuntimeInstall, RunsOnAHostWithAnOlderGlibc) {
    if (::geteuid() != 0) GTEST_SKIP() << "chroot needs root";
    const fs::path old_root = fs::path(KGPU_SOURCE_DIR) / "build/old-glibc/root";
    if (!fs::exists(old_root / "lib/x86_64-linux-gnu/libc.so.6"))
        GTEST_SKIP() << old_root.string() << ": no old glibc (scripts/setup --all downloads Debian 11's libc6 there; it could not)";
    TempDir dir;
    const std::string root = dir.path() + "/host";
    fs::copy(old_root, root, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    dir.write("host/etc/containerd/config.toml", "version = 2\n");
    auto chroot = [&](const std::string& command, const std::map<std::string, std::string>& env = {}) {
        return run_process({"/usr/sbin/chroot", root, "/bin/busybox", "sh", "-c", command}, env);
    };
    fs::create_directories(root + "/bin");
    fs::copy_file("/bin/busybox", root + "/bin/busybox");  // busybox-static: a shell with no libraries

    // Without the fix: the binary as built needs a newer glibc than this host's.
    fs::copy_file(KGPU_BINARY, root + "/kgpu-as-built");
    auto plain = chroot("/kgpu-as-built --version");
    EXPECT_NE(plain.exit_code, 0);
    EXPECT_THAT(plain.out + plain.err, HasSubstr("version `GLIBC_2.3"));

    auto r = run_process({KGPU_BINARY, "runtime", "install", "--host-root", root, "--restart-mode", "none"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("verified: /usr/local/kgpu/kgpu --version runs on the host: "));
    auto version = chroot("/usr/local/kgpu/kgpu --version");
    EXPECT_EQ(version.exit_code, 0) << version.out << version.err;
    // The runtime's name dispatches to the runtime (which passes --version on to runc, absent here).
    auto rt = chroot("/usr/local/kgpu/kgpu-container-runtime --version");
    EXPECT_THAT(rt.err, HasSubstr("no low-level OCI runtime found")) << rt.out << rt.err;
    // A hook, reading the OCI state from stdin like runc gives it.
    dir.write("host/bundle/config.json", R"({"ociVersion":"1.0.2","root":{"path":"/ctr"}})");
    dir.write("host/state.json", R"({"ociVersion":"1.0.2","id":"c","pid":1,"bundle":"/bundle"})");
    fs::create_directories(root + "/ctr");
    auto hook = chroot("/usr/local/kgpu/nvidia-cdi-hook create-symlinks --link libnvidia-ml.so.1::/usr/lib/libnvidia-ml.so < /state.json");
    EXPECT_EQ(hook.exit_code, 0) << hook.out << hook.err;
    EXPECT_EQ(fs::read_symlink(root + "/ctr/usr/lib/libnvidia-ml.so"), "libnvidia-ml.so.1");
    // NVML: the driver's library (the simulator, which links libpthread, libdl and librt as the
    // real one does) resolves its glibc to the carried one, never this host's 2.31.
    const std::string drv = root + "/usr/lib/x86_64-linux-gnu";
    fs::copy_file(KGPU_SIM_LIBRARY, drv + "/libnvidia-ml.so.1");
    for (const char* lib : {"libyaml-cpp.so.0.7", "libstdc++.so.6", "libgcc_s.so.1"})
        fs::copy_file(fs::canonical(std::string("/lib/x86_64-linux-gnu/") + lib), drv + "/" + lib);
    fs::copy_file(fs::path(KGPU_SOURCE_DIR) / "sim/nodes/dgx-h100.yaml", root + "/node.yaml");
    auto info = chroot("/usr/local/kgpu/kgpu info --nvml-library /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
                       {{"KGPU_SIM_NODE", "/node.yaml"}});
    EXPECT_EQ(info.exit_code, 0) << info.out << info.err;
    EXPECT_THAT(info.out, HasSubstr("GPU 7: NVIDIA H100 80GB HBM3"));

    // A second install changes nothing; an install dir too long for the reserved room is refused.
    auto again = run_process({KGPU_BINARY, "runtime", "install", "--host-root", root, "--restart-mode", "none"});
    EXPECT_THAT(again.out, HasSubstr("unchanged: /usr/local/kgpu/lib/"));
    EXPECT_THAT(again.out, HasSubstr("unchanged: /usr/local/kgpu/kgpu"));
    auto too_long = run_process({KGPU_BINARY, "runtime", "install", "--host-root", root, "--restart-mode", "none",
                                 "--install-dir", "/" + std::string(240, 'd')});
    EXPECT_EQ(too_long.exit_code, 2);
    EXPECT_THAT(too_long.err, HasSubstr("does not fit the 255 bytes the build reserved"));
    EXPECT_THAT(too_long.err, HasSubstr("choose a shorter --install-dir"));
    EXPECT_THAT(too_long.err, HasSubstr("an --install-dir of at most 217 characters fits"));
}

// Issue #22 item 2: `--runtime-config FILE` writes FILE and records it next to the installed
// binary; the installed runtime, started as containerd starts it (no KGPU_RUNTIME_CONFIG, no
// flag), reads FILE and says so in its log, and without it refuses what FILE would decide.
TEST(RuntimeInstall, TheRuntimeReadsTheConfigFileTheInstallWrote) {
    if (::geteuid() != 0) GTEST_SKIP() << "chroot needs root";
    if (!fs::exists("/usr/bin/unshare")) GTEST_SKIP() << "no unshare (util-linux)";
    Host host;
    auto r = run_process({KGPU_BINARY, "runtime", "install", "--host-root", host.root(), "--restart-mode", "none",
                          "--no-dev-char-links", "--runtime-config", "/etc/custom/runtime.toml"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("wrote /etc/custom/runtime.toml"));
    EXPECT_THAT(r.out, HasSubstr("wrote /usr/local/kgpu/container-runtime-config.path: the runtime reads /etc/custom/runtime.toml"));
    EXPECT_EQ(slurp(host.path("/usr/local/kgpu/container-runtime-config.path")), "/etc/custom/runtime.toml\n");
    EXPECT_FALSE(fs::exists(host.path("/etc/kgpu/container-runtime.toml")));
    fs::create_directories(host.path("/var/log"));  // where the runtime's log-file goes, as on any host
    // The runtime inside the host's root with its /proc (as containerd runs it there); no runc
    // there, so `create` stops after choosing its config, naming it.
    auto create = [&] {
        return run_process({"/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
                            "mkdir -p '" + host.path("/proc") + "' && mount -t proc proc '" + host.path("/proc") +
                                "' && exec /usr/sbin/chroot '" + host.root() +
                                "' /usr/local/kgpu/kgpu-container-runtime --log /runc-log.json create --bundle /bundle c1"});
    };
    auto rt = create();
    EXPECT_EQ(rt.exit_code, 1);
    EXPECT_THAT(rt.err, HasSubstr("no low-level OCI runtime found (low-level-runtime = [runc, crun] in /etc/custom/runtime.toml)"));
    EXPECT_THAT(slurp(host.path("/var/log/kgpu-container-runtime.log")),
                HasSubstr("config /etc/custom/runtime.toml (chosen by /usr/local/kgpu/container-runtime-config.path)"));
    fs::remove(host.path("/etc/custom/runtime.toml"));
    // Gone: the runtime says which file is missing in runc's log (containerd's), and never
    // takes NVIDIA's defaults for it.
    auto gone = create();
    EXPECT_EQ(gone.exit_code, 1);
    const std::string runc_log = slurp(host.path("/runc-log.json"));
    EXPECT_THAT(runc_log, HasSubstr("cannot open /etc/custom/runtime.toml"));
    EXPECT_THAT(runc_log, HasSubstr("a container that asks for GPUs is not started"));
    EXPECT_THAT(runc_log, Not(HasSubstr("NVIDIA's defaults apply")));
    EXPECT_FALSE(fs::exists(host.path("/proc/self")));  // the proc mount went with its namespace
}

// Issue #22 item 6: a host whose config files are absolute links (NixOS: /etc/containerd/config.toml
// -> /etc/static/containerd/config.toml -> /nix/store/...) is edited there, inside --host-root,
// never through the links as the installer's own root would resolve them.
TEST(RuntimeInstall, TheHostsAbsoluteLinksResolveInsideTheHostRoot) {
    TempDir host;
    host.write("nix/store/0abc-containerd-config/config.toml", "version = 2\n");
    fs::create_directories(host.path() + "/etc/static");
    fs::create_symlink("/nix/store/0abc-containerd-config", host.path() + "/etc/static/containerd");
    fs::create_directories(host.path() + "/etc/containerd");
    fs::create_symlink("/etc/static/containerd/config.toml", host.path() + "/etc/containerd/config.toml");
    ASSERT_FALSE(fs::exists("/etc/static/containerd")) << "this machine has the host's link target itself";
    auto r = run_process({KGPU_BINARY, "runtime", "install", "--host-root", host.path(), "--restart-mode", "none",
                          "--no-verify", "--no-dev-char-links"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_THAT(slurp(host.path() + "/nix/store/0abc-containerd-config/config.toml"),
                HasSubstr("BinaryName = \"/usr/local/kgpu/kgpu-container-runtime\""));
    EXPECT_EQ(fs::read_symlink(host.path() + "/etc/containerd/config.toml"), "/etc/static/containerd/config.toml");
    EXPECT_TRUE(fs::exists(host.path() + "/usr/local/kgpu/kgpu"));
}

TEST(RuntimeConfigure, KgpuRuntimeFlag) {
    TempDir dir;
    const std::string cfg = dir.write("config.toml", "version = 2\n");
    auto r = run_process({KGPU_BINARY, "runtime", "configure", "--config", cfg, "--kgpu-runtime", "--dry-run"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("/usr/local/kgpu/kgpu-container-runtime"));
    auto d = run_process({KGPU_BINARY, "runtime", "configure", "--config", cfg, "--dry-run"});
    EXPECT_THAT(d.out, Not(HasSubstr("kgpu-container-runtime")));  // the default stays NVIDIA's
}

}  // namespace
