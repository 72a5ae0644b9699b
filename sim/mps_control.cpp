// The simulator's stand-in for NVIDIA's `nvidia-cuda-mps-control` (<build>/sim/nvidia-cuda-mps-control).
//
//   nvidia-cuda-mps-control -d     start the control daemon in the background (returns once it listens)
//   nvidia-cuda-mps-control -f     the same in the foreground
//   echo CMD | nvidia-cuda-mps-control    send each stdin line to the running daemon, print its answers
//
// As the real one, it takes its directories from the environment: CUDA_MPS_PIPE_DIRECTORY (where
// daemon and clients meet; default /tmp/nvidia-mps) and CUDA_MPS_LOG_DIRECTORY (default
// /var/log/nvidia-mps). The daemon appends every command line it receives, exactly as received,
// to $CUDA_MPS_LOG_DIRECTORY/control.log (one line each; DESIGN.md "Fixed interfaces"), keeps the
// defaults it is given and answers the get_default_* queries with them, and exits on `quit`.
// Nothing here talks to a GPU: MPS servers are never started.
//
// Stand-in specifics (the real protocol is NVIDIA's and undocumented): the daemon listens on the
// unix socket $CUDA_MPS_PIPE_DIRECTORY/control and writes its pid to
// $CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid; a client sends one command per
// connection and gets "<status>\n<answer>" back (status 0 ok, 1 refused). A client that finds no
// daemon prints "Cannot find MPS control daemon process" and exits 1; one whose command was
// refused prints the reason on stderr and exits 1. A daemon killed with SIGKILL leaves the socket
// file behind; clients then get "connection refused", as from a dead real daemon, and the next
// `-d` replaces it.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

constexpr const char* kProgram = "nvidia-cuda-mps-control";
constexpr size_t kMaxCommand = 4096;

std::string envOr(const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return v && *v ? v : fallback;
}

std::string pipeDir() { return envOr("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"); }
std::string logDir() { return envOr("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"); }
std::string socketPath() { return pipeDir() + "/control"; }
std::string pidPath() { return pipeDir() + "/" + kProgram + ".pid"; }

// sockaddr_un for `path`; false when the path does not fit (108 bytes on Linux).
bool makeAddress(const std::string& path, sockaddr_un& addr) {
    std::memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path) return false;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    return true;
}

