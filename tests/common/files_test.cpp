// files::write_atomic and files::create_directories (src/common/files.h): symlinks written
// through, owner and mode kept, modes independent of the umask, leftovers of killed writers
// cleaned (issue #14 items 7 and 8).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/files.h"
#include "support/process.h"
#include "support/files.h"

namespace fs = std::filesystem;
using kgpu::Code;
using kgpu::test::TempDir;
using ::testing::HasSubstr;

namespace {

using kgpu::test::slurp;

unsigned mode_of(const fs::path& p) {
    struct stat st {};
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
}

// The temporary files write_atomic would name for `name` in `dir`.
std::vector<std::string> temporaries(const fs::path& dir, const std::string& name) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().filename().string().starts_with("." + name + ".tmp-")) out.push_back(e.path().filename().string());
    return out;
}

// Sets the umask for one test and puts the old one back.
struct Umask {
    explicit Umask(mode_t m) : old(::umask(m)) {}
    ~Umask() { ::umask(old); }
    mode_t old;
};

TEST(FilesWriteAtomic, NewFilesGetTheirModeWhateverTheUmask) {
    TempDir dir;
    for (mode_t mask : {mode_t{0}, mode_t{077}, mode_t{022}}) {
        Umask u(mask);
        const fs::path p = fs::path(dir.path()) / ("f" + std::to_string(mask));
        ASSERT_TRUE(kgpu::files::write_atomic(p, "x", 0644));
        EXPECT_EQ(mode_of(p), 0644u) << "umask " << mask;
        const fs::path q = fs::path(dir.path()) / ("g" + std::to_string(mask));
        ASSERT_TRUE(kgpu::files::write_atomic(q, "x", 0600));
        EXPECT_EQ(mode_of(q), 0600u) << "umask " << mask;
    }
}

TEST(FilesWriteAtomic, ExistingFilesKeepTheirModeAndOwner) {
    TempDir dir;
    const fs::path p = dir.write("config.toml", "old");
    fs::permissions(p, fs::perms(0640));
    ASSERT_TRUE(kgpu::files::write_atomic(p, "new", 0644));
    EXPECT_EQ(slurp(p), "new");
    EXPECT_EQ(mode_of(p), 0640u);
    if (::geteuid() != 0) GTEST_SKIP() << "keeping another user's ownership needs root";
    ASSERT_EQ(::chown(p.c_str(), 4321, 4322), 0);
    ASSERT_TRUE(kgpu::files::write_atomic(p, "newer", 0644));
    struct stat st {};
    ASSERT_EQ(::stat(p.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 4321u);
    EXPECT_EQ(st.st_gid, 4322u);
    EXPECT_EQ(st.st_mode & 07777, 0640u);
    EXPECT_EQ(slurp(p), "newer");
}

TEST(FilesWriteAtomic, WritesThroughSymlinksAndKeepsThem) {
    TempDir dir;
    const fs::path real_dir = fs::path(dir.path()) / "real";
    const fs::path link_dir = fs::path(dir.path()) / "links";
    fs::create_directories(real_dir);
    fs::create_directories(link_dir);
    const fs::path target = real_dir / "config.toml";
    std::ofstream(target) << "old";
    fs::permissions(target, fs::perms(0600));
    // link -> ../real/config.toml (relative), link2 -> link (a chain), abs -> absolute target.
    const fs::path link = link_dir / "config.toml";
    fs::create_symlink("../real/config.toml", link);
    fs::create_symlink("config.toml", link_dir / "link2");
    fs::create_symlink(target, link_dir / "abs");
    for (const fs::path& via : {link, link_dir / "link2", link_dir / "abs"}) {
        const std::string content = "new via " + via.filename().string();
        auto st = kgpu::files::write_atomic(via, content, 0644);
        ASSERT_TRUE(st) << st.error().message;
        EXPECT_TRUE(fs::is_symlink(via)) << via << " was replaced by a regular file";
        EXPECT_EQ(slurp(target), content);
        EXPECT_EQ(mode_of(target), 0600u);
        EXPECT_TRUE(temporaries(real_dir, "config.toml").empty());
        EXPECT_TRUE(temporaries(link_dir, "config.toml").empty());
    }
    EXPECT_EQ(fs::read_symlink(link), "../real/config.toml");
    auto t = kgpu::files::write_target(link_dir / "link2");
    ASSERT_TRUE(t);
    EXPECT_EQ(*t, target);
}

TEST(FilesWriteAtomic, DanglingLinksLoopsAndDirectoriesAreErrors) {
    TempDir dir;
    const fs::path d(dir.path());
    fs::create_symlink("missing/config.toml", d / "dangling");
    auto st = kgpu::files::write_atomic(d / "dangling", "x");
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().code, Code::not_found);
    EXPECT_THAT(st.error().message, HasSubstr((d / "dangling").string() + " is a symlink to " + (d / "missing/config.toml").string() +
                                              ", which does not exist"));
    EXPECT_TRUE(fs::is_symlink(d / "dangling"));
    EXPECT_FALSE(fs::exists(d / "missing"));

    fs::create_symlink("loop-b", d / "loop-a");
    fs::create_symlink("loop-a", d / "loop-b");
    st = kgpu::files::write_atomic(d / "loop-a", "x");
    ASSERT_FALSE(st);
    EXPECT_THAT(st.error().message, HasSubstr("too many levels of symbolic links"));

    fs::create_directories(d / "adir");
    st = kgpu::files::write_atomic(d / "adir", "x");
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().code, Code::invalid_argument);
    fs::create_symlink("adir", d / "to-dir");
    st = kgpu::files::write_atomic(d / "to-dir", "x");
    ASSERT_FALSE(st);
    EXPECT_THAT(st.error().message, HasSubstr("which is not a regular file"));
}

