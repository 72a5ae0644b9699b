#include "demo/locate.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#ifndef KGPU_DEMO_SOURCE_DIR
#define KGPU_DEMO_SOURCE_DIR ""
#endif

namespace kgpu::demo {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSimName = "libnvidia-ml.so.1";
constexpr const char* kDefaultNode = "dgx-h100.yaml";

bool is_file(const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec);  // follows symlinks
}

std::string list(const std::vector<std::string>& tried) {
    std::string out;
    for (const auto& t : tried) out += "\n  " + t;
    return out;
}

}  // namespace

Result<fs::path> self_exe() {
    std::string buf(4096, '\0');
    ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
    if (n <= 0) return fail(Code::io, "reading /proc/self/exe: {}", std::strerror(errno));
    buf.resize(static_cast<size_t>(n));
    return fs::path(buf);
}

std::vector<fs::path> fixture_dirs(const fs::path& exe) {
    const fs::path dir = exe.parent_path();
    std::vector<fs::path> out{dir / "sim" / "nodes", (dir.parent_path() / "share" / "kgpu" / "nodes").lexically_normal()};
    if (std::string_view(KGPU_DEMO_SOURCE_DIR).size() > 0) out.push_back(fs::path(KGPU_DEMO_SOURCE_DIR) / "sim" / "nodes");
    return out;
}

Result<Located> find_sim_library(const fs::path& exe, const std::optional<std::string>& flag) {
    Located out;
    if (flag) {
        out.tried.push_back(*flag + " (--nvml-library)");
        if (is_file(*flag)) {
            out.path = fs::absolute(*flag);
            return out;
        }
        return fail(Code::not_found, "--nvml-library: {} is not a file (expected the simulator, {})", *flag, kSimName);
    }
    const fs::path dir = exe.parent_path();
    for (const fs::path& p : {dir / "sim" / kSimName, (dir.parent_path() / "lib" / "kgpu" / kSimName).lexically_normal()}) {
        out.tried.push_back(p.string());
        if (is_file(p)) {
            out.path = p;
            return out;
        }
    }
    return fail(Code::not_found,
                "cannot find the simulated driver library {}; looked in:{}\nbuild it (cmake --build <dir> --target "
                "nvidia-ml-sim) or pass --nvml-library PATH",
                kSimName, list(out.tried));
}

Result<Located> find_node(const fs::path& exe, const std::optional<std::string>& flag) {
    Located out;
    std::vector<std::string> names;
    if (flag) {
        out.tried.push_back(*flag);
        if (is_file(*flag)) {
            out.path = fs::absolute(*flag);
            return out;
        }
        // A bare fixture name ("t4x4" or "t4x4.yaml") is looked up in the fixture directories.
        if (flag->find('/') == std::string::npos && !flag->empty()) {
            names.push_back(*flag);
            if (!flag->ends_with(".yaml")) names.push_back(*flag + ".yaml");
        }
    } else {
        names.push_back(kDefaultNode);
    }
    for (const auto& dir : fixture_dirs(exe)) {
        for (const auto& name : names) {
            fs::path p = dir / name;
            out.tried.push_back(p.string());
            if (is_file(p)) {
                out.path = p;
                return out;
            }
        }
    }
    if (flag)
        return fail(Code::not_found, "--node: {} is not a node file (a simulator fixture, YAML; see sim/README.md); looked at:{}",
                    *flag, list(out.tried));
    return fail(Code::not_found, "cannot find the node fixture {}; looked in:{}\npass --node FILE", kDefaultNode,
                list(out.tried));
}

}  // namespace kgpu::demo