// A connected socket to the daemon, or -1 with errno set.
int connectDaemon() {
    sockaddr_un addr;
    if (!makeAddress(socketPath(), addr)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        int err = errno;
        ::close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

bool writeAll(int fd, const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
        ssize_t n = ::write(fd, s.data() + off, s.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        off += static_cast<size_t>(n);
    }
    return true;
}

std::vector<std::string> tokens(const std::string& line) {
    std::vector<std::string> out;
    std::istringstream is(line);
    for (std::string t; is >> t;) out.push_back(t);
    return out;
}

// ---- the daemon ---------------------------------------------------------------------------------

volatile std::sig_atomic_t g_stop = 0;
void onSignal(int) { g_stop = 1; }

struct Daemon {
    std::optional<double> threadPercentage;              // set_default_active_thread_percentage
    std::map<std::string, std::string> pinnedMemLimits;  // device (index or UUID) -> "<n><unit>"

    struct Answer {
        bool ok = true;
        std::string text;
        bool quit = false;
    };

    static bool isMemLimit(const std::string& v) {
        size_t digits = 0;
        while (digits < v.size() && std::isdigit(static_cast<unsigned char>(v[digits]))) ++digits;
        if (digits == 0 || digits > 15) return false;
        if (digits == v.size()) return true;
        return digits + 1 == v.size() && std::string("KMGTkmgt").find(v.back()) != std::string::npos;
    }

    static std::string percent(double p) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f", p);
        return buf;
    }

    Answer handle(const std::string& line) {
        auto t = tokens(line);
        if (t.empty()) return {false, "Empty command", false};
        const std::string& cmd = t[0];
        auto usage = [&](const char* u) { return Answer{false, std::string("Usage: ") + u, false}; };
        if (cmd == "quit") return {true, "", true};
        if (cmd == "set_default_active_thread_percentage") {
            if (t.size() != 2) return usage("set_default_active_thread_percentage <percentage>");
            char* end = nullptr;
            double p = std::strtod(t[1].c_str(), &end);
            if (end == t[1].c_str() || *end != '\0' || !std::isfinite(p) || p <= 0 || p > 100)
                return {false, "Invalid active thread percentage '" + t[1] + "' (expected a number in (0, 100])", false};
            threadPercentage = p;
            return {true, "", false};
        }
        if (cmd == "get_default_active_thread_percentage") {
            if (t.size() != 1) return usage("get_default_active_thread_percentage");
            return {true, percent(threadPercentage.value_or(100.0)), false};
        }
        if (cmd == "set_default_device_pinned_mem_limit") {
            if (t.size() != 3) return usage("set_default_device_pinned_mem_limit <device> <value>[K|M|G|T]");
            if (!isMemLimit(t[2]))
                return {false, "Invalid pinned memory limit '" + t[2] + "' (expected <n>, <n>K, <n>M, <n>G or <n>T)", false};
            pinnedMemLimits[t[1]] = t[2];
            return {true, "", false};
        }
        if (cmd == "get_default_device_pinned_mem_limit") {
            if (t.size() != 2) return usage("get_default_device_pinned_mem_limit <device>");
            auto it = pinnedMemLimits.find(t[1]);
            return {true, it == pinnedMemLimits.end() ? "0" : it->second, false};
        }
        if (cmd == "get_server_list") return {true, "", false};  // no CUDA client: no server
        return {false, "Unrecognized command '" + cmd + "'", false};
    }
};

// Appends one line to control.log (opened per line: a rotated or re-created log keeps working).
void logCommand(const std::string& line) {
    const std::string path = logDir() + "/control.log";
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    writeAll(fd, line + "\n");
    ::close(fd);
}

// Reads one command line (up to '\n' or EOF) within 2 s; nullopt when the client sent nothing usable.
std::optional<std::string> readCommand(int fd) {
    std::string buf;
    char chunk[512];
    while (buf.size() <= kMaxCommand) {
        pollfd p{fd, POLLIN, 0};
        int r = ::poll(&p, 1, 2000);
        if (r < 0 && errno == EINTR) {
            if (g_stop) return std::nullopt;
            continue;
        }
        if (r <= 0) return std::nullopt;
        ssize_t n = ::read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return std::nullopt;
        if (n == 0) break;
        buf.append(chunk, static_cast<size_t>(n));
        if (buf.find('\n') != std::string::npos) break;
    }
    if (auto nl = buf.find('\n'); nl != std::string::npos) buf.resize(nl);
    if (!buf.empty() && buf.back() == '\r') buf.pop_back();
    if (buf.size() > kMaxCommand || buf.empty()) return std::nullopt;  // empty: a connect-only probe
    return buf;
}

void cleanup() {
    ::unlink(socketPath().c_str());
    ::unlink(pidPath().c_str());
}

int serve(int listenFd) {
    Daemon d;
    while (!g_stop) {
        int c = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR) continue;
            std::perror("nvidia-cuda-mps-control: accept");
            break;
        }
        auto line = readCommand(c);
        if (!line) {
            ::close(c);
            continue;
        }
        logCommand(*line);
        Daemon::Answer a = d.handle(*line);
        writeAll(c, std::string(a.ok ? "0" : "1") + "\n" + a.text);
        ::close(c);
        if (a.quit) break;
    }
    cleanup();
    return 0;
}

bool makeDirs(const std::string& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
        std::cerr << kProgram << ": cannot create " << dir << ": " << ec.message() << "\n";
        return false;
    }
    return true;
}