TEST(FilesWriteAtomic, LeftoversOfAKilledWriterAreCleanedNextTime) {
    TempDir dir;
    const fs::path p = dir.write("spec.yaml", "old content\n");
    // A writer killed in the middle of its write: the file-size limit stops it with SIGXFSZ while
    // the temporary file is half written (as kill -9 would, but at a known point).
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        rlimit lim{64 * 1024, 64 * 1024};
        ::setrlimit(RLIMIT_FSIZE, &lim);
        (void)kgpu::files::write_atomic(p, std::string(1024 * 1024, 'x'), 0644);
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << status;
    EXPECT_EQ(WTERMSIG(status), SIGXFSZ);
    EXPECT_EQ(slurp(p), "old content\n");  // the file itself never changed
    ASSERT_EQ(temporaries(dir.path(), "spec.yaml").size(), 1u);

    // Another writer that is still alive holds the lock on its temporary file: it stays. Files
    // that only look alike (another name, another length) are not ours to remove.
    const fs::path live = fs::path(dir.path()) / ".spec.yaml.tmp-LIVE01";
    std::ofstream(live) << "in progress";
    int live_fd = ::open(live.c_str(), O_RDONLY);
    ASSERT_EQ(::flock(live_fd, LOCK_EX), 0);
    const fs::path other = dir.write(".other.yaml.tmp-ABCDEF", "x");
    const fs::path longer = dir.write(".spec.yaml.tmp-ABCDEFG", "x");

    ASSERT_TRUE(kgpu::files::write_atomic(p, "new content\n", 0644));
    EXPECT_EQ(slurp(p), "new content\n");
    EXPECT_THAT(temporaries(dir.path(), "spec.yaml"), ::testing::UnorderedElementsAre(".spec.yaml.tmp-LIVE01", ".spec.yaml.tmp-ABCDEFG"));
    EXPECT_TRUE(fs::exists(other));
    ::close(live_fd);  // its writer is gone now
    ASSERT_TRUE(kgpu::files::write_atomic(p, "newer\n", 0644));
    EXPECT_THAT(temporaries(dir.path(), "spec.yaml"), ::testing::ElementsAre(".spec.yaml.tmp-ABCDEFG"));
    EXPECT_FALSE(fs::exists(live));
}

TEST(FilesCreateDirectories, ExactModesWhateverTheUmaskAndExistingOnesLeftAlone) {
    Umask u(0);
    TempDir dir;
    const fs::path base(dir.path());
    fs::create_directories(base / "existing");
    fs::permissions(base / "existing", fs::perms(0700));
    ASSERT_TRUE(kgpu::files::create_directories(base / "existing/a/b/c", 0755));
    EXPECT_EQ(mode_of(base / "existing"), 0700u);
    EXPECT_EQ(mode_of(base / "existing/a"), 0755u);
    EXPECT_EQ(mode_of(base / "existing/a/b"), 0755u);
    EXPECT_EQ(mode_of(base / "existing/a/b/c"), 0755u);
    ASSERT_TRUE(kgpu::files::create_directories(base / "existing/a/b/c", 0700));  // exists: unchanged
    EXPECT_EQ(mode_of(base / "existing/a/b/c"), 0755u);
    std::ofstream(base / "file") << "x";
    auto st = kgpu::files::create_directories(base / "file/sub", 0755);
    ASSERT_FALSE(st);
    EXPECT_THAT(st.error().message, HasSubstr("is not a directory"));
}

