// `kgpu cdi generate`: a CDI spec (facts/container-runtime-and-cdi.md, schema in
// shared/facts/cdi-schema) for the node's GPUs and MIG devices plus the driver's files.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cdi/naming.h"
#include "common/error.h"
#include "inventory/node.h"

namespace kgpu::cdi {

struct SpecOptions {
    std::string vendor = "nvidia.com";
    std::string device_class = "gpu";
    std::vector<NameStrategy> strategies = {NameStrategy::index, NameStrategy::uuid};
    std::filesystem::path driver_root = "/";
    std::filesystem::path dev_root;          // empty: the driver root (as NVIDIA's tools do)
    std::filesystem::path proc_root = "/proc";
    std::string hook_path = "/usr/bin/nvidia-cdi-hook";
    bool hooks = true;
};

// The spec as ordered JSON (cdiVersion, kind, devices, containerEdits). Devices: each GPU under
// every strategy's name, each MIG device likewise, then "all". cdiVersion is the lowest the
// spec's features allow (0.3.0; 0.5.0 once a name starts with a digit or a node has a hostPath).
// Lost or unreadable GPUs are left out (a warning is logged). Errors: invalid_argument for a bad
// vendor/class/hook path; the MIG minors file unreadable when MIG devices exist.
Result<nlohmann::ordered_json> generate(const inventory::Node& node, const SpecOptions& options);

// The minimum cdiVersion for `spec` (the rules of the CDI spec's versions: 0.4.0 mount type,
// 0.5.0 names starting with a non-letter or node hostPath, 0.6.0 annotations or '.' in the
// class, 0.7.0 additionalGids).
std::string minimum_version(const nlohmann::ordered_json& spec);

// The spec rendered as YAML (block style; strings quoted when YAML would read them as something
// else) or as indented JSON. Both end with a newline.
std::string to_yaml(const nlohmann::ordered_json& spec);
std::string to_json_text(const nlohmann::ordered_json& spec);

}  // namespace kgpu::cdi
