// kube_e2e_supervisor DIR PIDFILE LOG: restarts the containerd of the kube-mini cluster in DIR
// whenever it exits, as systemd's Restart=always would, until it gets SIGTERM. A test tool of the
// e2e suite (tests/e2e), never part of kgpu.
//
// Why: kube-mini starts containerd detached, with nobody watching it, and `kgpu runtime install
// --restart-mode signal` restarts containerd the way NVIDIA's installer does, with a SIGHUP that
// makes containerd exit and leaves the start to the service manager. Here the service manager is
// this program: it reads containerd's pid from DIR/pids/containerd, its command line, environment
// and working directory from /proc while it runs, waits for it to exit (pidfd: containerd is not
// our child), and starts the same command line again in its own session with its output appended
// to DIR/logs/containerd.log, writing the new pid to DIR/pids/containerd (where kube-mini's
// `down` looks for it). Each restart is one line in LOG.
//
// It detaches itself (fork, setsid) and writes its own pid to PIDFILE once it watches containerd,
// then the parent exits 0; any failure before that exits 1 with the reason on stderr.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// NUL-separated /proc file as a list.
std::vector<std::string> split0(const std::string& s) {
    std::vector<std::string> out;
    std::string cur;
    for (char c : s) {
        if (c == '\0') {
            out.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    if (!cur.empty()) out.push_back(cur);
    return out;
}

// What it takes to start containerd again.
struct Command {
    std::vector<std::string> argv, env;
    std::string cwd;
};

bool capture(int pid, Command& c, std::string& error) {
    const std::string proc = "/proc/" + std::to_string(pid);
    c.argv = split0(slurp(proc + "/cmdline"));
    c.env = split0(slurp(proc + "/environ"));
    std::error_code ec;
    c.cwd = std::filesystem::read_symlink(proc + "/cwd", ec).string();
    if (c.argv.empty() || ec) {
        error = "cannot read the command line of pid " + std::to_string(pid) + " from " + proc;
        return false;
    }
    return true;
}

int read_pid(const std::string& file) {
    try {
        return std::stoi(slurp(file));
    } catch (...) {
        return -1;
    }
}

void log_line(const std::string& log, const std::string& text) {
    std::ofstream out(log, std::ios::app);
    const std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%FT%TZ", std::gmtime(&now));
    out << stamp << " " << text << "\n";
}

// Starts `c` detached (own session), stdout and stderr appended to `out`; returns its pid or -1.
int start(const Command& c, const std::string& out) {
    {
        std::ofstream(out, std::ios::app) << "=== start (kube_e2e_supervisor) " << c.argv[0] << "\n";
    }
    const pid_t pid = ::fork();
    if (pid != 0) return pid;
    ::setsid();
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const int fd = ::open(out.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || in < 0 || ::dup2(in, 0) < 0 || ::dup2(fd, 1) < 0 || ::dup2(fd, 2) < 0) ::_exit(126);
    if (!c.cwd.empty() && ::chdir(c.cwd.c_str()) != 0) ::_exit(126);
    std::vector<char*> argv, envp;
    for (const auto& a : c.argv) argv.push_back(const_cast<char*>(a.c_str()));
    for (const auto& e : c.env) envp.push_back(const_cast<char*>(e.c_str()));
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    ::execvpe(argv[0], argv.data(), envp.data());
    ::_exit(127);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s KUBE_MINI_DIR PIDFILE LOG\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1], pidfile = argv[2], log = argv[3];
    const std::string containerd_pidfile = dir + "/pids/containerd", containerd_log = dir + "/logs/containerd.log";
    int pid = read_pid(containerd_pidfile);
    Command cmd;
    std::string error;
    if (pid <= 0 || ::kill(pid, 0) != 0) {
        std::fprintf(stderr, "kube_e2e_supervisor: %s: no running containerd (pid %d)\n", containerd_pidfile.c_str(), pid);
        return 1;
    }
    if (!capture(pid, cmd, error)) {
        std::fprintf(stderr, "kube_e2e_supervisor: %s\n", error.c_str());
        return 1;
    }

    // Detach: the caller (a test) waits only for the first process.
    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) return 1;
    const pid_t daemon = ::fork();
    if (daemon < 0) return 1;
    if (daemon > 0) {
        ::close(ready[1]);
        char ok = 0;
        const bool started = ::read(ready[0], &ok, 1) == 1 && ok == 1;
        if (!started) std::fprintf(stderr, "kube_e2e_supervisor: the supervisor did not start (see %s)\n", log.c_str());
        return started ? 0 : 1;
    }
    ::close(ready[0]);
    ::setsid();
    const int devnull = ::open("/dev/null", O_RDWR);
    const int logfd = ::open(log.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (devnull < 0 || logfd < 0) ::_exit(1);
    ::dup2(devnull, 0);
    ::dup2(logfd, 1);
    ::dup2(logfd, 2);

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGCHLD);
    ::sigprocmask(SIG_BLOCK, &mask, nullptr);
    const int sfd = ::signalfd(-1, &mask, SFD_CLOEXEC);
    {
        std::ofstream(pidfile + ".tmp") << ::getpid() << "\n";
        std::filesystem::rename(pidfile + ".tmp", pidfile);
    }
    log_line(log, "watching containerd pid " + std::to_string(pid));
    const char ok = 1;
    if (::write(ready[1], &ok, 1) != 1) ::_exit(1);
    ::close(ready[1]);

    std::time_t started_at = 0;  // when this program last started containerd
    for (;;) {
        const int pfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
        if (pfd < 0 && errno != ESRCH) {
            log_line(log, std::string("pidfd_open: ") + std::strerror(errno));
            return 1;
        }
        bool exited = pfd < 0;  // ESRCH: already gone
        while (!exited) {
            pollfd fds[2] = {{pfd, POLLIN, 0}, {sfd, POLLIN, 0}};
            if (::poll(fds, 2, -1) < 0) {
                if (errno == EINTR) continue;
                return 1;
            }
            if (fds[1].revents & POLLIN) {
                signalfd_siginfo si{};
                if (::read(sfd, &si, sizeof si) == sizeof si) {
                    if (si.ssi_signo == SIGCHLD) {
                        while (::waitpid(-1, nullptr, WNOHANG) > 0) {
                        }
                    } else {
                        log_line(log, "stopping on signal " + std::to_string(si.ssi_signo) + "; containerd pid " +
                                          std::to_string(pid) + " left running");
                        return 0;
                    }
                }
            }
            if (fds[0].revents & POLLIN) exited = true;
        }
        if (pfd >= 0) ::close(pfd);
        // A containerd that dies right after its start (a broken config) is not started in a
        // tight loop: one second between such starts, as systemd's RestartSec would.
        if (std::time(nullptr) - started_at < 2) {
            log_line(log, "containerd pid " + std::to_string(pid) + " exited within 2 s of its start: waiting 1 s");
            ::sleep(1);
        }
        started_at = std::time(nullptr);
        const int next = start(cmd, containerd_log);
        if (next < 0) {
            log_line(log, "containerd pid " + std::to_string(pid) + " exited; fork failed: " + std::strerror(errno));
            return 1;
        }
        {
            std::ofstream(containerd_pidfile + ".tmp") << next << "\n";
            std::filesystem::rename(containerd_pidfile + ".tmp", containerd_pidfile);
        }
        log_line(log, "containerd pid " + std::to_string(pid) + " exited; restarted as pid " + std::to_string(next));
        pid = next;
    }
}
