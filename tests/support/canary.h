// A canary directory for tests of code that runs as root on container file systems: a snapshot
// of everything under a host directory (names, types, modes, link targets, contents), taken
// before and after an attack is tried. Equal snapshots: nothing there was created, removed,
// written, chmodded or relinked.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace kgpu::test {

inline std::string tree_snapshot(const std::string& dir) {
    namespace fs = std::filesystem;
    std::vector<std::string> lines;
    auto describe = [&](const fs::path& p, const std::string& name) {
        struct stat st {};
        if (::lstat(p.c_str(), &st) != 0) return;
        std::string what;
        if (S_ISLNK(st.st_mode)) {
            std::error_code ec;
            what = "-> " + fs::read_symlink(p, ec).string();
        } else if (S_ISREG(st.st_mode)) {
            std::ifstream in(p, std::ios::binary);
            std::stringstream ss;
            ss << in.rdbuf();
            what = fmt::format("{} bytes, content hash {:x}, links {}", st.st_size, std::hash<std::string>{}(ss.str()), st.st_nlink);
        }
        lines.push_back(fmt::format("{} mode {:o} uid {} {}", name, st.st_mode, st.st_uid, what));
    };
    describe(dir, ".");
    std::error_code ec;
    for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        describe(it->path(), it->path().lexically_relative(dir).string());  // never follows a link
    std::sort(lines.begin(), lines.end());
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
}

}  // namespace kgpu::test
