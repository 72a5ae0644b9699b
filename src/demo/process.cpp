#include "demo/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/process.h"

namespace kgpu::demo {

Result<Child> Child::spawn(const SpawnOptions& opts) {
    if (opts.argv.empty()) return fail(Code::invalid_argument, "spawn: empty argv");
    // Everything the child needs is built before fork: after fork in a threaded process only
    // async-signal-safe calls are allowed.
    const process::ExecImage image(opts.argv, process::child_environment(opts.set_env, opts.unset_env));

    int log_fd = ::open(opts.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) return fail(Code::io, "opening {}: {}", opts.log_path, std::strerror(errno));
    int out_fd = log_fd;
    if (!opts.stdout_path.empty()) {
        out_fd = ::open(opts.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (out_fd < 0) {
            int err = errno;
            ::close(log_fd);
            return fail(Code::io, "opening {}: {}", opts.stdout_path, std::strerror(err));
        }
    }
    int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const pid_t parent = ::getpid();

    pid_t pid = ::fork();
    if (pid < 0) {
        int err = errno;
        ::close(log_fd);
        if (out_fd != log_fd) ::close(out_fd);
        if (null_fd >= 0) ::close(null_fd);
        return fail(Code::io, "fork for {}: {}", opts.argv[0], std::strerror(err));
    }
    if (pid == 0) {
        // Child: die with the demo, whatever way it ends.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(127);
        // Its own process group, so a terminal's Ctrl-C (SIGINT to the foreground group) reaches
        // only the demo, which then stops its children in order; the parent sets it too, so it
        // holds by the time spawn() returns, whichever of the two runs first.
        ::setpgid(0, 0);
        image.exec_in_child(null_fd, out_fd, log_fd);
        const char msg[] = "kgpu demo: exec failed\n";
        [[maybe_unused]] auto n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
        ::_exit(127);
    }
    // EACCES once the child has exec'd (it set its group itself by then): nothing to do.
    ::setpgid(pid, pid);
    ::close(log_fd);
    if (out_fd != log_fd) ::close(out_fd);
    if (null_fd >= 0) ::close(null_fd);
    Child c;
    c.pid_ = pid;
    c.log_path_ = opts.log_path;
    return c;
}

Child::Child(Child&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), exit_code_(other.exit_code_), log_path_(std::move(other.log_path_)) {}

Child& Child::operator=(Child&& other) noexcept {
    if (this != &other) {
        if (pid_ > 0 && !exit_code_) stop(std::chrono::milliseconds(0));
        pid_ = std::exchange(other.pid_, -1);
        exit_code_ = other.exit_code_;
        log_path_ = std::move(other.log_path_);
    }
    return *this;
}

Child::~Child() {
    if (pid_ > 0 && !exit_code_) stop(std::chrono::milliseconds(0));
}

std::optional<int> Child::poll() {
    if (exit_code_ || pid_ <= 0) return exit_code_;
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) exit_code_ = process::exit_code_of(status);
    else if (r < 0 && errno == ECHILD) exit_code_ = -1;  // reaped elsewhere: nothing left to wait for
    return exit_code_;
}

int Child::stop(std::chrono::milliseconds grace) {
    if (pid_ <= 0) return -1;
    if (poll()) return *exit_code_;
    if (grace.count() > 0) {
        ::kill(pid_, SIGTERM);
        auto deadline = std::chrono::steady_clock::now() + grace;
        while (std::chrono::steady_clock::now() < deadline) {
            if (poll()) return *exit_code_;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    exit_code_ = process::exit_code_of(status);
    return *exit_code_;
}

Result<int> run_to_completion(const SpawnOptions& opts, std::chrono::milliseconds timeout,
                              const std::function<bool()>& cancelled) {
    auto child = Child::spawn(opts);
    if (!child) return std::unexpected(child.error());
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
        // Cancellation first: a child that exited because of the same interruption must not read
        // as a normal exit.
        if (cancelled && cancelled()) {
            child->stop(std::chrono::milliseconds(2000));
            return fail(Code::unavailable, "{} interrupted", opts.argv.size() > 1 ? opts.argv[1] : opts.argv[0]);
        }
        if (auto code = child->poll()) return *code;
        if (std::chrono::steady_clock::now() >= deadline) {
            child->stop(std::chrono::milliseconds(2000));
            return fail(Code::timeout, "{} did not finish within {} s", opts.argv.size() > 1 ? opts.argv[1] : opts.argv[0],
                        timeout.count() / 1000);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

}  // namespace kgpu::demo
