// The createContainer hooks (toolkit/hooks.h) on container roots laid out in temp dirs. The ones
// that mount, chroot or make device nodes need root and skip without it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>

#include "support/canary.h"
#include "support/process.h"
#include "toolkit/hooks.h"
#include "toolkit/root.h"
#include "support/files.h"

using namespace kgpu;
using namespace kgpu::toolkit;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

namespace {

using kgpu::test::slurp;

bool is_root() { return ::geteuid() == 0; }

// A bundle with config.json naming rootfs/ (relative, as containerd writes it).
struct Bundle {
    test::TempDir dir;
    Bundle() {
        dir.write("config.json", R"({"ociVersion":"1.0.2","root":{"path":"rootfs"}})");
        fs::create_directories(root());
    }
    std::string root() const { return dir.path() + "/rootfs"; }
    std::string state() const { return R"({"ociVersion":"1.0.2","id":"c1","status":"creating","pid":1,"bundle":")" + dir.path() + "\"}"; }
};

TEST(HookState, RootFromBundle) {
    Bundle b;
    auto r = container_root_from_state(b.state());
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(*r, b.root());
    b.dir.write("config.json", R"({"root":{"path":"/abs/root"}})");
    EXPECT_EQ(*container_root_from_state(b.state()), "/abs/root");
    EXPECT_THAT(container_root_from_state("{").error().message, HasSubstr("not JSON"));
    EXPECT_THAT(container_root_from_state("{}").error().message, HasSubstr("bundle"));
    EXPECT_FALSE(container_root_from_state(R"({"bundle":"/nonexistent/bundle"})"));
}

TEST(CreateSymlinks, CreatesReplacesAndStaysInsideTheRoot) {
    Bundle b;
    test::TempDir outside;
    // The image's /usr/lib64 is a symlink to an absolute host-looking path: it must resolve inside.
    fs::create_directories(b.root() + "/usr");
    fs::create_symlink(outside.path(), b.root() + "/usr/lib64");
    auto st = create_symlinks(b.root(), {"libcuda.so.1::/usr/lib64/libcuda.so", "libcuda.so.1::/usr/lib64/libcuda.so"});
    ASSERT_TRUE(st) << st.error().message;
    EXPECT_TRUE(fs::is_empty(outside.path()));  // nothing written outside the root
    EXPECT_EQ(fs::read_symlink(b.root() + outside.path() + "/libcuda.so"), "libcuda.so.1");
    ASSERT_TRUE(create_symlinks(b.root(), {"libcuda.so.2::/usr/lib64/libcuda.so"}));
    EXPECT_EQ(fs::read_symlink(b.root() + outside.path() + "/libcuda.so"), "libcuda.so.2");
    ASSERT_TRUE(create_symlinks(b.root(), {"/usr/bin/kgpu::/a/new/dir/link"}));
    EXPECT_EQ(fs::read_symlink(b.root() + "/a/new/dir/link"), "/usr/bin/kgpu");
    auto bad = create_symlinks(b.root(), {"no-separator"});
    ASSERT_FALSE(bad);
    EXPECT_THAT(bad.error().message, HasSubstr("<target>::<link>"));
    EXPECT_FALSE(create_symlinks("/", {"a::b"}));  // never the host's root
}

// Issue #22 item 4: the guard compares the directory, not the string "/".
TEST(RootDir, NeverTheHostsRootHoweverSpelled) {
    test::TempDir outside;
    for (const std::string spelling : {"/", "//", "/.", "/./", "/tmp/..", "/usr/../"}) {
        SCOPED_TRACE(spelling);
        auto r = RootDir::open(spelling);
        ASSERT_FALSE(r);
        EXPECT_EQ(r.error().code, Code::invalid_argument);
        EXPECT_THAT(r.error().message, HasSubstr("host's root"));
        // create-symlinks would otherwise write <outside>/pwned on the host.
        EXPECT_FALSE(create_symlinks(spelling, {"pwned::" + outside.path() + "/pwned"}));
        // update-ldcache refuses before it looks for ldconfig (which would then run on the host).
        auto ld = update_ldcache(spelling, {{}, "/nonexistent/ldconfig"});
        ASSERT_FALSE(ld);
        EXPECT_THAT(ld.error().message, HasSubstr("host's root"));
    }
    EXPECT_TRUE(fs::is_empty(outside.path()));
    EXPECT_TRUE(RootDir::open(outside.path()));  // any other directory is fine
}

