// `kgpu container-runtime` (also run as `kgpu-container-runtime`): an OCI runtime wrapper with
// runc's command line. For `create` and `run` it reads <bundle>/config.json, works out the devices
// the container asks for (toolkit/request.h), checks the image's NVIDIA_REQUIRE_* constraints,
// applies the same edits `kgpu cdi generate` would produce for those devices and writes the spec
// back atomically; then it execs the low-level runtime with the argv unchanged. Every other
// command goes straight through. A container that asks for no GPU is not touched.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "inventory/node.h"
#include "toolkit/config.h"

namespace kgpu::toolkit {

// runc's command line, as far as the wrapper needs it.
struct RuncArgs {
    std::string command;     // the first argument that is neither a global flag nor its value
    bool modifies = false;   // create or run: the spec is edited
    std::string bundle;      // --bundle/-b (any position, as NVIDIA reads it); "" = the working directory
    std::string log_file;    // runc's global --log
    std::string log_format;  // runc's global --log-format
    bool version = false;    // --version/-v before any command
};
RuncArgs parse_runc_args(const std::vector<std::string>& args);

// Where the node's inventory comes from (NVML in the binary; a fixed Node in unit tests).
class NodeSource {
public:
    virtual ~NodeSource() = default;
    virtual Result<inventory::Node> node() = 0;
    // NVML's brand of the GPU, lower case ("tesla", "nvidia", ...), for brand= requirements.
    virtual Result<std::string> brand(const std::string& uuid) = 0;
    // Where the last node() came from, for the runtime's log ("NVML", "cache", ...).
    virtual std::string how() const { return "NVML"; }
    // When node() answered from a cache: asks NVML now (node() answers that from then on) and
    // says true; false when there is nothing fresher to ask.
    virtual bool refresh() { return false; }
};

// NVML through the config's nvml-library / driver-root; opened on first use.
std::unique_ptr<NodeSource> nvml_node_source(const RuntimeConfig& config);

struct ModifyOptions {
    std::string hook_path;   // resolved: absolute
    // When set, a container that asks for GPUs fails with this message before NVML is opened
    // (the config `kgpu runtime install` recorded is missing: its security settings are unknown,
    // so `config` should then accept every way of asking). Containers without a GPU run.
    std::string refuse_gpus = {};
    // The hooks' binary is kgpu itself: the createContainer hooks go into the spec as one
    // `chain` hook (cdi::chain_hooks), one exec per container start instead of one per step.
    bool chain_hooks = false;
};

struct Modified {
    std::string text;                 // the new config.json
    std::string summary;              // one line for the log: what was injected and why
    double nvml_ms = 0, edit_ms = 0;  // time spent on the inventory (NVML) and on the edit
};

// The decision and the edit, on config.json's text. First, for every container, NVIDIA's legacy
// prestart hook is removed (remove_legacy_hooks). nullopt: the container asks for no GPU and had
// no such hook (the spec stays untouched); `log` receives the notes (ignored requests, CDI kinds
// left to containerd). Errors: the spec is malformed or nested too deep, a requested device does
// not exist, NVML fails, an image requirement is unmet (Code::not_supported, message from
// explain()), options.refuse_gpus for a container that asks for GPUs (Code::not_found).
Result<std::optional<Modified>> modify_spec(std::string_view config_json, const RuntimeConfig& config,
                                            const ModifyOptions& options, NodeSource& nodes,
                                            std::vector<std::string>& log);

// The low-level runtime to exec: config.low_level_runtime's first absolute path that is an
// executable file, or name found in `path_env`; never `self` (this binary). Errors: not_found
// naming every candidate tried.
Result<std::string> find_low_level_runtime(const RuntimeConfig& config, std::string_view path_env, const std::string& self);

// The hooks' binary: config.hook_path, else nvidia-cdi-hook next to `self` when it exists, else
// self (under whatever name: cdi::HookCreator writes the argv kgpu runs as a hook by any name).
std::string resolve_hook_path(const RuntimeConfig& config, const std::string& self);

// The whole command: `args` are runc's arguments (argv without argv[0]). Returns only when it
// cannot exec (the exit code to use); `exec` replaces the process on success.
int container_runtime_main(const std::vector<std::string>& args, std::string_view version);

}  // namespace kgpu::toolkit
