#include "common/unix_socket.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

namespace kgpu {

namespace {

// A socket and its address (`a` comes zeroed); empty with errno set when either cannot be had.
Fd open_for(const std::string& path, int flags, sockaddr_un& a) {
    if (path.size() >= sizeof a.sun_path) {
        errno = ENAMETOOLONG;
        return {};
    }
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
    return Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | flags, 0));
}

// `fd` when the call `rc` came from succeeded; else closed, with the call's errno kept.
Fd kept(Fd fd, int rc) {
    if (rc == 0) return fd;
    const int err = errno;
    fd.reset();
    errno = err;
    return {};
}

}  // namespace

Fd unix_connect(const std::string& path, bool nonblocking) {
    sockaddr_un a{};
    Fd fd = open_for(path, nonblocking ? SOCK_NONBLOCK : 0, a);
    if (!fd) return fd;
    const int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a);
    return kept(std::move(fd), rc);
}

Fd unix_bind(const std::string& path) {
    sockaddr_un a{};
    Fd fd = open_for(path, 0, a);
    if (!fd) return fd;
    const int rc = ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a);
    return kept(std::move(fd), rc);
}

}  // namespace kgpu