int startDaemon(bool background) {
    if (!makeDirs(pipeDir()) || !makeDirs(logDir())) return 1;
    if (int fd = connectDaemon(); fd >= 0) {
        ::close(fd);
        std::cerr << "An instance of this daemon is already running\n";
        return 1;
    }
    sockaddr_un addr;
    if (!makeAddress(socketPath(), addr)) {
        std::cerr << kProgram << ": pipe directory path too long: " << pipeDir() << "\n";
        return 1;
    }
    ::unlink(socketPath().c_str());  // left by a daemon that was killed
    int lfd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(lfd, 64) != 0) {
        std::cerr << kProgram << ": cannot listen on " << socketPath() << ": " << std::strerror(errno) << "\n";
        return 1;
    }

    struct sigaction sa {};
    sa.sa_handler = onSignal;  // no SA_RESTART: accept returns EINTR and the loop ends
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGINT, &sa, nullptr);
    ::signal(SIGPIPE, SIG_IGN);

    if (background) {
        int ready[2];
        if (::pipe2(ready, O_CLOEXEC) != 0) return 1;
        pid_t pid = ::fork();
        if (pid < 0) {
            std::perror("nvidia-cuda-mps-control: fork");
            return 1;
        }
        if (pid > 0) {
            // The parent returns once the daemon has written its pid file: by then `-d` is done
            // as far as any caller can tell, and clients can connect (the socket listens already).
            ::close(ready[1]);
            char b = 0;
            while (::read(ready[0], &b, 1) < 0 && errno == EINTR) {
            }
            ::close(ready[0]);
            return b == 1 ? 0 : 1;
        }
        ::close(ready[0]);
        ::setsid();
        if (::chdir("/") != 0) {
        }
        int null = ::open("/dev/null", O_RDWR);
        if (null >= 0) {
            ::dup2(null, 0);
            ::dup2(null, 1);
            ::dup2(null, 2);
            if (null > 2) ::close(null);
        }
        // Inherited descriptors (a caller's capture pipes) must not stay open in the daemon, or
        // the caller would wait for their EOF forever.
        for (int fd = 3; fd < 1024; ++fd)
            if (fd != lfd && fd != ready[1]) ::close(fd);
        FILE* f = std::fopen(pidPath().c_str(), "w");
        if (f) {
            std::fprintf(f, "%d\n", static_cast<int>(::getpid()));
            std::fclose(f);
        }
        char b = 1;
        writeAll(ready[1], std::string(1, b));
        ::close(ready[1]);
    } else {
        FILE* f = std::fopen(pidPath().c_str(), "w");
        if (f) {
            std::fprintf(f, "%d\n", static_cast<int>(::getpid()));
            std::fclose(f);
        }
    }
    return serve(lfd);
}

// ---- the client ---------------------------------------------------------------------------------

int client() {
    ::signal(SIGPIPE, SIG_IGN);
    int rc = 0;
    std::string line;
    while (std::getline(std::cin, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (tokens(line).empty()) continue;
        int fd = connectDaemon();
        if (fd < 0) {
            std::cout << "Cannot find MPS control daemon process" << std::endl;
            return 1;
        }
        std::string reply;
        if (writeAll(fd, line + "\n")) {
            ::shutdown(fd, SHUT_WR);
            char buf[4096];
            for (;;) {
                ssize_t n = ::read(fd, buf, sizeof buf);
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) break;
                reply.append(buf, static_cast<size_t>(n));
            }
        }
        ::close(fd);
        auto nl = reply.find('\n');
        if (nl == std::string::npos) {
            std::cerr << kProgram << ": the daemon closed the connection without an answer\n";
            return 1;
        }
        const std::string text = reply.substr(nl + 1);
        if (reply.compare(0, nl, "0") == 0) {
            if (!text.empty()) std::cout << text << std::endl;
        } else {
            std::cerr << text << std::endl;
            rc = 1;
        }
    }
    return rc;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 1) return client();
    const std::string a = argv[1];
    if (argc == 2 && a == "-d") return startDaemon(true);
    if (argc == 2 && a == "-f") return startDaemon(false);
    if (argc == 2 && (a == "-h" || a == "--help")) {
        std::cout << "Usage: " << kProgram << " [-d | -f]\n"
                  << "  -d  start the MPS control daemon in the background\n"
                  << "  -f  start it in the foreground\n"
                  << "  without options: send the commands read from stdin to the running daemon\n"
                  << "(the kgpu simulator's stand-in: see sim/README.md)\n";
        return 0;
    }
    std::cerr << "Usage: " << kProgram << " [-d | -f]\n";
    return 1;
}
