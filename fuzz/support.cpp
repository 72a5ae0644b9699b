#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <system_error>

#include "fuzz.h"

namespace kgpu::fuzz {

std::vector<std::string_view> split_documents(std::string_view text, std::string_view separator, size_t parts) {
    std::vector<std::string_view> out;
    size_t start = 0, line = 0;
    while (out.size() + 1 < parts && line <= text.size()) {
        size_t end = text.find('\n', line);
        const size_t stop = end == std::string_view::npos ? text.size() : end;
        if (text.substr(line, stop - line) == separator) {
            out.push_back(text.substr(start, line - start));
            start = end == std::string_view::npos ? text.size() : end + 1;
        }
        if (end == std::string_view::npos) break;
        line = end + 1;
    }
    out.push_back(text.substr(start));
    return out;
}

namespace {

struct Scratch {
    std::filesystem::path path;
    Scratch() {
        std::string tmpl = (std::filesystem::temp_directory_path() / "kgpu-fuzz-XXXXXX").string();
        if (::mkdtemp(tmpl.data()) == nullptr) {
            std::perror("kgpu fuzz: mkdtemp");
            std::abort();
        }
        path = tmpl;
    }
    ~Scratch() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
};

}  // namespace

const std::filesystem::path& scratch_dir() {
    static const Scratch scratch;
    return scratch.path;
}

std::filesystem::path write_scratch(const std::string& name, std::string_view content) {
    const auto path = scratch_dir() / name;
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    if (!out) {
        std::fprintf(stderr, "kgpu fuzz: cannot write %s\n", path.c_str());
        std::abort();
    }
    return path;
}

void check_failed(const char* condition, const char* file, int line, std::string_view detail) {
    std::fprintf(stderr, "kgpu fuzz: %s:%d: invariant broken: %s: %.*s\n", file, line, condition,
                 static_cast<int>(detail.size()), detail.data());
    std::abort();
}

}  // namespace kgpu::fuzz