TEST(DeviceNodeModification, ParamsRewrite) {
    EXPECT_EQ(params_without_device_modification("ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n"),
              "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 0\nDeviceFileUID: 0\n");
    EXPECT_FALSE(params_without_device_modification("ModifyDeviceFiles: 0\n"));
    EXPECT_FALSE(params_without_device_modification("DeviceFileUID: 0\n"));
}

TEST(CudaCompat, Decision) {
    // No ELF note: the compat library's driver major must be newer than the host's.
    EXPECT_TRUE(use_cuda_compat("libcuda.so.570.86.10", std::nullopt, "535.183.01", ""));
    EXPECT_FALSE(use_cuda_compat("libcuda.so.570.86.10", std::nullopt, "570.26", ""));
    EXPECT_FALSE(use_cuda_compat("libcuda.so.570.86.10", std::nullopt, "575.51.03", ""));
    EXPECT_FALSE(use_cuda_compat("libcuda.so.570.86.10", std::nullopt, "535.183.01", "12.2"));
    // With the note: only on the driver branches it names, and only when newer.
    const std::string note = R"({"Format":1,"CUDA Version":"12.8","Driver":[535,550],"Device":[]})";
    EXPECT_TRUE(use_cuda_compat("libcuda.so.570.86.10", note, "550.54.15", ""));
    EXPECT_FALSE(use_cuda_compat("libcuda.so.570.86.10", note, "560.35.03", ""));
    EXPECT_TRUE(use_cuda_compat("libcuda.so.570.86.10", note, "", "12.4"));
    EXPECT_FALSE(use_cuda_compat("libcuda.so.570.86.10", note, "", "12.8"));
}

// A minimal ELF64 with one SHT_NOTE section named .note.cuda.fwd_compatibility.
std::string elf_with_note(const std::string& desc) {
    auto put = [](std::string& s, size_t off, auto v) { std::memcpy(s.data() + off, &v, sizeof v); };
    const std::string names = std::string("\0.shstrtab\0.note.cuda.fwd_compatibility\0", 41);
    std::string note(12, '\0');
    const std::string owner = std::string("NVIDIA Corporation\0", 19);
    put(note, 0, std::uint32_t(owner.size()));
    put(note, 4, std::uint32_t(desc.size()));
    note += owner + std::string((4 - owner.size() % 4) % 4, '\0') + desc;
    std::string elf(64, '\0');
    elf.replace(0, 6, std::string("\x7f" "ELF\x02\x01", 6));
    const size_t names_at = elf.size();
    elf += names;
    const size_t note_at = elf.size();
    elf += note;
    const size_t sh_at = elf.size();
    elf += std::string(64 * 3, '\0');
    put(elf, 0x28, std::uint64_t(sh_at));
    put(elf, 0x3A, std::uint16_t(64));
    put(elf, 0x3C, std::uint16_t(3));
    put(elf, 0x3E, std::uint16_t(1));
    auto section = [&](unsigned i, std::uint32_t name, std::uint32_t type, std::uint64_t off, std::uint64_t size, std::uint64_t align) {
        size_t b = sh_at + 64 * i;
        put(elf, b, name);
        put(elf, b + 4, type);
        put(elf, b + 24, off);
        put(elf, b + 32, size);
        put(elf, b + 48, align);
    };
    section(1, 1, 3 /* SHT_STRTAB */, names_at, names.size(), 1);
    section(2, 11, 7 /* SHT_NOTE */, note_at, note.size(), 4);
    return elf;
}

TEST(CudaCompat, ReadsTheElfNote) {
    const std::string desc = R"({"CUDA Version":"12.8","Driver":[550]})";
    EXPECT_EQ(cuda_compat_note(elf_with_note(desc)), desc);
    EXPECT_FALSE(cuda_compat_note("not an elf at all, but long enough to have a header of sixty-four bytes......"));
    EXPECT_FALSE(cuda_compat_note(elf_with_note(desc).substr(0, 100)));  // truncated: no crash, no note
}

