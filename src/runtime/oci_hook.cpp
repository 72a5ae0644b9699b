#include "runtime/oci_hook.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

namespace kgpu::runtime {

std::string oci_hook_json(std::string_view hook_path) {
    std::vector<std::string> dirs = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"};
    const std::filesystem::path p(hook_path);
    const std::string dir = p.parent_path().string();
    if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(dir);
    std::string path_env = "PATH=";
    for (size_t i = 0; i < dirs.size(); ++i) path_env += (i ? ":" : "") + dirs[i];
    nlohmann::ordered_json j;
    j["version"] = "1.0.0";
    j["hook"] = {{"path", std::string(hook_path)},
                 {"args", {p.filename().string(), "prestart"}},
                 {"env", {path_env}}};
    j["when"] = {{"always", true}, {"commands", {".*"}}};
    j["stages"] = {"prestart"};
    return j.dump(2) + "\n";
}

}  // namespace kgpu::runtime
