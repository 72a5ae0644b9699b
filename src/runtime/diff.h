#pragma once

#include <string>
#include <string_view>

namespace kgpu::runtime {

// A unified diff (3 lines of context) from `before` to `after`, headed "--- a_name" /
// "+++ b_name", as `diff -u` writes it (hunk numbering, "\ No newline at end of file"); empty
// when the texts are equal. Memory is linear in the number of lines; the diff is minimal unless
// the texts differ in thousands of scattered lines, where it stays correct but may be longer.
std::string unified_diff(std::string_view before, std::string_view after, std::string_view a_name, std::string_view b_name);

}  // namespace kgpu::runtime
