// `kgpu cdi generate`: a CDI spec (facts/container-runtime-and-cdi.md, schema in
// shared/facts/cdi-schema) with the content nvidia-ctk v1.20 generates for the same node and
// driver root (pkg/nvcdi): devices per GPU and MIG device under each naming strategy plus
// `all`; spec-wide control nodes, driver libraries (standard directories, then the root's
// ld.so.cache), graphics files (cdi/graphics.h), IPC sockets, firmware and binaries as
// read-only bind mounts; the graphics links' create-symlinks hook, then the five createContainer hooks (create-symlinks with the SONAME links,
// enable-cuda-compat, update-ldcache, disable-device-node-modification,
// update-application-profile); NVIDIA_CTK_LIBCUDA_DIR and NVIDIA_VISIBLE_DEVICES=void.
// kgpu adds `type: c` to device nodes that are character devices (the schema allows it).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cdi/hooks.h"
#include "cdi/naming.h"
#include "common/error.h"
#include "inventory/node.h"

namespace kgpu::cdi {

enum class Mode {
    nvml,  // GPUs and MIG devices (nvidia-ctk's nvml mode, what auto means on a GPU node)
    imex,  // IMEX channels /dev/nvidia-caps-imex-channels/channel<N>
};

struct SpecOptions {
    std::string vendor = "nvidia.com";
    std::string device_class = "gpu";
    std::vector<NameStrategy> strategies = {NameStrategy::index, NameStrategy::uuid};
    std::filesystem::path driver_root = "/";
    std::filesystem::path dev_root;          // empty: the driver root (as NVIDIA's tools do)
    std::filesystem::path proc_root = "/proc";
    std::filesystem::path sysfs_root = "/sys";
    HookOptions hooks;
    std::vector<std::string> library_search_paths;  // host directories; empty: the standard ones and ld.so.cache
    std::vector<std::string> config_search_paths;   // host directories; empty: /etc, $XDG_DATA_DIRS under the root
    // "all", or GPU indexes / UUIDs, MIG "i:j" / UUIDs, or "none" (a placeholder device).
    std::vector<std::string> device_ids = {"all"};
    bool all_device = true;
    // Without driver libraries the spec would give containers device nodes but no CUDA: an
    // error unless this is set.
    bool allow_missing_libraries = false;
    std::string kernel_release;              // firmware search path; empty: uname -r
    Mode mode = Mode::nvml;
};

// The spec as ordered JSON (cdiVersion, kind, devices sorted by name, containerEdits).
// cdiVersion is the lowest the spec's features allow. Lost GPUs are left out (a warning is
// logged); so are GPUs in MIG mode (their MIG devices are listed instead), unless named by
// device_ids. Errors: invalid_argument for a bad vendor/class/hook path; not_found for a device
// ID naming nothing, for no driver libraries (the message names the directories searched), no
// devices, or no IMEX channels; the MIG minors file unreadable when MIG devices exist.
Result<nlohmann::ordered_json> generate(const inventory::Node& node, const SpecOptions& options);

// The minimum cdiVersion for `spec` (the rules of the CDI spec's versions: 0.4.0 mount type,
// 0.5.0 names starting with a non-letter or node hostPath, 0.6.0 annotations or '.' in the
// class, 0.7.0 additionalGids).
std::string minimum_version(const nlohmann::ordered_json& spec);

// The spec rendered as YAML (block style; strings quoted when YAML would read them as something
// else) or as indented JSON. Both end with a newline. JSON cannot hold a string that is not
// UTF-8 (a host path): to_json_text then fails with invalid_argument.
std::string to_yaml(const nlohmann::ordered_json& spec);
Result<std::string> to_json_text(const nlohmann::ordered_json& spec);

// What a spec's driver libraries say about the loaded driver: the mounts of versioned driver
// libraries ("lib*.so.<x.y[.z]>", but the EGL GBM/Wayland libraries, versioned on their own)
// whose version is not `driver_version`, and those whose host file is gone. A spec generated before a driver upgrade lists the old ones, and every
// container that uses it fails to start.
struct LibraryMismatch {
    std::vector<std::string> other_version;  // container paths
    std::vector<std::string> missing;        // host paths
    std::vector<std::string> versions;       // the versions the spec names, sorted, unique
};
// Host paths are looked up under `host_root` (doctor's --root).
LibraryMismatch check_libraries(const nlohmann::json& spec, const std::string& driver_version,
                                const std::filesystem::path& host_root = "/");

// A spec file's content, JSON or YAML. Errors: parse naming `source`.
Result<nlohmann::json> parse_spec(std::string_view text, std::string_view source);

}  // namespace kgpu::cdi
