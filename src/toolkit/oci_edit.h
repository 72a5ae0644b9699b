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

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace kgpu::toolkit {

// Parses config.json. Errors: Code::parse naming the byte offset.
Result<nlohmann::ordered_json> parse_spec(std::string_view config_json);

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
