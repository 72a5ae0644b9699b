#include "common/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>

#include "common/fd.h"

extern char** environ;

namespace kgpu::process {

namespace {

// In the child between fork and exec: `prefix` and "errno <n>" to stderr with async-signal-safe
// calls only (strerror may take locale locks that another thread of the caller held at fork).
void write_failure(const std::string& prefix, int err) {
    char digits[16];
    int n = 0;
    unsigned v = err < 0 ? 0u : static_cast<unsigned>(err);
    do {
        digits[n++] = static_cast<char>('0' + v % 10);
        v /= 10;
    } while (v != 0 && n < 16);
    char out[32] = "errno ";
    int len = 6;
    while (n > 0) out[len++] = digits[--n];
    [[maybe_unused]] auto a = ::write(STDERR_FILENO, prefix.data(), prefix.size());
    [[maybe_unused]] auto b = ::write(STDERR_FILENO, out, static_cast<size_t>(len));
}

// In the caller, once the child is gone: "<prefix>errno <n>" said in words.
void explain_failure(std::string& err, const std::string& prefix) {
    const std::string head = prefix + "errno ";
    if (!err.starts_with(head)) return;
    int e = 0;
    const auto [end, ec] = std::from_chars(err.data() + head.size(), err.data() + err.size(), e);
    if (ec != std::errc() || end != err.data() + err.size()) return;
    err = prefix + std::strerror(e);
}

bool make_pipe(Fd& read_end, Fd& write_end) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return false;
    read_end.reset(p[0]);
    write_end.reset(p[1]);
    return true;
}

}  // namespace

int exit_code_of(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

std::vector<std::string> child_environment(const std::map<std::string, std::string>& set,
                                           const std::vector<std::string>& unset) {
    std::vector<std::string> out;
    for (char** e = environ; e && *e; ++e) {
        const std::string_view kv(*e);
        const std::string_view key = kv.substr(0, kv.find('='));
        if (!set.contains(std::string(key)) && std::find(unset.begin(), unset.end(), key) == unset.end())
            out.emplace_back(kv);
    }
    for (const auto& [k, v] : set) out.push_back(k + "=" + v);
    return out;
}

ExecImage::ExecImage(std::vector<std::string> argv, std::vector<std::string> env)
    : argv_strings_(std::move(argv)), env_strings_(std::move(env)) {
    for (auto& s : argv_strings_) argv_.push_back(s.data());
    argv_.push_back(nullptr);
    for (auto& s : env_strings_) envp_.push_back(s.data());
    envp_.push_back(nullptr);
}

void ExecImage::exec_in_child(int in, int out, int err) const {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    if (in >= 0) ::dup2(in, STDIN_FILENO);
    if (out >= 0) ::dup2(out, STDOUT_FILENO);
    if (err >= 0) ::dup2(err, STDERR_FILENO);
    ::execve(argv_[0], argv_.data(), envp_.data());
}

namespace {

// The parent's ends of a child's stdin, stdout and stderr (each reset once done).
struct ChildPipes {
    Fd in_w, out_r, err_r;
};

// One short wait: stdin fed from opts.stdin_text (from `written` on), stdout and stderr read into
// `done` up to opts.max_output each. false: poll failed.
bool exchange(ChildPipes& p, const RunOptions& opts, size_t& written, Completed& done) {
    pollfd fds[3];
    nfds_t n = 0;
    int which[3];
    if (p.out_r.get() >= 0) fds[n] = {p.out_r.get(), POLLIN, 0}, which[n++] = 1;
    if (p.err_r.get() >= 0) fds[n] = {p.err_r.get(), POLLIN, 0}, which[n++] = 2;
    if (p.in_w.get() >= 0) fds[n] = {p.in_w.get(), POLLOUT, 0}, which[n++] = 0;
    // Short waits: the child's exit is noticed by waitpid (the caller), not by an event here.
    int r = n == 0 ? (::usleep(5000), 0) : ::poll(fds, n, 10);
    if (r < 0 && errno != EINTR) return false;
    char buf[4096];
    for (nfds_t i = 0; r > 0 && i < n; ++i) {
        if (!fds[i].revents) continue;
        if (which[i] == 0) {
            const SigpipeBlocked quiet;  // a child that exited unread: EPIPE, not the end of this process
            ssize_t w = ::write(p.in_w.get(), opts.stdin_text.data() + written, opts.stdin_text.size() - written);
            if (w > 0) written += static_cast<size_t>(w);
            if ((w < 0 && errno != EAGAIN && errno != EINTR) || written == opts.stdin_text.size()) p.in_w.reset();
            continue;
        }
        Fd& src = which[i] == 1 ? p.out_r : p.err_r;
        std::string& dst = which[i] == 1 ? done.out : done.err;
        ssize_t got = ::read(src.get(), buf, sizeof buf);
        if (got > 0) {
            size_t keep = std::min(static_cast<size_t>(got), opts.max_output - std::min(opts.max_output, dst.size()));
            dst.append(buf, keep);
        } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
            src.reset();
        }
    }
    return true;
}

}  // namespace

