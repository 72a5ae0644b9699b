// common/unix_socket.h: the errno each failure leaves is what the callers tell apart (nobody
// listens, no such file, a path that cannot be a socket's).
#include "common/unix_socket.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "support/process.h"

namespace kgpu {
namespace {

TEST(UnixSocket, BoundRefusesUntilItListensThenConnects) {
    test::TempDir dir;
    const std::string path = dir.path() + "/s.sock";
    Fd bound = unix_bind(path);
    ASSERT_TRUE(bound) << std::strerror(errno);
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_FALSE(unix_connect(path));
    EXPECT_EQ(errno, ECONNREFUSED);
    EXPECT_FALSE(unix_connect(path, true));
    EXPECT_EQ(errno, ECONNREFUSED);
    ASSERT_EQ(::listen(bound.get(), 4), 0);
    EXPECT_TRUE(unix_connect(path));
    EXPECT_TRUE(unix_connect(path, true));
    EXPECT_FALSE(unix_bind(path)) << "bound twice";
    EXPECT_EQ(errno, EADDRINUSE);
}

TEST(UnixSocket, FailuresKeepTheirErrno) {
    test::TempDir dir;
    EXPECT_FALSE(unix_connect(dir.path() + "/missing.sock"));
    EXPECT_EQ(errno, ENOENT);
    const std::string long_path = dir.path() + "/" + std::string(120, 'x');
    EXPECT_FALSE(unix_connect(long_path));
    EXPECT_EQ(errno, ENAMETOOLONG);
    EXPECT_FALSE(unix_bind(long_path));
    EXPECT_EQ(errno, ENAMETOOLONG);
    EXPECT_FALSE(unix_bind(dir.path() + "/no/such/dir.sock"));
    EXPECT_EQ(errno, ENOENT);
}

TEST(UnixSocket, TheLongestPathThatFitsIsTaken) {
    // sun_path holds 108 bytes with the NUL: a 107-byte path binds, 108 does not.
    std::string base = "/tmp/kgpu-unix-socket-test-";
    base += std::to_string(::getpid()) + "-";
    const std::string fits = base + std::string(107 - base.size(), 'a');
    ASSERT_EQ(fits.size(), 107u);
    Fd fd = unix_bind(fits);
    EXPECT_TRUE(fd) << std::strerror(errno);
    ::unlink(fits.c_str());
    EXPECT_FALSE(unix_bind(fits + "a"));
    EXPECT_EQ(errno, ENAMETOOLONG);
}

}  // namespace
}  // namespace kgpu
