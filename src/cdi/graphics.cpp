#include "cdi/graphics.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "common/files.h"
#include "common/log.h"
#include "common/strings.h"

namespace kgpu::cdi {

namespace fs = std::filesystem;

namespace {

// A file (following links), not a directory (nvidia-ctk's assertFile).
bool is_file(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode);
}

// The files matching `pattern` (a relative path, maybe with wildcards) in each of `prefixes`
// (host directories), each prefix's matches sorted, unresolved; at most `count` (0: all).
std::vector<std::string> locate_files(const std::vector<std::string>& prefixes, const std::string& pattern,
                                      size_t count = 0) {
    std::vector<std::string> out;
    for (const auto& prefix : prefixes) {
        const std::string full = (fs::path(prefix) / pattern).lexically_normal().string();
        glob_t g{};
        if (::glob(full.c_str(), GLOB_NOSORT, nullptr, &g) == 0) {
            std::vector<std::string> found(g.gl_pathv, g.gl_pathv + g.gl_pathc);
            std::sort(found.begin(), found.end());
            for (auto& f : found) {
                if (!is_file(f)) continue;
                out.push_back(std::move(f));
                if (count > 0 && out.size() == count) break;
            }
        }
        ::globfree(&g);
        if (count > 0 && out.size() == count) break;
    }
    return out;
}

// `dirs` under `root`, each once (nvidia-ctk's getSearchPrefixes).
std::vector<std::string> prefixes_under(const fs::path& root, const std::vector<std::string>& dirs) {
    std::vector<std::string> out;
    std::set<std::string> seen;
    for (const auto& d : dirs) {
        if (!seen.insert(d).second) continue;
        out.push_back((root / fs::path(d).relative_path()).lexically_normal().string());
    }
    if (out.empty()) out.push_back(root.string());
    return out;
}

std::vector<std::string> xorg_dirs(const std::vector<std::string>& lib_dirs) {
    std::vector<std::string> out;
    auto modules = [&](const std::string& base) {
        for (const char* sub : {"modules/drivers", "modules/extensions", "modules/updates/drivers",
                                "modules/updates/extensions"})
            out.push_back(base + "/" + sub);
    };
    for (const auto& dir : lib_dirs) {
        out.push_back(dir + "/nvidia/xorg");
        modules(dir + "/xorg");
        for (const char* base : {"/usr/lib/xorg", "/usr/lib64/xorg", "/usr/X11R6/lib", "/usr/X11R6/lib64"}) modules(base);
    }
    return out;
}

std::vector<std::string> config_dirs(const fs::path& root, const std::vector<std::string>& config_search_paths) {
    // Explicit paths are host paths (nvidia-ctk: "used as absolute paths").
    if (!config_search_paths.empty()) return prefixes_under("/", config_search_paths);
    std::vector<std::string> dirs = {"/etc"};
    const char* xdg = std::getenv("XDG_DATA_DIRS");
    if (xdg != nullptr && *xdg != '\0') {
        for (auto d : strings::split(xdg, ':')) dirs.emplace_back(d);
    } else {
        dirs.insert(dirs.end(), {"/usr/local/share", "/usr/share"});
    }
    return prefixes_under(root, dirs);
}

const char* vulkan_arch_icd() {
#if defined(__x86_64__)
    return "vulkan/icd.d/nvidia_icd.x86_64.json";
#elif defined(__aarch64__)
    return "vulkan/icd.d/nvidia_icd.aarch64.json";
#else
    return nullptr;
#endif
}

}  // namespace

GraphicsFiles find_graphics_files(LibraryLocator& libraries, const std::string& driver_version,
                                  const std::vector<std::string>& lib_dirs,
                                  const std::vector<std::string>& config_search_paths) {
    GraphicsFiles out;
    if (driver_version.empty()) return out;
    const fs::path& root = libraries.root();
    const std::string allocator = "libnvidia-allocator.so." + driver_version;
    const std::string producer = "libnvidia-vulkan-producer.so." + driver_version;
    const std::string glxserver = "libglxserver_nvidia.so." + driver_version;

    // Libraries and X.Org modules: mounted (but for the allocator) and the source of the links.
    std::vector<HostFile> libs;
    std::set<std::string> seen;
    for (const auto& pattern : {std::string("libnvidia-egl-gbm.so.*.*"), std::string("libnvidia-egl-wayland.so.*.*"),
                                std::string("libnvidia-egl-wayland2.so.*.*"), allocator, producer})
        for (auto& f : libraries.locate(pattern))
            if (seen.insert(f.host_path).second) libs.push_back(std::move(f));
    seen.clear();
    const auto xorg_prefixes = prefixes_under(root, xorg_dirs(lib_dirs));
    for (const auto& name : {std::string("nvidia_drv.so"), glxserver})
        for (auto& host : locate_files(xorg_prefixes, name, 1))
            if (seen.insert(host).second) libs.push_back({relative_to_root(root, host), host});
    for (const auto& lib : libs) {
        const fs::path path(lib.path);
        const std::string name = path.filename().string();
        const fs::path dir = path.parent_path();
        if (name == allocator) out.links.push_back("../libnvidia-allocator.so.1::" + (dir / "gbm/nvidia-drm_gbm.so").string());
        else if (name == producer) out.links.push_back(name + "::" + (dir / "libnvidia-vulkan-producer.so").string());
        else if (name == glxserver) out.links.push_back(name + "::" + (dir / "libglxserver_nvidia.so").string());
        // libnvidia-allocator.so.<version> is one of the driver's libraries already mounted;
        // mounting it twice upsets shared mount propagation (nvidia-ctk leaves it out here too).
        if (name != allocator) out.mounts.push_back(lib);
    }

    // Configuration files, wherever found.
    const auto configs = config_dirs(root, config_search_paths);
    seen.clear();
    for (const char* name : {"glvnd/egl_vendor.d/10_nvidia.json", "egl/egl_external_platform.d/15_nvidia_gbm.json",
                             "egl/egl_external_platform.d/10_nvidia_wayland.json",
                             "egl/egl_external_platform.d/09_nvidia_wayland2.json", "nvidia/nvoptix.bin",
                             "X11/xorg.conf.d/10-nvidia.conf", "X11/xorg.conf.d/nvidia-drm-outputclass.conf",
                             "OpenCL/vendors/nvidia.icd"})
        for (auto& host : locate_files(configs, name))
            if (seen.insert(host).second) out.mounts.push_back({relative_to_root(root, host), host});

    // Vulkan: the first found, at /etc/<name> in the container.
    std::vector<std::string> vulkan = {"vulkan/icd.d/nvidia_icd.json", "vulkan/icd.d/nvidia_layers.json",
                                       "vulkan/implicit_layer.d/nvidia_layers.json"};
    if (const char* arch = vulkan_arch_icd()) vulkan.emplace_back(arch);
    seen.clear();
    for (const auto& name : vulkan) {
        auto found = locate_files(configs, name);
        if (found.empty()) found = locate_files({root.string()}, name);
        if (found.empty()) {
            log::debug("cdi: no {} under {}", name, root.string());
            continue;
        }
        if (!seen.insert(found.front()).second) continue;
        out.mounts.push_back({"/etc/" + name, found.front()});
    }
    return out;
}

}  // namespace kgpu::cdi