TEST(CudaCompat, WritesTheLinkerDropInWhenNeeded) {
    Bundle b;
    test::TempDir host;
    fs::create_directories(b.root() + "/usr/local/cuda/compat");
    std::ofstream(b.root() + "/usr/local/cuda/compat/libcuda.so.570.86.10") << elf_with_note(R"({"Driver":[550]})");
    ASSERT_TRUE(enable_cuda_compat(b.root(), {"575.51.03", "", "/usr/local/cuda/compat"}));  // host newer
    EXPECT_FALSE(fs::exists(b.root() + "/etc/ld.so.conf.d"));
    auto used = enable_cuda_compat(b.root(), {"550.54.15", "", "/usr/local/cuda/compat"});
    ASSERT_TRUE(used) << used.error().message;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(b.root() + "/etc/ld.so.conf.d")) files.push_back(e.path());
    ASSERT_EQ(files.size(), 1u);
    EXPECT_TRUE(files[0].filename().string().starts_with("00-compat-"));
    EXPECT_EQ(slurp(files[0]), "/usr/local/cuda/compat\n");
    EXPECT_TRUE(enable_cuda_compat(b.root(), {"550.54.15", "", "/no/such/dir"}));  // no compat libs: nothing to do
}

TEST(ApplicationProfile, MasksTheContainersGpus) {
    if (!is_root()) GTEST_SKIP() << "mknod needs root";
    Bundle b;
    fs::create_directories(b.root() + "/dev");
    ASSERT_EQ(::mknod((b.root() + "/dev/nvidia3").c_str(), S_IFCHR | 0666, makedev(195, 3)), 0);
    ASSERT_EQ(::mknod((b.root() + "/dev/nvidia7").c_str(), S_IFCHR | 0666, makedev(195, 7)), 0);
    ASSERT_EQ(::mknod((b.root() + "/dev/nvidiactl").c_str(), S_IFCHR | 0666, makedev(195, 255)), 0);
    auto st = update_application_profile(b.root());
    ASSERT_TRUE(st) << st.error().message;
    EXPECT_EQ(slurp(b.root() + "/etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf"),
              R"({"profiles":[{"name":"_container_","settings":["EGLVisibleDGPUDevices",0x88]}],"rules":[{"pattern":[],"profile":"_container_"}]})");
}

// Issue #22 item 6a: an existing 10-container.conf is replaced, never written through: a hard
// link there (to any file on the same file system) or a symlink keeps its target untouched.
TEST(ApplicationProfile, ReplacesAHardLinkOrSymlinkInsteadOfWritingThroughIt) {
    if (!is_root()) GTEST_SKIP() << "mknod needs root";
    for (bool hard : {true, false}) {
        SCOPED_TRACE(hard ? "hard link" : "symlink");
        Bundle b;
        test::TempDir outside;
        const std::string victim = outside.write("victim", "the host's file\n");
        ASSERT_EQ(::chmod(victim.c_str(), 0600), 0);
        const std::string before = test::tree_snapshot(outside.path());
        fs::create_directories(b.root() + "/dev");
        ASSERT_EQ(::mknod((b.root() + "/dev/nvidia1").c_str(), S_IFCHR | 0666, makedev(195, 1)), 0);
        const std::string conf = b.root() + "/etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf";
        fs::create_directories(fs::path(conf).parent_path());
        if (hard)
            fs::create_hard_link(victim, conf);
        else
            fs::create_symlink(victim, conf);
        auto st = update_application_profile(b.root());
        ASSERT_TRUE(st) << st.error().message;
        EXPECT_EQ(test::tree_snapshot(outside.path()), before);
        EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(conf)));
        EXPECT_THAT(slurp(conf), HasSubstr("\"EGLVisibleDGPUDevices\",0x2]"));
        EXPECT_EQ(fs::status(conf).permissions(), fs::perms(0444));
        // Only the file itself in the directory: no temporary left behind.
        EXPECT_EQ(std::distance(fs::directory_iterator(fs::path(conf).parent_path()), fs::directory_iterator()), 1);
    }
}

