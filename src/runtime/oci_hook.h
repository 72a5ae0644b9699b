// `kgpu runtime configure --config-mode=oci-hook`: the OCI hook file (podman/CRI-O hooks.d,
// version 1.0.0) that runs nvidia-container-runtime-hook at prestart, as nvidia-ctk v1.20
// writes it (deprecated there too, kept for the flag's sake).
#pragma once

#include <string>
#include <string_view>

namespace kgpu::runtime {

// The hook's JSON (two-space indentation, final newline): the hook binary `hook_path` with
// args [<basename>, "prestart"], PATH set to the standard directories plus the binary's own,
// run always at stage prestart.
std::string oci_hook_json(std::string_view hook_path);

}  // namespace kgpu::runtime
