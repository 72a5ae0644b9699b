// The parts of the device plugin's config file (facts/device-plugin-anchor.md) that labels
// depend on: flags.migStrategy and the sharing section. Other sections are the device plugin's
// business and are not checked here; inside `sharing`, unknown keys are errors.
#pragma once

#include <filesystem>
#include <optional>

#include "common/error.h"
#include "labels/labels.h"

namespace kgpu::labels {

struct PluginConfig {
    std::optional<MigStrategy> mig_strategy;
    Sharing sharing;
};

// Errors: the file is missing, is not YAML (message names file:line), has `version` other than
// v1, or a sharing entry is malformed (replicas < 2, both timeSlicing and mps, unknown keys).
Result<PluginConfig> read_plugin_config(const std::filesystem::path& path);

}  // namespace kgpu::labels
