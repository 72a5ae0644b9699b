// A fake host for `kgpu doctor --root`: a copy of hosts/healthy/ in a temp dir that a test then
// breaks one way, plus listening unix sockets where a test needs a live kubelet or plugin.
#pragma once

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/unix_socket.h"
#include "deviceplugin/server.h"
#include "support/fake_pod_resources.h"
#include "support/process.h"

namespace kgpu::test {

inline std::string doctor_fixture(const std::string& rel) {
    return std::string(KGPU_SOURCE_DIR) + "/tests/doctor/fixtures/" + rel;
}

class FakeHost {
public:
    explicit FakeHost(bool healthy = true) {
        namespace fs = std::filesystem;
        if (healthy) {
            fs::copy(std::string(KGPU_SOURCE_DIR) + "/tests/doctor/hosts/healthy", dir_.path(),
                     fs::copy_options::recursive);
            for (const auto& e : fs::directory_iterator(fs::path(dir_.path()) / "dev"))
                fs::permissions(e.path(), fs::perms(0666));
        }
    }
    ~FakeHost() {
        for (int fd : fds_) ::close(fd);
    }
    const std::string& root() const { return dir_.path(); }
    std::string path(const std::string& host_path) const { return dir_.path() + host_path; }
    void write(const std::string& host_path, const std::string& content) const { dir_.write(host_path.substr(1), content); }
    void copy_in(const std::string& fixture_rel, const std::string& host_path) const {
        std::filesystem::create_directories(std::filesystem::path(path(host_path)).parent_path());
        std::filesystem::copy_file(doctor_fixture(fixture_rel), path(host_path),
                                   std::filesystem::copy_options::overwrite_existing);
    }
    void remove(const std::string& host_path) const { std::filesystem::remove_all(path(host_path)); }
    // A unix socket at host_path that accepts connections (the backlog holds them) until the
    // FakeHost goes away; listen=false leaves a stale socket file nobody listens on.
    void socket(const std::string& host_path, bool listen = true) {
        std::string p = path(host_path);
        std::filesystem::create_directories(std::filesystem::path(p).parent_path());
        Fd fd = unix_bind(p);
        if (!fd) std::abort();
        if (listen) {
            ::listen(fd.get(), 16);
            fds_.push_back(fd.release());
        }
    }
    // Sockets of a live kubelet and a live device plugin: kubelet.sock accepts connections, the
    // plugin socket is served by kgpu's real device-plugin server and the PodResources socket by a
    // fake kubelet that lists one GPU pod, so the gRPC probes get real answers.
    void live_kubelet() {
        socket("/var/lib/kubelet/device-plugins/kubelet.sock");
        std::filesystem::create_directories(path("/var/lib/kubelet/pod-resources"));
        plugin_ = std::make_unique<deviceplugin::ResourceServer>(
            "nvidia.com/gpu", path("/var/lib/kubelet/device-plugins/nvidia-gpu.sock"), deviceplugin::Handlers{});
        if (!plugin_->start()) std::abort();
        pods_ = std::make_unique<FakePodResources>(path("/var/lib/kubelet/pod-resources/kubelet.sock"));
        if (!pods_->start()) std::abort();
        pods_->add_pod("default", "train-0", "main", "nvidia.com/gpu", {"GPU-0"});
    }

private:
    TempDir dir_;
    std::unique_ptr<deviceplugin::ResourceServer> plugin_;
    std::unique_ptr<FakePodResources> pods_;
    std::vector<int> fds_;
};

}  // namespace kgpu::test
