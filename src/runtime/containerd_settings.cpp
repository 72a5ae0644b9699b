#include "runtime/containerd_settings.h"

#include <algorithm>

#include <toml++/toml.h>

#include "common/files.h"
#include "runtime/containerd.h"

namespace kgpu::runtime {

namespace fs = std::filesystem;

namespace {

// Collects the files a config imports: absolute or relative to the importing file's directory,
// with a `*` allowed in the last component.
std::vector<fs::path> expand_import(const fs::path& root, const fs::path& host_dir, const std::string& pattern) {
    fs::path p(pattern);
    if (p.is_relative()) p = host_dir / p;
    std::vector<fs::path> out;
    std::string leaf = p.filename().string();
    auto star = leaf.find('*');
    if (star == std::string::npos) {
        out.push_back(p);
        return out;
    }
    std::string pre = leaf.substr(0, star), post = leaf.substr(star + 1);
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(files::under_root(root, p.parent_path()), ec)) {
        std::string n = e.path().filename().string();
        if (n.size() >= pre.size() + post.size() && n.starts_with(pre) && n.ends_with(post))
            out.push_back(p.parent_path() / n);
    }
    std::sort(out.begin(), out.end());
    return out;
}

void apply(const toml::table& t, ContainerdSettings& c, bool is_main) {
    if (is_main) {
        c.version = static_cast<int>(t["version"].value_or<int64_t>(1));
        c.plugin = cri_plugin(c.version);
    }
    const toml::table* plugins = t["plugins"].as_table();
    if (!plugins) return;
    const toml::table* cri = (*plugins)[c.plugin].as_table();
    if (!cri) return;
    if (auto v = (*cri)["enable_cdi"].value<bool>()) {
        c.cdi_enabled = *v;
        c.cdi_explicit = true;
    }
    const toml::table* ctd = (*cri)["containerd"].as_table();
    if (!ctd) return;
    if (auto v = (*ctd)["default_runtime_name"].value<std::string>()) c.default_runtime = *v;
    const toml::table* runtimes = (*ctd)["runtimes"].as_table();
    if (!runtimes) return;
    for (const auto& [name, node] : *runtimes) {
        const toml::table* rt = node.as_table();
        if (!rt) continue;
        std::string binary = (*rt)["options"]["BinaryName"].value_or<std::string>("");
        // kgpu's runtime (`kgpu runtime install`) is a valid GPU runtime too.
        bool is_nvidia = name.str() == "nvidia" || binary.find("nvidia-container-runtime") != std::string::npos ||
                         binary.ends_with("kgpu-container-runtime");
        if (is_nvidia && (!c.nvidia_runtime || name.str() == "nvidia")) {
            c.nvidia_runtime = true;
            c.nvidia_runtime_name = std::string(name.str());
            c.nvidia_binary = binary;
        }
    }
}

Result<toml::table> parse_file(const fs::path& root, const fs::path& host_path) {
    auto text = files::read(files::under_root(root, host_path));
    if (!text) return std::unexpected(text.error());
    try {
        return toml::parse(*text, host_path.string());
    } catch (const toml::parse_error& e) {
        return fail(Code::parse, "{}:{}:{}: {}", host_path.string(), e.source().begin.line, e.source().begin.column,
                    e.description());
    }
}

}  // namespace

Result<ContainerdSettings> read_containerd_settings(const fs::path& root, const fs::path& config) {
    ContainerdSettings c;
    auto main = parse_file(root, config);
    if (!main) return std::unexpected(main.error());
    c.files.push_back(config.string());
    // containerd reads versions 1 (no key), 2 and 3 and refuses to start with anything else;
    // the plugin names the settings live under depend on it (found by fuzz/doctor_containerd).
    if (auto version = (*main)["version"]) {
        const auto line = version.node()->source().begin.line;
        if (!version.is_integer())
            return fail(Code::parse, "{}:{}: version: expected an integer (1, 2 or 3)", config.string(), line);
        if (const int64_t v = *version.value<int64_t>(); v < 1 || v > 3)
            return fail(Code::parse, "{}:{}: version = {}: containerd reads config versions 1, 2 and 3", config.string(),
                        line, v);
    }
    apply(*main, c, true);
    if (const toml::array* imports = (*main)["imports"].as_array()) {
        for (const auto& node : *imports) {
            auto pattern = node.value<std::string>();
            if (!pattern) continue;
            for (const auto& f : expand_import(root, config.parent_path(), *pattern)) {
                auto t = parse_file(root, f);
                if (!t) {
                    if (t.error().code == Code::not_found) continue;
                    return std::unexpected(t.error());
                }
                c.files.push_back(f.string());
                apply(*t, c, false);
            }
        }
    }
    // containerd 2.x (config version 3) enables CDI unless told otherwise; 1.7 does not.
    if (!c.cdi_explicit && c.version >= 3) c.cdi_enabled = true;
    return c;
}

}  // namespace kgpu::runtime
