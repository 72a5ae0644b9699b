// An owned file descriptor: closed when its owner goes, whichever way the owner's function ends
// (the hooks' RootDir, process::run's pipes, the plugin's and the exporter's signalfd and eventfds,
// the HTTP clients' and the exporter's listening sockets, the D-Bus connection).
#pragma once

#include <unistd.h>

namespace kgpu {

class Fd {
public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    ~Fd() { reset(); }
    Fd(Fd&& o) noexcept : fd_(o.release()) {}
    Fd& operator=(Fd&& o) noexcept {
        if (this != &o) reset(o.release());
        return *this;
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;

    int get() const { return fd_; }
    // Gives the descriptor up without closing it.
    int release() {
        const int f = fd_;
        fd_ = -1;
        return f;
    }
    // Closes the one held (if any) and holds `fd` instead.
    void reset(int fd = -1) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = fd;
    }
    explicit operator bool() const { return fd_ >= 0; }

private:
    int fd_ = -1;
};

}  // namespace kgpu
