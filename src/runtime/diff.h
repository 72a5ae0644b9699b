#pragma once

#include <string>
#include <string_view>

namespace kgpu::runtime {

// A unified diff (3 lines of context) from `before` to `after`, headed "--- a_name" /
// "+++ b_name"; empty when the texts are equal.
std::string unified_diff(std::string_view before, std::string_view after, std::string_view a_name, std::string_view b_name);

}  // namespace kgpu::runtime
