#include "support/containerd.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace kgpu::test {

std::string find_containerd() {
    for (const char* dir : {"/usr/bin", "/usr/local/bin", "/usr/sbin"}) {
        std::string p = std::string(dir) + "/containerd";
        if (::access(p.c_str(), X_OK) == 0) return p;
    }
    return {};
}

std::string Containerd::start(const std::string& dir, const Options& o) {
    const std::string binary = find_containerd();
    if (binary.empty()) return "no containerd binary (scripts/setup installs Debian's)";
    std::filesystem::create_directories(dir);
    socket_ = dir + "/containerd.sock";
    // restrict_oom_score_adj: this VM does not let a process lower its OOM score (DESIGN.md facts).
    std::string config = "version = 2\n"
                         "root = \"" + dir + "/root\"\n"
                         "state = \"" + dir + "/state\"\n";
    if (!o.cri) config += "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n";
    config += "[grpc]\n  address = \"" + socket_ + "\"\n"
              "[ttrpc]\n  address = \"" + socket_ + ".ttrpc\"\n";
    if (o.cri)
        config += "[plugins.\"io.containerd.grpc.v1.cri\"]\n"
                  "  restrict_oom_score_adj = true\n"
                  "  disable_apparmor = true\n";
    config += o.extra_config;
    const std::string path = dir + "/config.toml";
    std::ofstream(path) << config;
    process_ = std::make_unique<ChildProcess>(std::vector<std::string>{binary, "--config", path}, o.env);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!std::filesystem::exists(socket_) && std::chrono::steady_clock::now() < deadline && process_->running())
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!std::filesystem::exists(socket_)) return "containerd did not create " + socket_ + ":\n" + process_->err();
    // The socket exists before every service is registered: wait until ctr gets an answer.
    while (std::chrono::steady_clock::now() < deadline) {
        if (ctr({"version"}).exit_code == 0) return {};
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return "containerd does not answer on " + socket_ + ":\n" + process_->err();
}

Containerd::~Containerd() {
    if (process_ && process_->running()) stop();
}

RunResult Containerd::ctr(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {"/usr/bin/ctr", "--address", socket_, "--namespace", "kgpu-test"};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv);
}

int Containerd::stop() {
    if (!process_) return 0;
    process_->signal(SIGTERM);
    return process_->wait(20000);
}

}  // namespace kgpu::test
