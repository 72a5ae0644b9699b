#include "support/containerd.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "support/files.h"

namespace kgpu::test {
namespace {

std::string find_program(const std::string& name) {
    for (const char* dir : {"/usr/bin", "/usr/local/bin", "/usr/sbin"}) {
        std::string p = std::string(dir) + "/" + name;
        if (::access(p.c_str(), X_OK) == 0) return p;
    }
    return {};
}

}  // namespace

std::string TestContainerd::unavailable_reason() {
    if (find_program("containerd").empty() || find_program("ctr").empty())
        return "no containerd/ctr binary (scripts/setup --all installs Debian's containerd)";
    if (::geteuid() != 0) return "containerd needs root";
    return {};
}

TestContainerd::TestContainerd(const std::string& dir, std::chrono::seconds timeout)
    : TestContainerd(dir, Options{{}, true, timeout}) {}

TestContainerd::TestContainerd(const std::string& dir, const Options& o)
    : dir_(dir), socket_(dir + "/containerd.sock"), logger_(dir + "/ctr-run-logger.sh") {
    const auto timeout = o.timeout;
    std::filesystem::create_directories(dir);
    // ctr_run's logging binary. The shim starts it with the container's stdout on fd 3, its stderr
    // on fd 4 and a pipe on fd 5 to close once ready; "?d=DIR" arrives as the arguments "d DIR".
    // At the delete the shim closes the output pipes, sends SIGTERM and waits for the logger to
    // exit: the copies end at EOF, so the shell ignores SIGTERM and waits for them.
    std::ofstream(logger_) << "#!/bin/sh\n"
                              "trap '' TERM\n"
                              "cat <&3 >\"$2/stdout\" 5>&- 4<&- &\n"
                              "cat <&4 >\"$2/stderr\" 5>&- 3<&- &\n"
                              "exec 5>&- 3<&- 4<&-\n"
                              "wait\n";
    std::filesystem::permissions(logger_, std::filesystem::perms(0755));
    // restrict_oom_score_adj: this VM does not let a process lower its OOM score (DESIGN.md facts).
    const std::string config = dir + "/containerd.toml";
    std::ofstream(config) << "version = 2\n"
                          << "root = \"" << dir << "/root\"\n"
                          << "state = \"" << dir << "/state\"\n"
                          << (o.cri ? "" : "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n")
                          << "[grpc]\n  address = \"" << socket_ << "\"\n"
                          << "[ttrpc]\n  address = \"" << socket_ << ".ttrpc\"\n"
                          << "[plugins.\"io.containerd.grpc.v1.cri\"]\n"
                          << "  restrict_oom_score_adj = true\n"
                          << "  disable_apparmor = true\n";
    process_ = std::make_unique<ChildProcess>(std::vector<std::string>{find_program("containerd"), "--config", config}, o.env);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!std::filesystem::exists(socket_) && std::chrono::steady_clock::now() < deadline && process_->running())
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    started_ = std::filesystem::exists(socket_);
}

TestContainerd::~TestContainerd() {
    if (process_ && process_->running()) stop();
}

std::string TestContainerd::error() const {
    return "containerd did not create " + socket_ + ":\n" + process_->err();
}

RunResult TestContainerd::ctr(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {find_program("ctr"), "--address", socket_, "--namespace", "kgpu-test"};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv);
}

RunResult TestContainerd::ctr_run(const std::vector<std::string>& args) {
    const std::string out = dir_ + "/ctr-run-" + std::to_string(++runs_);
    std::filesystem::create_directories(out);
    std::vector<std::string> argv = {"run", "--log-uri", "binary://" + logger_ + "?d=" + out};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult r = ctr(argv);
    r.err = slurp(out + "/stderr") + r.err;
    r.out = slurp(out + "/stdout") + r.out;
    return r;
}

int TestContainerd::stop() {
    process_->signal(SIGTERM);
    return process_->wait(20000);
}

}  // namespace kgpu::test
