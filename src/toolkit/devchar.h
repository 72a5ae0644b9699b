// /dev/char/<major>:<minor> links for the NVIDIA device nodes. systemd resolves device cgroup
// rules through /dev/char; without these links a `systemctl daemon-reload` rewrites a running
// container's device rules without the GPUs, and NVML in it fails with "Failed to initialize
// NVML: Unknown Error" (NVIDIA's `nvidia-ctk system create-dev-char-symlinks`; the GPU Operator's
// toolkit creates them). `kgpu runtime install` creates them; `kgpu doctor` checks them.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"

namespace kgpu::toolkit {

struct DevCharLink {
    std::string node;    // host path of the device node, "/dev/nvidia0" (under the dev root)
    std::string link;    // host path of the link, "/dev/char/195:0"
    unsigned major = 0, minor = 0;
    // What is there now: missing, right (resolves to the node's device number), or wrong.
    enum class State { missing, ok, wrong } state = State::missing;
};

// The NVIDIA character devices under <root><dev_root>/dev (nvidia*, nvidia-caps/*) and the state of
// their links under <root>/dev/char. Paths in the result are host paths (without `root`).
std::vector<DevCharLink> nvidia_dev_char_links(const std::filesystem::path& root, const std::filesystem::path& dev_root = "/");

// Creates the missing links (link -> node, absolute, as NVIDIA's tool does); a link that exists
// and points elsewhere is left alone. Returns the links created. Errors name the path.
Result<std::vector<std::string>> create_dev_char_links(const std::filesystem::path& root, const std::filesystem::path& dev_root = "/");

}  // namespace kgpu::toolkit
