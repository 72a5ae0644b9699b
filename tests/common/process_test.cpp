// process::run against children that do not behave (one that exits without reading its stdin), in
// a root of their own, and with an environment of only what is given.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>

#include <gmock/gmock.h>

#include "common/process.h"
#include "support/process.h"

namespace {

using namespace kgpu;

// The supervisor hands an MPS control binary its command on stdin; one that fails at once leaves
// the pipe without a reader. The write must fail with EPIPE, not raise SIGPIPE (whose default
// action would end the device plugin): 1 MiB does not fit in a pipe, so writing goes on after the
// child has gone.
TEST(ProcessRun, AChildThatExitsWithoutReadingItsInputDoesNotEndTheCaller) {
    struct sigaction dfl {}, old {};
    dfl.sa_handler = SIG_DFL;
    ASSERT_EQ(::sigaction(SIGPIPE, &dfl, &old), 0);  // as in the kgpu binary: SIGPIPE's default action
    process::RunOptions opts;
    opts.argv = {"/bin/sh", "-c", "exec 0<&-; exit 3"};
    opts.stdin_text = std::string(1 << 20, 'x');
    auto done = process::run(opts);
    ::sigaction(SIGPIPE, &old, nullptr);
    ASSERT_TRUE(done.has_value()) << done.error().message;
    EXPECT_EQ(done->exit_code, 3);
    sigset_t pending;
    sigpending(&pending);
    EXPECT_EQ(sigismember(&pending, SIGPIPE), 0) << "a SIGPIPE was left pending";
}

// The guard itself: a write to a pipe without a reader fails with EPIPE while it lives, and the
// signal mask is what it was afterwards.
TEST(ProcessRun, SigpipeBlockedTurnsTheSignalIntoEpipe) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    ::close(fds[0]);
    sigset_t before, after;
    pthread_sigmask(SIG_SETMASK, nullptr, &before);
    {
        const process::SigpipeBlocked quiet;
        errno = 0;
        EXPECT_EQ(::write(fds[1], "x", 1), -1);
        EXPECT_EQ(errno, EPIPE);
    }
    ::close(fds[1]);
    pthread_sigmask(SIG_SETMASK, nullptr, &after);
    EXPECT_EQ(sigismember(&before, SIGPIPE), sigismember(&after, SIGPIPE));
    sigset_t pending;
    sigpending(&pending);
    EXPECT_EQ(sigismember(&pending, SIGPIPE), 0);
}

// RunOptions::root: the program is found, and runs, inside the root. glibc's ldconfig is static,
// so a root with nothing but it runs it; the host's /sbin/ldconfig is no path in an empty root.
TEST(ProcessRun, AProgramRunsInTheRootItIsGiven) {
    if (::geteuid() != 0) GTEST_SKIP() << "chroot needs root";
    test::TempDir root;
    std::filesystem::copy_file("/sbin/ldconfig", root.path() + "/ldconfig");
    process::RunOptions opts;
    opts.root = root.path();
    opts.argv = {"/ldconfig", "--version"};
    auto done = process::run(opts);
    ASSERT_TRUE(done.has_value()) << done.error().message;
    EXPECT_EQ(done->exit_code, 0) << done->err;
    EXPECT_THAT(done->out, ::testing::HasSubstr("ldconfig"));

    opts.argv = {"/sbin/ldconfig", "--version"};
    done = process::run(opts);
    ASSERT_TRUE(done.has_value()) << done.error().message;
    EXPECT_EQ(done->exit_code, 127);
    EXPECT_EQ(done->err, "exec /sbin/ldconfig failed: No such file or directory");

    opts.root = root.path() + "/missing";
    done = process::run(opts);
    ASSERT_TRUE(done.has_value()) << done.error().message;
    EXPECT_EQ(done->exit_code, 126);
    EXPECT_EQ(done->err, "chroot " + opts.root + " failed: No such file or directory");
}

// inherit_env = false: the child sees set_env and nothing of the caller's environment.
TEST(ProcessRun, WithoutInheritingTheChildSeesOnlyWhatIsSet) {
    ::setenv("KGPU_PROCESS_TEST_CALLER", "1", 1);
    process::RunOptions opts;
    opts.argv = {"/usr/bin/env"};
    opts.set_env = {{"A", "1"}, {"B", "two"}};
    opts.inherit_env = false;
    auto done = process::run(opts);
    ASSERT_TRUE(done.has_value()) << done.error().message;
    EXPECT_EQ(done->out, "A=1\nB=two\n");
    opts.inherit_env = true;
    done = process::run(opts);
    ASSERT_TRUE(done.has_value()) << done.error().message;
    EXPECT_THAT(done->out, ::testing::HasSubstr("KGPU_PROCESS_TEST_CALLER=1"));
    ::unsetenv("KGPU_PROCESS_TEST_CALLER");
}

}  // namespace
