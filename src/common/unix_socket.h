// Unix stream sockets by path: the one place that fills a sockaddr_un. Each returns the socket
// (close-on-exec), or an empty Fd with errno set as the failing call left it; ENAMETOOLONG when
// the path does not fit sun_path (108 bytes with its NUL).
#pragma once

#include <string>

#include "common/fd.h"

namespace kgpu {

// Connected to the socket at `path`. `nonblocking`: the connect does not wait for a full
// backlog (EAGAIN then; someone listens all the same).
Fd unix_connect(const std::string& path, bool nonblocking = false);
// Bound at `path` (not listening yet).
Fd unix_bind(const std::string& path);

}  // namespace kgpu
