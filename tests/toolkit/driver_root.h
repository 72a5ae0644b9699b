// A fake driver root in a temp dir for the toolkit's tests: driver libraries and binaries as
// empty files, and device nodes as symlinks to real character devices (/dev/null and friends),
// so their major/minor numbers are real without mknod (no root needed).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "support/process.h"

namespace kgpu::test {

struct FakeDriverRoot {
    TempDir dir;
    FakeDriverRoot() {
        for (const char* lib : {"libcuda.so.550.54.15", "libnvidia-ml.so.550.54.15", "libnvidia-ptxjitcompiler.so.550.54.15",
                                "libnvidia-encode.so.550.54.15", "libGLX_nvidia.so.550.54.15", "libnvidia-future.so.550.54.15"})
            file("usr/lib64/" + std::string(lib));
        for (const char* bin : {"nvidia-smi", "nvidia-cuda-mps-control"}) {
            file("usr/bin/" + std::string(bin));
            std::filesystem::permissions(dir.path() + "/usr/bin/" + bin, std::filesystem::perms(0755));
        }
        std::filesystem::create_directories(dir.path() + "/dev/nvidia-caps");
        link("dev/nvidiactl", "/dev/null");
        link("dev/nvidia-uvm", "/dev/zero");
        for (unsigned i = 0; i < 4; ++i) link(fmt::format("dev/nvidia{}", i), "/dev/full");
        // MIG devices of toolkit_node(): GPU 1 (minor 1), GI 1 and 2, CI 0.
        dir.write("proc/driver/nvidia-caps/mig-minors",
                  "config 1\nmonitor 2\ngpu1/gi1/access 147\ngpu1/gi1/ci0/access 148\ngpu1/gi2/access 156\n"
                  "gpu1/gi2/ci0/access 157\n");
        for (unsigned c : {147u, 148u, 156u, 157u}) link(fmt::format("dev/nvidia-caps/nvidia-cap{}", c), "/dev/urandom");
    }
    std::string path() const { return dir.path(); }
    void file(const std::string& rel) { dir.write(rel, ""); }
    void link(const std::string& rel, const std::string& target) {
        std::filesystem::create_directories(std::filesystem::path(dir.path() + "/" + rel).parent_path());
        std::filesystem::create_symlink(target, dir.path() + "/" + rel);
    }
};

}  // namespace kgpu::test
