// Debian's containerd started by a test as root, with its root, state dir and sockets in a temp
// dir (shared by the CRI client test and the container toolkit's end-to-end test), and `ctr`
// against it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "support/process.h"

namespace kgpu::test {

// The containerd binary (/usr/bin, /usr/local/bin, /usr/sbin), or "" when not installed.
std::string find_containerd();

class Containerd {
public:
    struct Options {
        std::string extra_config;                  // TOML appended to the generated config
        std::map<std::string, std::string> env;    // containerd's (and so its shims' and runtimes') environment
        bool cri = true;                           // false: the CRI plugin is disabled (faster start)
    };

    // Starts containerd in `dir` and waits (up to 30 s) for its socket. The returned string is
    // empty on success, else what went wrong with containerd's stderr.
    std::string start(const std::string& dir, const Options& options);
    ~Containerd();

    const std::string& socket() const { return socket_; }
    std::string log() const { return process_ ? process_->err() : std::string(); }
    // `ctr --address <socket> --namespace kgpu-test <args...>`.
    RunResult ctr(const std::vector<std::string>& args) const;
    // SIGTERM, then the exit code (or -1 when it did not exit in 20 s).
    int stop();

private:
    std::unique_ptr<ChildProcess> process_;
    std::string socket_;
};

}  // namespace kgpu::test