TEST(Chmod, SetsModesInsideTheRoot) {
    Bundle b;
    fs::create_directories(b.root() + "/dev/dri");
    ASSERT_TRUE(chmod_paths(b.root(), {"/dev/dri", "/missing"}, 0755));
    EXPECT_EQ(fs::status(b.root() + "/dev/dri").permissions(), fs::perms(0755));
}

TEST(UpdateLdcache, TheContainersCacheFindsTheMountedLibrary) {
    if (!is_root()) GTEST_SKIP() << "unshare and chroot need root";
    Bundle b;
    fs::create_directories(b.root() + "/opt/nvidia/lib");
    // A real shared object whose SONAME is libnvidia-ml.so.1: the simulator.
    fs::copy_file(KGPU_SIM_LIBRARY, b.root() + "/opt/nvidia/lib/libnvidia-ml.so.550.54.15");
    auto st = update_ldcache(b.root(), {{"/opt/nvidia/lib"}, "/sbin/ldconfig"});
    ASSERT_TRUE(st) << st.error().message;
    EXPECT_EQ(fs::read_symlink(b.root() + "/opt/nvidia/lib/libnvidia-ml.so.1"), "libnvidia-ml.so.550.54.15");
    auto cache = test::run_process({"/sbin/ldconfig", "-p", "-C", b.root() + "/etc/ld.so.cache"});
    EXPECT_THAT(cache.out, HasSubstr("libnvidia-ml.so.1 (libc6,x86-64) => /opt/nvidia/lib/libnvidia-ml.so.1"));
    bool dropin = false;
    for (const auto& e : fs::directory_iterator(b.root() + "/etc/ld.so.conf.d"))
        if (e.path().filename().string().starts_with("00-kgpu-")) dropin = slurp(e.path()) == "/opt/nvidia/lib\n";
    EXPECT_TRUE(dropin);
    EXPECT_EQ(slurp(b.root() + "/etc/ld.so.conf"), "include /etc/ld.so.conf.d/*.conf\n");
    EXPECT_FALSE(update_ldcache(b.root(), {{}, "/nonexistent/ldconfig"}));
}

