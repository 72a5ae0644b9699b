// Runs a program to completion with extra environment variables, capturing stdout and stderr
// (integration tests run the built kgpu binary this way).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kgpu::test {

struct RunResult {
    int exit_code = -1;  // the exit status, or 128 + signal
    std::string out;
    std::string err;
};

RunResult run_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {});

// `argv` behind the words of env KGPU_BENCH_PROFILER (split at spaces, the first a path, as
// ChildProcess does not search PATH; `argv` as it is when unset):
// the benches start the process they measure through this, so that scripts/function-order can run
// it under a profiler.
std::vector<std::string> under_profiler(std::vector<std::string> argv);

// A program running in the background (a server under test). Its stdout and stderr go to files;
// the destructor kills it (SIGKILL) if it is still running.
class ChildProcess {
public:
    ChildProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {});
    ~ChildProcess();
    ChildProcess(const ChildProcess&) = delete;
    ChildProcess& operator=(const ChildProcess&) = delete;

    int pid() const { return pid_; }
    void signal(int sig) const;
    // The exit code (or 128 + signal) once it exits within `timeout_ms`, else -1.
    int wait(int timeout_ms);
    bool running();
    std::string out() const;
    std::string err() const;

private:
    int pid_ = -1;
    int status_ = -1;
    std::string out_path_, err_path_;
    std::string dir_;
};

// The port a server wrote to its ready file (`kgpu exporter --ready-file`: "host:port\n"), once
// the file is there; 0 when `proc` exits first or nothing comes within `timeout`.
int wait_for_ready_port(ChildProcess& proc, const std::string& ready_file,
                        std::chrono::milliseconds timeout = std::chrono::seconds(60));

// The port of the IPv4 TCP socket `proc` listens on, read from its open sockets (/proc/<pid>/fd
// and /proc/<pid>/net/tcp), for a server told to bind port 0 that has no ready file (Prometheus:
// --web.listen-address=127.0.0.1:0); 0 when it exits first or listens on nothing within `timeout`.
// Throws when it listens on more than one port.
int wait_for_listening_port(ChildProcess& proc, std::chrono::milliseconds timeout = std::chrono::seconds(60));

// A field of /proc/<pid>/status in KiB ("VmRSS:", "VmHWM:"); -1 when the process or the field
// is not there.
long proc_status_kib(int pid, std::string_view key);

// CPU time of every thread of `pid`, in seconds: the sum of /proc/<pid>/task/*/schedstat's first
// field (nanoseconds on a CPU), finer than utime + stime's 10 ms ticks. A thread that ends within
// a measured window takes its share with it. -1 when the process is not there.
double proc_cpu_seconds(int pid);

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::string& path() const { return path_; }
    // Writes `content` to path()/name (creating parent dirs) and returns the full path.
    std::string write(const std::string& name, const std::string& content) const;

private:
    std::string path_;
};

}  // namespace kgpu::test
