#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kgpu::strings {

std::string_view trim(std::string_view s);
std::string lower(std::string_view s);
std::string upper(std::string_view s);
std::vector<std::string_view> split(std::string_view s, char sep);
bool starts_with_ci(std::string_view s, std::string_view prefix);
// Standard base64 (RFC 4648, padded). `ok` is false when `in` is not valid base64.
std::string base64_decode(std::string_view in, bool& ok);

// A dotted decimal version ("550.54.15", "12.4", "v9.0") as its parts, or nullopt when it is not one.
std::optional<std::vector<unsigned long>> version_parts(std::string_view v);
// -1, 0 or 1; missing parts count as 0 ("12.4" == "12.4.0").
int compare_versions(const std::vector<unsigned long>& a, const std::vector<unsigned long>& b);

}  // namespace kgpu::strings
