// Debian's containerd (scripts/setup --all installs it) started by a test as root, with its own root,
// state dir and sockets in a temp dir: nothing is shared with a containerd the machine runs.
// Used by the CRI client test (tests/attribution), the image test (tests/image) and the container
// toolkit's end-to-end test (tests/toolkit).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "support/process.h"

namespace kgpu::test {

class TestContainerd {
public:
    // Why containerd cannot run here (no containerd or ctr binary, not root), or "" when it can.
    static std::string unavailable_reason();

    struct Options {
        std::map<std::string, std::string> env;  // containerd's environment (its shims and runtimes inherit it)
        bool cri = true;                         // false: the CRI plugin is disabled (a faster start)
        std::chrono::seconds timeout{30};
    };

    // Starts containerd with everything under `dir` and waits (up to `timeout`) for its socket.
    // started() says whether the socket appeared; error() has containerd's log when not.
    explicit TestContainerd(const std::string& dir, std::chrono::seconds timeout = std::chrono::seconds(30));
    TestContainerd(const std::string& dir, const Options& options);
    ~TestContainerd();
    TestContainerd(const TestContainerd&) = delete;
    TestContainerd& operator=(const TestContainerd&) = delete;

    bool started() const { return started_; }
    std::string error() const;
    const std::string& socket() const { return socket_; }
    std::string endpoint() const { return "unix://" + socket_; }
    ChildProcess& process() { return *process_; }

    // `ctr --address <socket> --namespace kgpu-test <args...>` to completion.
    RunResult ctr(const std::vector<std::string>& args) const;
    // `ctr ... run <args...>` with the container's stdout and stderr written to files by a logging
    // binary of the shim (--log-uri binary://) and returned as out and err; ctr's own messages
    // (a container that never started) are added to err. ctr's copy from its FIFOs can lose a
    // short-lived container's output under load (its task.Delete cancels a reader that has not
    // opened its FIFO yet); the shim waits for its logger before the delete returns.
    RunResult ctr_run(const std::vector<std::string>& args);
    // SIGTERM, then the exit code once it exits (-1 after 20 s).
    int stop();

private:
    std::string dir_;
    std::string socket_;
    std::string logger_;  // ctr_run's logging binary, written by the constructor
    int runs_ = 0;
    std::unique_ptr<ChildProcess> process_;
    bool started_ = false;
};

}  // namespace kgpu::test