// A config named on the command line may be a FIFO (or a directory, a socket): reading it must
// not wait for a writer forever (issue #22: `runtime configure --config` on a FIFO hung).
TEST(FilesReadRegular, RefusesAFifoWithoutWaitingAndReadsFilesAndLinks) {
    TempDir dir;
    const std::string fifo = dir.path() + "/config.toml";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    auto r = kgpu::files::read_regular(fifo);  // returns at once: no writer is needed to refuse
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Code::invalid_argument);
    EXPECT_THAT(r.error().message, HasSubstr(fifo + " is a FIFO (named pipe), expected a regular file"));
    auto d = kgpu::files::read_regular(dir.path());
    ASSERT_FALSE(d);
    EXPECT_THAT(d.error().message, HasSubstr("is a directory, expected a regular file"));
    EXPECT_EQ(kgpu::files::read_regular(dir.path() + "/absent").error().code, Code::not_found);
    const std::string file = dir.write("real.toml", "x = 1\n");
    fs::create_symlink(file, dir.path() + "/link.toml");
    EXPECT_EQ(*kgpu::files::read_regular(dir.path() + "/link.toml"), "x = 1\n");
    auto to_fifo = dir.path() + "/to-fifo";
    fs::create_symlink(fifo, to_fifo);
    EXPECT_FALSE(kgpu::files::read_regular(to_fifo));
}

// `runtime install --host-root H`: the host's absolute links lead into H, never to the
// installer's own files (NixOS: /etc/containerd/config.toml -> /etc/static/... -> /nix/store/...).
TEST(FilesResolveInRoot, AbsoluteLinksStayInsideTheRoot) {
    TempDir host;
    host.write("nix/store/abc-containerd/config.toml", "version = 2\n");
    fs::create_directories(host.path() + "/etc/static");
    fs::create_symlink("/nix/store/abc-containerd", host.path() + "/etc/static/containerd");
    fs::create_directories(host.path() + "/etc/containerd");
    fs::create_symlink("/etc/static/containerd/config.toml", host.path() + "/etc/containerd/config.toml");
    auto r = kgpu::files::resolve_in_root(host.path(), "/etc/containerd/config.toml");
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(*r, fs::path(host.path() + "/nix/store/abc-containerd/config.toml"));
    // A directory link on the way, relative links, ".." that would climb above the root.
    fs::create_directories(host.path() + "/var/usrlocal");
    fs::create_directories(host.path() + "/usr");
    fs::create_symlink("../var/usrlocal", host.path() + "/usr/local");
    EXPECT_EQ(*kgpu::files::resolve_in_root(host.path(), "/usr/local/kgpu/kgpu"),
              fs::path(host.path() + "/var/usrlocal/kgpu/kgpu"));  // the missing rest as it is
    fs::create_symlink("../../../../../../../etc/static", host.path() + "/up");
    EXPECT_EQ(*kgpu::files::resolve_in_root(host.path(), "/up/containerd"), fs::path(host.path() + "/nix/store/abc-containerd"));
    EXPECT_EQ(*kgpu::files::resolve_in_root(host.path(), "/../../etc/static"), fs::path(host.path() + "/etc/static"));
    // The root "/" is the kernel's business; loops and relative paths are errors.
    EXPECT_EQ(*kgpu::files::resolve_in_root("/", "/etc/containerd/config.toml"), fs::path("/etc/containerd/config.toml"));
    fs::create_symlink("/loop", host.path() + "/loop");
    auto loop = kgpu::files::resolve_in_root(host.path(), "/loop/x");
    ASSERT_FALSE(loop);
    EXPECT_THAT(loop.error().message, HasSubstr("too many levels of symbolic links"));
    EXPECT_FALSE(kgpu::files::resolve_in_root(host.path(), "etc/x"));
}

TEST(Files, EntriesListADirectoryOrSayWhyNot) {
    TempDir d;
    d.write("a", "1");
    d.write("b/c", "2");
    auto listed = kgpu::files::entries(d.path());
    ASSERT_TRUE(listed) << listed.error().message;
    std::vector<std::string> names;
    for (const auto& e : *listed) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"a", "b"}));
    auto none = kgpu::files::entries(d.path() + "/none");
    ASSERT_FALSE(none);
    EXPECT_EQ(none.error().code, Code::not_found);
    EXPECT_THAT(none.error().message, HasSubstr(d.path() + "/none"));
    auto file = kgpu::files::entries(d.path() + "/a");
    ASSERT_FALSE(file) << "a file is no directory";
    EXPECT_EQ(file.error().code, Code::not_found);
}

}  // namespace
