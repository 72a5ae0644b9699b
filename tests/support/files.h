// Reading a whole file in a test: what was written, compared as a string.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace kgpu::test {

// The file's bytes; "" when it cannot be opened or read (the expectation that follows says what
// was wanted). A read that fails (a /proc file of a process that exits meanwhile) throws out of
// filebuf through the iterator: caught here.
inline std::string slurp(const std::filesystem::path& path) {
    try {
        std::ifstream in(path, std::ios::binary);
        return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    } catch (const std::ios_base::failure&) {
        return {};
    }
}

}  // namespace kgpu::test
