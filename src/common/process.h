// Running a helper program to completion with its stdin given and its output captured (the MPS
// control client, `nvidia-cuda-mps-control`, is driven this way). src/demo's Child keeps
// long-running children with their output in log files; this is the short-lived case.
#pragma once

#include <signal.h>

#include <chrono>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"

namespace kgpu::process {

struct RunOptions {
    std::vector<std::string> argv;               // argv[0] is the program's path (no PATH search)
    std::map<std::string, std::string> set_env;  // added to (or replacing in) this process's environment
    bool inherit_env = true;                     // false: set_env is the child's whole environment
    std::string stdin_text;                      // written to its stdin, which is then closed
    std::string root;                            // non-empty: the child chroots here (and chdirs to
                                                 // "/") before exec; argv[0] is then a path inside it
    std::chrono::milliseconds timeout{5000};
    size_t max_output = 1 << 20;                 // per stream; the rest is read and dropped
};

struct Completed {
    int exit_code = -1;  // the exit status, or 128 + signal
    std::string out, err;
};

// Runs argv to completion. The child starts with an empty signal mask and default SIGPIPE
// (a caller blocking signals for a signalfd must not pass that on). A child that exits without
// reading all of opts.stdin_text (an MPS control binary that fails at once) is no harm to the
// caller: the write fails with EPIPE under SigpipeBlocked. Its output is read until the
// program has exited and its pipes are closed; a descendant that keeps them open (a daemon that
// forgot to let go of them) is not waited for beyond 200 ms after the program exits.
// Errors: invalid_argument for an empty argv; io when the pipes or fork fail; timeout when it
// runs longer than opts.timeout (it is then killed with SIGKILL and reaped; the message names
// the program). An exec failure is exit code 127 with the reason on `err`; a chroot failure
// (opts.root) exit code 126 with the reason on `err`.
Result<Completed> run(const RunOptions& opts);

// What run() and src/demo's Child both need before fork (nothing after fork may allocate):
// this process's environment without the keys of `set` and `unset`, then `set`'s entries.
std::vector<std::string> child_environment(const std::map<std::string, std::string>& set,
                                           const std::vector<std::string>& unset = {});
// argv and envp as execve takes them, built before fork: after fork in a threaded process only
// async-signal-safe calls are allowed, so nothing may be allocated there. Neither copied nor
// moved (the pointers point into its own strings).
class ExecImage {
public:
    ExecImage(std::vector<std::string> argv, std::vector<std::string> env);
    ExecImage(const ExecImage&) = delete;
    ExecImage& operator=(const ExecImage&) = delete;
    // In the forked child: the signal mask emptied and SIGPIPE back to its default (a caller
    // blocking signals for a signalfd must not pass that on), stdin, stdout and stderr from the
    // given descriptors (-1: left as it is), then execve. Returns only when exec failed (errno).
    void exec_in_child(int in, int out, int err) const;

private:
    std::vector<std::string> argv_strings_, env_strings_;
    std::vector<char*> argv_, envp_;
};

// The set of `signals`.
sigset_t signal_set(std::initializer_list<int> signals);

// While it lives, SIGPIPE is blocked on the calling thread, and one raised meanwhile (a write(2)
// to a pipe or socket whose reader has gone raises it on the writing thread; OpenSSL writes this
// way) is taken off before it is unblocked: such a write just fails with EPIPE instead of the
// default action ending the whole process. One already pending before is left pending.
class SigpipeBlocked {
public:
    SigpipeBlocked();
    ~SigpipeBlocked();
    SigpipeBlocked(const SigpipeBlocked&) = delete;
    SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

private:
    sigset_t pipe_{}, old_{};
    bool was_pending_ = false;
};
// Blocks `signals` in the calling thread and returns their set. Called before any thread starts
// (NVML's library may start its own), every thread inherits the mask and only the caller's
// signalfd or sigtimedwait sees them.
sigset_t block_signals(std::initializer_list<int> signals);

// A waitpid() status as an exit code: the exit status, 128 + the signal, or -1.
int exit_code_of(int wait_status);

}  // namespace kgpu::process
