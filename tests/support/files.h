// Reading a whole file in a test: what was written, compared as a string.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace kgpu::test {

// The file's bytes; "" when it cannot be opened (the expectation that follows says what was wanted).
inline std::string slurp(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace kgpu::test
