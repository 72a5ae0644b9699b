// A driver root as NVIDIA's driver installs it, built in a temp dir for the parity tests that
// give nvidia-ctk, nvidia-container-runtime or NVIDIA's device plugin a driver to look at:
//  - libraries as real ELF shared objects with the driver's file names and SONAMEs (built by
//    tests/parity/CMakeLists.txt), libnvidia-ml.so.<version> being the simulator itself, so
//    NVML loaded from the driver root is the simulated node's;
//  - their SONAME links and an ld.so.cache made by the host's `ldconfig -r <root>`;
//  - the driver's binaries, firmware, the persistenced and fabric manager sockets (real unix
//    sockets) and the MPS pipe directory;
//  - /dev nodes made with mknod (nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset, one per
//    GPU of the fixture by its minor, the MIG capability nodes) and proc/driver/nvidia-caps/
//    mig-minors, which NVIDIA reads from /proc/driver (see parity::in_namespace) and kgpu from
//    --proc-root.
// mknod and ldconfig -r need root (CAP_MKNOD, CAP_SYS_CHROOT): make() says why it could not.
#pragma once

#include <string>

#include "support/process.h"

namespace kgpu::parity {

// /proc/driver/nvidia-caps/mig-minors of a node with `gpus` GPUs, numbered as the driver does.
std::string mig_minors(unsigned gpus);

class DriverRoot {
public:
    static constexpr const char* kBuiltVersion = "550.54.15";  // the libraries' as built

    // Builds the root for the simulated node `fixture` (a path to a sim/nodes YAML file).
    // Returns "" on success, else why not (the caller skips or fails).
    std::string make(const std::string& fixture);

    const std::string& path() const { return dir_.path(); }
    std::string proc_driver() const { return dir_.path() + "/proc/driver"; }
    std::string proc() const { return dir_.path() + "/proc"; }
    std::string lib_dir() const { return dir_.path() + "/usr/lib/x86_64-linux-gnu"; }
    const std::string& version() const { return version_; }  // the node's driver version

private:
    kgpu::test::TempDir dir_;
    std::string version_;
};

}  // namespace kgpu::parity
