// Child processes of the demo: `kgpu device-plugin`, `kgpu exporter`, `kgpu info`, `kgpu doctor`
// run from the same binary, each with its stdout and stderr in a log file of the work dir.
//
// Contract: a Child is always reaped. Its destructor sends SIGKILL and waits when the process is
// still running, and every child is started with PR_SET_PDEATHSIG(SIGKILL), so it dies with the
// demo even when the demo itself is killed with SIGKILL. Children start with an empty signal mask
// (the demo blocks SIGINT/SIGTERM for its signalfd; a blocked mask survives exec), and each in a
// process group of its own (pgid = pid): a terminal's Ctrl-C signals the demo alone, which then
// stops the children itself.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace kgpu::demo {

struct SpawnOptions {
    std::vector<std::string> argv;                 // argv[0] is the program path
    std::map<std::string, std::string> set_env;    // added to (or replacing in) the demo's environment
    std::vector<std::string> unset_env;            // removed from it
    std::string log_path;                          // stderr (and stdout unless stdout_path), appended
    std::string stdout_path;                       // when set, stdout goes here (truncated) instead
};

class Child {
public:
    // Starts the program. Errors: io when fork or the log file fails (exec failures show up as
    // exit code 127 with the reason in the log).
    static Result<Child> spawn(const SpawnOptions& opts);

    Child() = default;
    Child(Child&& other) noexcept;
    Child& operator=(Child&& other) noexcept;
    Child(const Child&) = delete;
    Child& operator=(const Child&) = delete;
    ~Child();

    pid_t pid() const { return pid_; }
    const std::string& log_path() const { return log_path_; }
    // The exit code (or 128 + signal) once the process has exited, reaping it; nullopt while it runs.
    std::optional<int> poll();
    // SIGTERM, then SIGKILL after `grace`; returns the exit code (or 128 + signal). No-op when
    // already reaped.
    int stop(std::chrono::milliseconds grace);

private:
    pid_t pid_ = -1;
    std::optional<int> exit_code_;
    std::string log_path_;
};

// Runs a program to completion (its output in opts.log_path). `cancelled` is polled every 20 ms,
// before the exit status; when it returns true, or after `timeout`, the program is stopped. Errors: timeout, or
// unavailable when cancelled; io when it cannot start.
Result<int> run_to_completion(const SpawnOptions& opts, std::chrono::milliseconds timeout,
                              const std::function<bool()>& cancelled);

}  // namespace kgpu::demo