Result<Completed> run(const RunOptions& opts) {
    using clock = std::chrono::steady_clock;
    if (opts.argv.empty()) return fail(Code::invalid_argument, "run: empty argv");
    const std::string& program = opts.argv[0];

    // Everything the child needs is built before fork: in a threaded process only
    // async-signal-safe calls are allowed between fork and exec.
    std::vector<std::string> env_strings;
    if (opts.inherit_env) {
        env_strings = child_environment(opts.set_env);
    } else {
        for (const auto& [k, v] : opts.set_env) env_strings.push_back(k + "=" + v);
    }
    const ExecImage image(opts.argv, std::move(env_strings));
    const std::string exec_failed = "exec " + program + " failed: ";
    const std::string chroot_failed = "chroot " + opts.root + " failed: ";

    Fd in_r, out_w, err_w;
    ChildPipes pipes;
    if (!make_pipe(in_r, pipes.in_w) || !make_pipe(pipes.out_r, out_w) || !make_pipe(pipes.err_r, err_w))
        return fail(Code::io, "running {}: pipe: {}", program, std::strerror(errno));

    pid_t pid = ::fork();
    if (pid < 0) return fail(Code::io, "running {}: fork: {}", program, std::strerror(errno));
    if (pid == 0) {
        if (!opts.root.empty() && (::chroot(opts.root.c_str()) != 0 || ::chdir("/") != 0)) {
            ::dup2(err_w.get(), STDERR_FILENO);
            write_failure(chroot_failed, errno);
            ::_exit(126);
        }
        image.exec_in_child(in_r.get(), out_w.get(), err_w.get());
        write_failure(exec_failed, errno);
        ::_exit(127);
    }
    in_r.reset();
    out_w.reset();
    err_w.reset();
    ::fcntl(pipes.in_w.get(), F_SETFL, O_NONBLOCK);

    Completed done;
    size_t written = 0;
    if (opts.stdin_text.empty()) pipes.in_w.reset();
    const auto deadline = clock::now() + opts.timeout;
    std::optional<clock::time_point> exited_at;
    bool reaped = false;
    int status = 0;
    for (;;) {
        if (!reaped) {
            pid_t r = ::waitpid(pid, &status, WNOHANG);
            if (r == pid || (r < 0 && errno == ECHILD)) {
                reaped = true;
                exited_at = clock::now();
                done.exit_code = r == pid ? exit_code_of(status) : -1;
            }
        }
        if (reaped && pipes.out_r.get() < 0 && pipes.err_r.get() < 0) break;
        if (reaped && clock::now() - *exited_at > std::chrono::milliseconds(200)) break;
        if (!reaped && clock::now() >= deadline) {
            ::kill(pid, SIGKILL);
            while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            return fail(Code::timeout, "{} did not finish within {} ms", program, opts.timeout.count());
        }
        if (!exchange(pipes, opts, written, done)) break;
    }
    if (done.exit_code == 126) explain_failure(done.err, chroot_failed);
    if (done.exit_code == 127) explain_failure(done.err, exec_failed);
    return done;
}

SigpipeBlocked::SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
}

SigpipeBlocked::~SigpipeBlocked() {
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
        const timespec none{};
        while (sigtimedwait(&pipe_, nullptr, &none) < 0 && errno == EINTR) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

sigset_t signal_set(std::initializer_list<int> signals) {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : signals) sigaddset(&set, sig);
    return set;
}

sigset_t block_signals(std::initializer_list<int> signals) {
    sigset_t set = signal_set(signals);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    return set;
}

}  // namespace kgpu::process
