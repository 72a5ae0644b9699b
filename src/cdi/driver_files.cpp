#include "cdi/driver_files.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <charconv>
#include <set>

#include "common/files.h"
#include "common/strings.h"

namespace kgpu::cdi {

namespace fs = std::filesystem;

const std::vector<std::string>& library_dirs() {
    static const std::vector<std::string> dirs = {
        "/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
        "/lib64",     "/lib/x86_64-linux-gnu",     "/lib/aarch64-linux-gnu",
    };
    return dirs;
}

namespace {

bool is_regular(const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec);  // follows symlinks
}

// A key that is the same for two spellings of one directory (symlinked /lib -> usr/lib).
std::string dir_key(const fs::path& p) {
    std::error_code ec;
    auto c = fs::canonical(p, ec);
    return ec ? p.string() : c.string();
}

}  // namespace

std::vector<HostFile> find_libraries(const fs::path& root, const std::string& driver_version) {
    std::vector<HostFile> out;
    if (driver_version.empty()) return out;
    const std::string suffix = ".so." + driver_version;
    std::set<std::string> seen_dirs;
    for (const auto& dir : library_dirs()) {
        const fs::path host_dir = files::under_root(root, dir);
        std::error_code ec;
        if (!fs::is_directory(host_dir, ec)) continue;
        if (!seen_dirs.insert(dir_key(host_dir)).second) continue;
        std::vector<std::string> names;
        for (const auto& entry : fs::directory_iterator(host_dir, ec)) {
            const std::string name = entry.path().filename().string();
            if (name.size() > suffix.size() && name.ends_with(suffix) && is_regular(entry.path())) names.push_back(name);
        }
        std::sort(names.begin(), names.end());
        for (const auto& n : names) out.push_back({dir + "/" + n, (host_dir / n).string()});
    }
    return out;
}

std::vector<HostFile> find_binaries(const fs::path& root) {
    static const char* const names[] = {"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced",
                                        "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"};
    static const char* const dirs[] = {"/usr/bin", "/usr/sbin", "/bin", "/sbin"};
    std::vector<HostFile> out;
    for (const char* name : names) {
        for (const char* dir : dirs) {
            const std::string path = std::string(dir) + "/" + name;
            const fs::path host = files::under_root(root, path);
            if (is_regular(host)) {
                out.push_back({path, host.string()});
                break;
            }
        }
    }
    return out;
}

std::vector<HostFile> find_firmware(const fs::path& root, const std::string& driver_version) {
    std::vector<HostFile> out;
    if (driver_version.empty()) return out;
    const std::string dir = "/lib/firmware/nvidia/" + driver_version;
    const fs::path host_dir = files::under_root(root, dir);
    std::error_code ec;
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(host_dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.starts_with("gsp") && name.ends_with(".bin") && is_regular(entry.path())) names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    for (const auto& n : names) out.push_back({dir + "/" + n, (host_dir / n).string()});
    return out;
}

std::optional<HostFile> find_persistenced_socket(const fs::path& root) {
    const std::string path = "/run/nvidia-persistenced/socket";
    const fs::path host = files::under_root(root, path);
    std::error_code ec;
    if (!fs::exists(host, ec)) return std::nullopt;
    return HostFile{path, host.string()};
}

std::optional<DeviceNode> find_device_node(const fs::path& dev_root, const std::string& path) {
    const fs::path host = files::under_root(dev_root, path);
    struct stat st {};
    if (::stat(host.c_str(), &st) != 0) return std::nullopt;
    DeviceNode node{path, host.string(), std::nullopt, std::nullopt};
    if (S_ISCHR(st.st_mode)) {
        node.major = major(st.st_rdev);
        node.minor = minor(st.st_rdev);
    }
    return node;
}

Result<std::map<std::string, unsigned>> read_mig_minors(const fs::path& proc_root) {
    const fs::path file = proc_root / "driver/nvidia-caps/mig-minors";
    auto text = files::read(file);
    if (!text) return std::unexpected(text.error().context("MIG capability minors"));
    std::map<std::string, unsigned> out;
    unsigned line_no = 0;
    for (auto line : strings::split(*text, '\n')) {
        ++line_no;
        line = strings::trim(line);
        if (line.empty()) continue;
        auto sp = line.find(' ');
        unsigned minor_number = 0;
        auto value = sp == std::string_view::npos ? std::string_view{} : strings::trim(line.substr(sp + 1));
        auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), minor_number);
        if (sp == std::string_view::npos || ec != std::errc{} || ptr != value.data() + value.size())
            return fail(Code::parse, "{}:{}: expected '<name> <minor>', got '{}'", file.string(), line_no, line);
        out.emplace(std::string(line.substr(0, sp)), minor_number);
    }
    return out;
}

}  // namespace kgpu::cdi
