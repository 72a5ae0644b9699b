// The createContainer hooks nvidia-ctk v1.20's CDI specs use (`nvidia-cdi-hook <name>`), as
// `kgpu hook <name>`: each reads the OCI state from stdin (or --container-spec) like NVIDIA's,
// finds the container's root from <bundle>/config.json, and works inside that root only
// (toolkit/root.h). Facts from cmd/nvidia-cdi-hook of nvidia-container-toolkit v1.20.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace kgpu::toolkit {

// The container's root directory for an OCI state document ({"bundle": ..., ...}): root.path of
// <bundle>/config.json, joined to the bundle when relative. Errors name the file or field.
Result<std::string> container_root_from_state(std::string_view state_json);

// Reads the state from `container_spec` ("" or "-": stdin) and returns the root.
Result<std::string> load_container_root(const std::string& container_spec);

// update-ldcache: adds `folders` to the container's linker configuration
// (/etc/ld.so.conf.d/00-kgpu-<random>.conf, only those not configured already; the image's
// system directories in zz-kgpu-system.conf; on Alpine, what musl's .path file does not list
// yet) and runs the host's
// ldconfig inside the container's root (new mount, PID, UTS and IPC namespaces, a fresh procfs,
// pivot_root; ldconfig executed from a descriptor opened on the host, never a path in the image).
struct LdcacheOptions {
    std::vector<std::string> folders;
    std::string ldconfig_path = "/sbin/ldconfig";  // host path ("@" prefix accepted); <path>.real wins when present
};
Status update_ldcache(const std::string& root, const LdcacheOptions& options);

// create-symlinks: each "target::link" becomes a symlink at `link` in the root (parents created,
// an existing link to the same target kept, anything else replaced atomically).
Status create_symlinks(const std::string& root, const std::vector<std::string>& links);

// enable-cuda-compat: when the image has CUDA forward-compatibility libraries
// (<compat_dir>/libcuda.so.<version>) newer than the host driver, adds their directory to
// /etc/ld.so.conf.d/00-compat-<random>.conf so update-ldcache (which runs after it) puts them
// first. The decision reads the library's ELF note .note.cuda.fwd_compatibility when present
// (which host driver branches it supports), else compares the driver major versions.
struct CudaCompatOptions {
    std::string host_driver_version;
    std::string host_cuda_version;
    std::string compat_dir = "/usr/local/cuda/compat";
};
Status enable_cuda_compat(const std::string& root, const CudaCompatOptions& options);

// Whether a CUDA compat library `file_name` ("libcuda.so.570.86.10"), with ELF note JSON
// `note` (nullopt: none), should be used on a host with `driver`/`cuda` versions ("" = unknown).
bool use_cuda_compat(const std::string& file_name, const std::optional<std::string>& note, const std::string& driver,
                     const std::string& cuda);
// The JSON text of the .note.cuda.fwd_compatibility note of an ELF file's bytes (nullopt: none).
std::optional<std::string> cuda_compat_note(std::string_view elf);

// disable-device-node-modification: when the host's /proc/driver/nvidia/params (`params_path`)
// says "ModifyDeviceFiles: 1", bind-mounts a copy saying 0 over the container's
// /proc/driver/nvidia/params (from a small tmpfs under /run), so NVML in the container never
// creates device nodes. Nothing to do when the file is absent or already says 0.
Status disable_device_node_modification(const std::string& root, const std::string& params_path = "/proc/driver/nvidia/params");
// The params text with ModifyDeviceFiles set to 0, or nullopt when nothing needs changing.
std::optional<std::string> params_without_device_modification(std::string_view params);

// update-application-profile: writes /etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf
// restricting EGL/Vulkan to the GPUs whose /dev/nvidia<minor> nodes the container has.
Status update_application_profile(const std::string& root);

// chmod: sets `mode` on each path in the root (permission errors ignored, as NVIDIA does).
Status chmod_paths(const std::string& root, const std::vector<std::string>& paths, unsigned mode);

}  // namespace kgpu::toolkit
