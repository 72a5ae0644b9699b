#include "parity/driver_root.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "common/unix_socket.h"

namespace fs = std::filesystem;

namespace kgpu::parity {

namespace {

constexpr unsigned kCapsMajor = 511;  // dynamic majors as a node has them
constexpr unsigned kUvmMajor = 508;

// The minor of a MIG capability as /proc/driver/nvidia-caps/mig-minors numbers them: 135 per
// GPU (15 GPU instances, each an access node and 8 compute-instance nodes) after config (1) and
// monitor (2).
unsigned gi_minor(unsigned gpu, unsigned gi) { return 3 + gpu * 135 + gi * 9; }
unsigned ci_minor(unsigned gpu, unsigned gi, unsigned ci) { return gi_minor(gpu, gi) + 1 + ci; }


std::string make_socket(const std::string& path) {
    fs::create_directories(fs::path(path).parent_path());
    return kgpu::unix_bind(path) ? "" : "bind " + path + ": " + std::strerror(errno);
}

}  // namespace

std::string DriverRoot::make(const std::string& fixture) {
    if (::geteuid() != 0) return "building a driver root needs root (mknod for its /dev nodes, ldconfig -r for its ld.so.cache)";
    const std::string root = dir_.path();
    // Merged /usr, as Debian 12 and current distributions install it.
    fs::create_directories(lib_dir());
    fs::create_directories(root + "/usr/bin");
    fs::create_symlink("usr/lib", root + "/lib");
    fs::create_symlink("usr/bin", root + "/bin");
    // The libraries are built as driver 550.54.15's; a node with another driver gets them under
    // its version (the SONAME links are the same), except those whose SONAME is the full version.
    const YAML::Node node = YAML::LoadFile(fixture);
    version_ = node["driver_version"].as<std::string>();
    const std::string built = std::string(".so.") + kBuiltVersion;
    for (const auto& e : fs::directory_iterator(KGPU_PARITY_FAKE_DRIVER_DIR)) {
        const std::string name = e.path().filename().string();
        if (!e.is_regular_file() || e.is_symlink() || !name.ends_with(built)) continue;
        const std::string stem = name.substr(0, name.size() - built.size());  // libcuda
        if (version_ != kBuiltVersion && std::string(KGPU_PARITY_FULL_VERSION_SONAMES).find(":" + stem + ":") != std::string::npos)
            continue;
        fs::copy_file(e.path(), lib_dir() + "/" + stem + ".so." + version_);
    }
    fs::copy_file(KGPU_SIM_LIBRARY, lib_dir() + "/libnvidia-ml.so." + version_);
    dir_.write("etc/ld.so.conf", "/usr/lib/x86_64-linux-gnu\n");
    auto ld = kgpu::test::run_process({"/sbin/ldconfig", "-r", root});
    if (ld.exit_code != 0) return "ldconfig -r " + root + " failed: " + ld.err;
    if (!fs::exists(root + "/etc/ld.so.cache")) return "ldconfig -r " + root + " wrote no etc/ld.so.cache";

    for (const char* b : {"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control",
                          "nvidia-cuda-mps-server"}) {
        const std::string p = dir_.write(std::string("usr/bin/") + b, "#!/bin/sh\nexit 0\n");
        ::chmod(p.c_str(), 0755);
    }
    for (const char* fw : {"gsp_ga10x.bin", "gsp_tu10x.bin"}) dir_.write(fmt::format("usr/lib/firmware/nvidia/{}/{}", version_, fw), "fw");
    for (const char* s : {"/run/nvidia-persistenced/socket", "/run/nvidia-fabricmanager/socket"})
        if (auto err = make_socket(root + s); !err.empty()) return err;
    fs::create_directories(root + "/tmp/nvidia-mps");

    auto mknod = [&](const std::string& rel, unsigned major, unsigned minor) -> std::string {
        const std::string p = root + rel;
        fs::create_directories(fs::path(p).parent_path());
        if (::mknod(p.c_str(), S_IFCHR | 0666, makedev(major, minor)) != 0) return "mknod " + p + ": " + std::strerror(errno);
        ::chmod(p.c_str(), 0666);
        return "";
    };
    std::string err;
    for (const auto& [rel, major, minor] : std::vector<std::tuple<std::string, unsigned, unsigned>>{
             {"/dev/nvidiactl", 195, 255}, {"/dev/nvidia-modeset", 195, 254}, {"/dev/nvidia-uvm", kUvmMajor, 0},
             {"/dev/nvidia-uvm-tools", kUvmMajor, 1}, {"/dev/nvidia-caps/nvidia-cap1", kCapsMajor, 1},
             {"/dev/nvidia-caps/nvidia-cap2", kCapsMajor, 2}})
        if (err = mknod(rel, major, minor); !err.empty()) return err;
    unsigned gpus = 0;
    for (const auto& g : node["gpus"]) {
        const unsigned minor = g["minor"].as<unsigned>();
        gpus = std::max(gpus, minor + 1);
        if (err = mknod(fmt::format("/dev/nvidia{}", minor), 195, minor); !err.empty()) return err;
        if (!g["mig"] || !g["mig"]["devices"]) continue;
        for (const auto& m : g["mig"]["devices"]) {
            const unsigned gi = m["gpu_instance_id"].as<unsigned>();
            const unsigned ci = m["compute_instance_id"] ? m["compute_instance_id"].as<unsigned>() : 0;
            if (err = mknod(fmt::format("/dev/nvidia-caps/nvidia-cap{}", gi_minor(minor, gi)), kCapsMajor, gi_minor(minor, gi)); !err.empty())
                return err;
            if (err = mknod(fmt::format("/dev/nvidia-caps/nvidia-cap{}", ci_minor(minor, gi, ci)), kCapsMajor,
                            ci_minor(minor, gi, ci));
                !err.empty())
                return err;
        }
    }
    dir_.write("proc/driver/nvidia-caps/mig-minors", mig_minors(std::max(gpus, 1u)));
    dir_.write("proc/driver/nvidia/version",
               fmt::format("NVRM version: NVIDIA UNIX x86_64 Kernel Module  {}  Thu Feb 22 01:44:30 UTC 2024\n", version_));
    dir_.write("proc/driver/nvidia/params", "ModifyDeviceFiles: 1\n");
    return "";
}

std::string mig_minors(unsigned gpus) {
    std::string s = "config 1\nmonitor 2\n";
    for (unsigned g = 0; g < gpus; ++g)
        for (unsigned i = 0; i < 15; ++i) {
            s += fmt::format("gpu{}/gi{}/access {}\n", g, i, gi_minor(g, i));
            for (unsigned c = 0; c < 8; ++c) s += fmt::format("gpu{}/gi{}/ci{}/access {}\n", g, i, c, ci_minor(g, i, c));
        }
    return s;
}

}  // namespace kgpu::parity
