// Adds the NVIDIA runtime to Docker's daemon.json as nvidia-ctk v1.20 does
// (pkg/config/engine/docker): runtimes.<name> = {"path": <runtime path>, "args": []} (an existing
// entry of that name is replaced), "default-runtime" with --set-as-default (left alone
// otherwise), "features": {"cdi": true} with CDI. Every other key is kept, in its order. Docker
// reads no drop-in files, so the file is edited in place.
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"
#include "runtime/containerd.h"

namespace kgpu::runtime {

struct DockerOptions {
    std::string runtime_name = "nvidia";
    // Docker looks a relative path up in its PATH (nvidia-ctk's default for Docker).
    std::string runtime_path = "nvidia-container-runtime";
    bool set_as_default = false;
    bool enable_cdi = false;
};

// `text` (the content of `source`; empty = a new file) with the runtime added, indented like
// the original (4 spaces for a new file). An unchanged config comes back as the same text.
// Errors: parse naming source:line:column when the text is not JSON; invalid_argument when it
// is not an object, or runtimes / features are not objects.
Result<Edited> configure_docker(std::string_view text, std::string_view source, const DockerOptions& options);

}  // namespace kgpu::runtime
