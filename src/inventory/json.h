// The JSON form of the node model: the schema `kgpu info --json` prints and other tools read.
// Documented in docs/info-json.md; changes are additive (schema "kgpu.info/v1").
#pragma once

#include <nlohmann/json.hpp>

#include "inventory/node.h"

namespace kgpu::inventory {

inline constexpr const char* kInfoSchema = "kgpu.info/v1";

nlohmann::ordered_json to_json(const Node& node);

}  // namespace kgpu::inventory