// Issue #22 item 1 (the class of CVE-2025-23267): runc runs createContainer hooks with the
// container's procfs mounted at <root>/proc, where /proc/1 is runc's init, whose root is still
// the host's "/". Here the procfs mounted at <root>/proc is the test's, and the process standing
// for runc's init is the child that runs the hook (its /proc/<pid>/root is the host's "/"; the
// machine's pid 1 may be out of reach). An image that routes /etc, an ld.so.conf.d entry, a
// library folder or a system folder through it, or names an inherited descriptor, must not get
// the hook or ldconfig to create anything on the host. The canary holds a real shared object,
// so an ldconfig that scanned it would leave its SONAME link there.
TEST(UpdateLdcache, NeverWritesOutsideTheRootThroughProc) {
    if (!is_root()) GTEST_SKIP() << "namespaces, mounts and pivot_root need root";
    test::TempDir canary;
    fs::create_directories(canary.path() + "/lib");
    fs::copy_file(KGPU_SIM_LIBRARY, canary.path() + "/lib/libnvidia-ml.so.550.54.15");
    canary.write("etc/keep", "host\n");
    const std::string before = test::tree_snapshot(canary.path());
    const std::string from_cwd = fs::path(canary.path()).lexically_relative(fs::current_path()).string();
    struct Case {
        const char* name;
        // Runs in the child, where the container's procfs is mounted; `proc` is "/proc/<pid>" of
        // the process standing for runc's init.
        std::function<void(const Bundle&, const std::string& proc)> image;
        bool starts;  // whether the hook still succeeds (the link resolves inside the root)
    };
    const std::vector<Case> cases = {
        {"/etc is a symlink through /proc/<pid>/root",
         [&](const Bundle& b, const std::string& proc) { fs::create_symlink(proc + "/root" + canary.path() + "/etc", b.root() + "/etc"); },
         false},
        {"an ld.so.conf.d entry through /proc/<pid>/root",
         [&](const Bundle& b, const std::string& proc) {
             b.dir.write("rootfs/etc/ld.so.conf.d/evil.conf", proc + "/root" + canary.path() + "/lib\n");
         },
         true},
        {"an ld.so.conf.d entry through /proc/<pid>/cwd",
         [&](const Bundle& b, const std::string& proc) {
             b.dir.write("rootfs/etc/ld.so.conf.d/evil.conf", proc + "/cwd/" + from_cwd + "/lib\n");
         },
         true},
        {"a library folder that is a symlink through /proc",
         [&](const Bundle& b, const std::string& proc) {
             b.dir.write("rootfs/etc/ld.so.conf.d/evil.conf", "/opt/evil\n");
             fs::create_symlink(proc + "/root" + canary.path() + "/lib", b.root() + "/opt/evil");
         },
         true},
        {"a system folder that is a symlink through /proc",
         [&](const Bundle& b, const std::string& proc) {
             fs::create_symlink(proc + "/root" + canary.path() + "/lib", b.root() + "/usr/lib64");
         },
         true},
        {"an inherited descriptor named in ld.so.conf.d",
         [&](const Bundle& b, const std::string&) {
             int fd = ::open((canary.path() + "/lib").c_str(), O_RDONLY | O_DIRECTORY);  // not close-on-exec
             b.dir.write("rootfs/etc/ld.so.conf.d/evil.conf", "/proc/self/fd/" + std::to_string(fd) + "\n");
         },
         true},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        Bundle b;
        fs::create_directories(b.root() + "/opt/nvidia/lib");
        fs::create_directories(b.root() + "/usr");
        fs::copy_file(KGPU_SIM_LIBRARY, b.root() + "/opt/nvidia/lib/libnvidia-ml.so.550.54.15");
        test::TempDir out;
        pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            // What runc has done when it runs the hook: the container's procfs at <root>/proc
            // (in a mount namespace of this child only, so nothing stays mounted).
            if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(10);
            fs::create_directories(b.root() + "/proc");
            if (::mount("proc", (b.root() + "/proc").c_str(), "proc", 0, nullptr) != 0) ::_exit(11);
            c.image(b, "/proc/" + std::to_string(::getpid()));
            auto st = update_ldcache(b.root(), {{"/opt/nvidia/lib"}, "/sbin/ldconfig"});
            std::ofstream(out.path() + "/error") << (st ? "" : st.error().message);
            ::_exit(st ? 0 : 1);
        }
        int status = 0;
        ::waitpid(pid, &status, 0);
        ASSERT_TRUE(WIFEXITED(status));
        ASSERT_LT(WEXITSTATUS(status), 10);
        EXPECT_EQ(test::tree_snapshot(canary.path()), before);
        if (c.starts) {
            EXPECT_EQ(WEXITSTATUS(status), 0) << slurp(out.path() + "/error");
            EXPECT_EQ(fs::read_symlink(b.root() + "/opt/nvidia/lib/libnvidia-ml.so.1"), "libnvidia-ml.so.550.54.15");
        } else {
            EXPECT_NE(WEXITSTATUS(status), 0);
            EXPECT_THAT(slurp(out.path() + "/error"), HasSubstr("ldconfig in " + b.root() + " failed"));
        }
    }
}

