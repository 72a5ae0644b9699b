#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kgpu::strings {

std::string_view trim(std::string_view s);
std::string lower(std::string_view s);
std::string upper(std::string_view s);
std::vector<std::string_view> split(std::string_view s, char sep);
bool starts_with_ci(std::string_view s, std::string_view prefix);

}  // namespace kgpu::strings
