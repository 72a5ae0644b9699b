#include "support/process.h"
#include "support/files.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>

namespace kgpu::test {
namespace {

using kgpu::test::slurp;

}  // namespace

RunResult run_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
    ChildProcess child(argv, env);
    RunResult r;
    r.exit_code = child.wait(10 * 60 * 1000);
    r.out = child.out();
    r.err = child.err();
    return r;
}

std::vector<std::string> under_profiler(std::vector<std::string> argv) {
    const char* profiler = std::getenv("KGPU_BENCH_PROFILER");
    if (!profiler || !*profiler) return argv;
    std::vector<std::string> words;
    std::istringstream in(profiler);
    for (std::string w; in >> w;) words.push_back(w);
    words.insert(words.end(), argv.begin(), argv.end());
    return words;
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kgpu-child-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    out_path_ = dir_ + "/stdout";
    err_path_ = dir_ + "/stderr";
    // Everything the child needs is made before fork(): a test process runs threads (gRPC's, the
    // fakes'), so between fork and exec the child only makes system calls.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
        const std::string_view kv(*e);
        if (!env.contains(std::string(kv.substr(0, kv.find('='))))) env_strings.emplace_back(kv);
    }
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> args, envp;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
        // A test binary killed (a ctest timeout, a crash, ^C) takes the programs it started with
        // it, instead of leaving them serving sockets in /tmp. Children are started from the
        // test's main thread, whose end is the process's.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(126);
        const int out = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        const int err = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        const int in = ::open("/dev/null", O_RDONLY);
        if (out < 0 || err < 0 || in < 0) ::_exit(126);
        ::dup2(in, 0);
        ::dup2(out, 1);
        ::dup2(err, 2);
        ::execve(args[0], args.data(), envp.data());
        ::_exit(127);
    }
}

ChildProcess::~ChildProcess() {
    if (running()) {
        ::kill(pid_, SIGKILL);
        wait(5000);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
}

void ChildProcess::signal(int sig) const { ::kill(pid_, sig); }

bool ChildProcess::running() {
    if (status_ >= 0) return false;
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return false;
    }
    return r == 0;
}

int ChildProcess::wait(int timeout_ms) {
    if (!running()) return status_;
    // A pidfd turns readable when the child exits: the wait ends then, not at the next 10 ms step
    // (run_process() waits this way for every short command the tests run).
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    int code = -1;
    while (true) {
        if (!running()) {
            code = status_;
            break;
        }
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
        if (left < 0) break;
        if (fd >= 0) {
            pollfd p{fd, POLLIN, 0};
            ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 100)) + 1);  // and a look every 100 ms
        } else {
            ::usleep(10 * 1000);  // no pidfd (kernel before 5.3): poll
        }
    }
    if (fd >= 0) ::close(fd);
    return code;
}

std::string ChildProcess::out() const { return slurp(out_path_); }
std::string ChildProcess::err() const { return slurp(err_path_); }

TempDir::TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kgpu-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
}

TempDir::~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
}

std::string TempDir::write(const std::string& name, const std::string& content) const {
    std::filesystem::path p = std::filesystem::path(path_) / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << content;
    return p.string();
}

int wait_for_ready_port(ChildProcess& proc, const std::string& ready_file, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        // Written atomically: there means whole.
        std::ifstream in(ready_file);
        std::string line;
        if (in && std::getline(in, line)) {
            const auto colon = line.rfind(':');
            const int port = colon == std::string::npos ? 0 : std::atoi(line.c_str() + colon + 1);
            if (port <= 0 || port > 65535) throw std::runtime_error("ready file " + ready_file + ": not host:port: " + line);
            return port;
        }
        if (!proc.running() || std::chrono::steady_clock::now() > deadline) return 0;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

int wait_for_listening_port(ChildProcess& proc, std::chrono::milliseconds timeout) {
    const std::string proc_dir = "/proc/" + std::to_string(proc.pid());
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        std::set<std::string> sockets;  // inodes of the child's sockets
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(proc_dir + "/fd", ec)) {
            const std::string target = std::filesystem::read_symlink(e.path(), ec).string();
            if (!ec && target.starts_with("socket:[") && target.ends_with("]"))
                sockets.insert(target.substr(8, target.size() - 9));
        }
        // "sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...", hex
        // address:port; st 0A is LISTEN.
        std::set<int> ports;
        std::ifstream tcp(proc_dir + "/net/tcp");
        std::string line;
        std::getline(tcp, line);
        while (std::getline(tcp, line)) {
            std::istringstream fields(line);
            std::string sl, local, remote, state, queues, timer, retransmits, uid, to, inode;
            if (!(fields >> sl >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> to >> inode)) continue;
            const auto colon = local.find(':');
            if (state == "0A" && sockets.contains(inode) && colon != std::string::npos)
                ports.insert(std::stoi(local.substr(colon + 1), nullptr, 16));
        }
        if (ports.size() > 1) throw std::runtime_error(proc_dir + " listens on more than one TCP port");
        if (ports.size() == 1) return *ports.begin();
        if (!proc.running() || std::chrono::steady_clock::now() > deadline) return 0;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

long proc_status_kib(int pid, std::string_view key) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line))
        if (line.starts_with(key)) return std::stol(line.substr(key.size()));
    return -1;
}

double proc_cpu_seconds(int pid) {
    std::error_code ec;
    double total = 0;
    bool any = false;
    for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
        std::ifstream in(task.path() / "schedstat");
        long long ns = 0;
        if (in >> ns) {
            total += static_cast<double>(ns) / 1e9;
            any = true;
        }
    }
    return any ? total : -1;
}

}  // namespace kgpu::test