// A caller whose "/" is no mount (an initramfs root, or a chroot as here) cannot pivot_root:
// update-ldcache then chroots behind the fresh procfs, which still keeps ldconfig in the root.
TEST(UpdateLdcache, ACallerWithoutARootMountFallsBackToChroot) {
    if (!is_root()) GTEST_SKIP() << "namespaces, mounts and chroot need root";
    // The caller's world: a plain directory with its procfs and the host's (static) ldconfig;
    // the container's root and a canary inside it.
    test::TempDir world;
    fs::create_directories(world.path() + "/proc");
    fs::create_directories(world.path() + "/sbin");
    fs::copy_file("/sbin/ldconfig", world.path() + "/sbin/ldconfig");
    fs::create_directories(world.path() + "/canary/lib");
    fs::copy_file(KGPU_SIM_LIBRARY, world.path() + "/canary/lib/libnvidia-ml.so.550.54.15");
    fs::create_directories(world.path() + "/c/opt/nvidia/lib");
    fs::copy_file(KGPU_SIM_LIBRARY, world.path() + "/c/opt/nvidia/lib/libnvidia-ml.so.550.54.15");
    const std::string before = test::tree_snapshot(world.path() + "/canary");
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(10);
        if (::mount("proc", (world.path() + "/proc").c_str(), "proc", 0, nullptr) != 0) ::_exit(11);
        // The container's root is a mount, as runc makes it (a bind mount onto itself).
        const std::string c = world.path() + "/c";
        if (::mount(c.c_str(), c.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) ::_exit(14);
        // The container's procfs as runc mounts it, and an image reaching for the canary through it.
        fs::create_directories(world.path() + "/c/proc");
        fs::create_directories(world.path() + "/c/etc");
        if (::mount("proc", (world.path() + "/c/proc").c_str(), "proc", 0, nullptr) != 0) ::_exit(12);
        std::ofstream(world.path() + "/c/etc/ld.so.conf") << "include /etc/ld.so.conf.d/*.conf\n/proc/" << ::getpid() << "/root/canary/lib\n";
        if (::chroot(world.path().c_str()) != 0 || ::chdir("/") != 0) ::_exit(13);
        auto st = update_ldcache("/c", {{"/opt/nvidia/lib"}, "/sbin/ldconfig"});
        if (!st) std::fprintf(stderr, "%s\n", st.error().message.c_str());
        ::_exit(st ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
    EXPECT_EQ(fs::read_symlink(world.path() + "/c/opt/nvidia/lib/libnvidia-ml.so.1"), "libnvidia-ml.so.550.54.15");
    EXPECT_EQ(test::tree_snapshot(world.path() + "/canary"), before);
}

// update_ldcache in a child process (so that a hang or a changed signal disposition stays
// there): its exit status, 0 for success, 1 for an error (printed), 2 for a hang.
int ldcache_in_child(const std::string& root, const std::string& ldconfig, bool ignore_sigchld = false) {
    pid_t pid = ::fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        ::alarm(20);  // a hang ends as SIGALRM
        if (ignore_sigchld) ::signal(SIGCHLD, SIG_IGN);
        auto st = update_ldcache(root, {{"/opt/nvidia/lib"}, ldconfig});
        if (!st) std::fprintf(stderr, "%s\n", st.error().message.c_str());
        ::_exit(st ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) return 2;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A caller that ignores SIGCHLD (a disposition exec keeps) has its children reaped by the
// kernel: waitpid then fails with ECHILD, and the lost status was taken for success. busybox
// (static) run as "ldconfig" fails: no such applet.
TEST(UpdateLdcache, AStatusLostToAnIgnoredSigchldIsAFailure) {
    if (!is_root()) GTEST_SKIP() << "namespaces need root";
    if (!fs::exists("/bin/busybox")) GTEST_SKIP() << "no /bin/busybox (scripts/setup --all installs busybox-static)";
    Bundle b;
    EXPECT_EQ(ldcache_in_child(b.root(), "/bin/busybox"), 1);
    EXPECT_EQ(ldcache_in_child(b.root(), "/bin/busybox", true), 1);
}

// ldconfig runs in the container's root: a dynamically linked one would load the image's
// loader (its PT_INTERP path inside the root) as root.
TEST(UpdateLdcache, ADynamicallyLinkedLdconfigIsRefused) {
    Bundle b;
    auto st = update_ldcache(b.root(), {{"/opt/nvidia/lib"}, "/bin/true"});
    ASSERT_FALSE(st);
    EXPECT_THAT(st.error().message, HasSubstr("/bin/true is dynamically linked"));
}

// musl's search path file is appended to only when it is a regular file of one link: a FIFO
// there hung the hook in open(), a hard link was written through.
TEST(UpdateLdcache, MuslPathFileThatIsAFifoOrAHardLink) {
    if (!is_root()) GTEST_SKIP() << "namespaces need root";
    Bundle b;
    b.dir.write("rootfs/etc/alpine-release", "3.20.0\n");
    fs::create_directories(b.root() + "/opt/nvidia/lib");
    const std::string path_file = b.root() + "/etc/ld-musl-x86_64.path";
    ASSERT_EQ(::mkfifo(path_file.c_str(), 0644), 0);
    // 2 before: open() waited for a reader. Now it fails at once (ENXIO) and the file is left
    // as the image made it.
    EXPECT_EQ(ldcache_in_child(b.root(), "/sbin/ldconfig"), 0);
    fs::remove(path_file);
    b.dir.write("rootfs/etc/other", "keep\n");
    fs::create_hard_link(b.root() + "/etc/other", path_file);
    EXPECT_EQ(ldcache_in_child(b.root(), "/sbin/ldconfig"), 1);
    EXPECT_EQ(slurp(b.root() + "/etc/other"), "keep\n");
    fs::remove(path_file);
    EXPECT_EQ(ldcache_in_child(b.root(), "/sbin/ldconfig"), 0);
    EXPECT_THAT(slurp(path_file), HasSubstr("/usr/lib\n"));  // (the folder was configured by the runs before)
}

// A container started again on the same root (docker restart runs the hooks again): no second
// configuration file, and musl's search path file lists each directory once, the folder too
// (musl reads no ld.so.conf, where the first run had configured it).
TEST(UpdateLdcache, ASecondRunOnTheSameRootAddsNothing) {
    if (!is_root()) GTEST_SKIP() << "namespaces need root";
    auto conf_files = [](const std::string& root) {
        std::vector<std::string> names;
        for (const auto& e : fs::directory_iterator(root + "/etc/ld.so.conf.d")) names.push_back(e.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    };
    Bundle glibc;
    fs::create_directories(glibc.root() + "/opt/nvidia/lib");
    ASSERT_EQ(ldcache_in_child(glibc.root(), "/sbin/ldconfig"), 0);
    const auto first = conf_files(glibc.root());
    ASSERT_EQ(first.size(), 2u);
    EXPECT_TRUE(first[0].starts_with("00-kgpu-")) << first[0];
    EXPECT_EQ(first[1], "zz-kgpu-system.conf");
    ASSERT_EQ(ldcache_in_child(glibc.root(), "/sbin/ldconfig"), 0);
    EXPECT_EQ(conf_files(glibc.root()), first);

    Bundle alpine;
    alpine.dir.write("rootfs/etc/alpine-release", "3.20.0\n");
    alpine.dir.write("rootfs/etc/ld-musl-x86_64.path", "/lib\n/opt/own\n");
    fs::create_directories(alpine.root() + "/opt/nvidia/lib");
    ASSERT_EQ(ldcache_in_child(alpine.root(), "/sbin/ldconfig"), 0);
    ASSERT_EQ(ldcache_in_child(alpine.root(), "/sbin/ldconfig"), 0);
    EXPECT_EQ(slurp(alpine.root() + "/etc/ld-musl-x86_64.path"), "/lib\n/opt/own\n/opt/nvidia/lib\n/usr/lib\n/lib64\n/usr/lib64\n/libx32\n/usr/libx32\n");
}

TEST(DeviceNodeModification, BindMountsTheRewrittenParams) {
    if (!is_root()) GTEST_SKIP() << "mounting needs root";
    Bundle b;
    test::TempDir host;
    const std::string params = host.write("params", "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\n");
    fs::create_directories(b.root() + "/proc/driver/nvidia");
    std::ofstream(b.root() + "/proc/driver/nvidia/params") << "ModifyDeviceFiles: 1\n";
    // In a child with its own mount namespace, so nothing stays mounted.
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(10);
        if (auto st = disable_device_node_modification(b.root(), params); !st) {
            std::fprintf(stderr, "%s\n", st.error().message.c_str());
            ::_exit(11);
        }
        ::_exit(slurp(b.root() + "/proc/driver/nvidia/params") == "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 0\n" ? 0 : 12);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
    EXPECT_EQ(slurp(b.root() + "/proc/driver/nvidia/params"), "ModifyDeviceFiles: 1\n");  // outside: untouched
    EXPECT_TRUE(disable_device_node_modification(b.root(), host.path() + "/absent"));      // no driver: nothing to do
}

}  // namespace
