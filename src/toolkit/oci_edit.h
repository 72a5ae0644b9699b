// Applying CDI container edits (facts/cdi-schema: env, deviceNodes, mounts, hooks,
// additionalGids) to an OCI runtime spec, as the CDI library applies them for containerd: env
// entries replace a variable of the same name; a device node becomes a linux.devices entry and a
// linux.resources.devices allow rule; mounts are appended (type bind unless given) and all mounts
// are then stably ordered by path depth, so a parent is mounted before what lies below it; hooks
// are appended to hooks.<hookName>; additionalGids to process.user. Unlike the CDI library, an
// edit whose device path or mount destination is already in the spec replaces it rather than
// duplicating it, so applying the same edits twice gives the same spec.
//
// Pure: text in, text or error out (the fuzz target's API). Unknown fields of the spec are kept.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace kgpu::toolkit {

// Parses config.json. Errors: Code::parse naming the byte offset; arrays and objects nested
// deeper than json::kMaxDepth (copying such a value would overflow the stack).
Result<nlohmann::ordered_json> parse_spec(std::string_view config_json);

// The executables of NVIDIA's legacy prestart hook (nvidia-container-toolkit v1.20's
// config.NVIDIAContainerRuntimeHookExecutable and its alias), which CRI-O's hooks.d and Docker's
// `--gpus` put into specs; it injects GPUs with libnvidia-container under its own settings.
inline constexpr std::string_view kLegacyHookNames[] = {"nvidia-container-runtime-hook", "nvidia-container-toolkit"};

// Removes from hooks.prestart every hook whose path's file name is one of kLegacyHookNames, as
// NVIDIA's runtime does in its CDI and jit-cdi modes (internal/modifier/hook_remover.go), for
// every container it creates: left in, it fails the container where the legacy toolkit is not
// installed ("no such file") and injects GPUs a second time, under looser settings, where it
// is. An emptied prestart list is removed. Returns the paths removed; a hooks or prestart of
// the wrong type is left to the low-level runtime to refuse.
std::vector<std::string> remove_legacy_hooks(nlohmann::ordered_json& spec);

// A CDI hook ({hookName, path, args, env, timeout}) as the OCI spec's hooks.<hookName> holds it
// (path, args, env, timeout: the keys it has), unchecked.
nlohmann::ordered_json oci_hook(const nlohmann::ordered_json& cdi_hook);

// Applies `edits` (a CDI containerEdits object) to `spec` in place. Errors (invalid_argument):
// the spec has a field of the wrong type where an edit goes (e.g. `mounts` not an array), or an
// edit is malformed (a device node without a path, a character device without major/minor,
// a hook without path or an unknown hookName, an env entry without '=').
Status apply_container_edits(nlohmann::ordered_json& spec, const nlohmann::ordered_json& edits);

// The same on text: the edited spec as compact JSON (as containerd writes config.json).
// Errors: those of parse_spec and apply_container_edits; invalid UTF-8 in the spec.
Result<std::string> apply_container_edits(std::string_view config_json, const nlohmann::ordered_json& edits);

// Serialises a spec (compact). Errors: invalid UTF-8 in a string.
Result<std::string> dump_spec(const nlohmann::ordered_json& spec);

}  // namespace kgpu::toolkit
