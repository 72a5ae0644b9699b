// Per-node configs by node label (config_source.h).
#include "deviceplugin/config_source.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/files.h"

namespace kgpu::deviceplugin {

namespace fs = std::filesystem;

Result<std::set<std::string>> config_names(const std::string& srcdir) {
    const auto listed = files::entries(srcdir);
    if (!listed) return fail(listed.error().code, "config directory (CONFIG_FILE_SRCDIR): {}", listed.error().message);
    std::set<std::string> out;
    std::error_code ec;
    for (const auto& e : *listed) {
        const std::string name = e.path().filename().string();
        if (name.starts_with(".")) continue;
        if (e.is_regular_file(ec)) out.insert(name);  // follows links (ConfigMap keys are links into ..data)
    }
    return out;
}

Status check_fallbacks(const std::vector<std::string>& fallbacks) {
    for (const auto& f : fallbacks)
        if (f != "named" && f != "single" && f != "empty")
            return fail(Code::invalid_argument, "FALLBACK_STRATEGIES: unknown fallback strategy '{}' (expected named, single or empty)", f);
    return {};
}

Result<ConfigChoice> choose_config(const ConfigSource& source, const std::set<std::string>& names, const std::string& label) {
    if (auto st = check_fallbacks(source.fallbacks); !st) return std::unexpected(st.error());
    ConfigChoice c;
    auto pick = [&](const std::string& name, std::string why) {
        c.name = name;
        c.path = name.empty() ? std::string() : (fs::path(source.srcdir) / name).string();
        c.why = std::move(why);
        return c;
    };
    if (!label.empty()) {
        if (names.contains(label)) return pick(label, fmt::format("node label {}={}", source.node_label, label));
        c.warnings.push_back(fmt::format("node label {}={}: no config of that name in {} (it has: {}); using the default",
                                         source.node_label, label, source.srcdir, fmt::join(names, ", ")));
    }
    if (!source.default_config.empty()) {
        if (names.contains(source.default_config))
            return pick(source.default_config, fmt::format("the default config (DEFAULT_CONFIG={})", source.default_config));
        c.warnings.push_back(fmt::format("DEFAULT_CONFIG={}: no config of that name in {}", source.default_config, source.srcdir));
    }
    for (const auto& f : source.fallbacks) {
        if (f == "named" && names.contains("default")) return pick("default", "fallback named (a config called default)");
        if (f == "single" && names.size() == 1) return pick(*names.begin(), "fallback single (the only config)");
        if (f == "empty") return pick("", "fallback empty (no config file: the built-in defaults)");
    }
    return fail(Code::invalid_argument,
                "no config for this node: the node label {} is {}, DEFAULT_CONFIG is {}, and the fallbacks [{}] found none "
                "among [{}] in {}",
                source.node_label, label.empty() ? "absent" : "'" + label + "'",
                source.default_config.empty() ? "not set" : "'" + source.default_config + "'", fmt::join(source.fallbacks, ", "),
                fmt::join(names, ", "), source.srcdir);
}

bool valid_label_value(const std::string& v) {
    if (v.size() > 63) return false;
    if (v.empty()) return true;
    auto alnum = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) != 0; };
    if (!alnum(v.front()) || !alnum(v.back())) return false;
    for (char ch : v)
        if (!alnum(ch) && ch != '-' && ch != '_' && ch != '.') return false;
    return true;
}

}  // namespace kgpu::deviceplugin

namespace kgpu::deviceplugin {

Result<bool> point_config_link(const std::string& dst, const std::string& target) {
    std::error_code ec;
    const fs::path d(dst);
    if (fs::exists(d, ec) || fs::is_symlink(d, ec)) {
        const auto a = fs::canonical(d, ec);
        std::error_code ec2;
        const auto b = fs::canonical(target, ec2);
        if (!ec && !ec2 && a == b) return false;
    }
    const fs::path tmp = d.parent_path() / ("." + d.filename().string() + ".kgpu-new");
    fs::remove(tmp, ec);
    fs::create_symlink(target, tmp, ec);
    if (ec) return fail(Code::io, "config link {}: cannot create {} -> {}: {}", dst, tmp.string(), target, ec.message());
    fs::rename(tmp, d, ec);
    if (ec) {
        std::error_code ignore;
        fs::remove(tmp, ignore);
        return fail(Code::io, "config link {}: cannot replace it: {}", dst, ec.message());
    }
    return true;
}

std::vector<int> find_processes(const std::string& proc_root, const std::string& name, int self) {
    std::vector<int> out;
    // A /proc that cannot be listed whole: none found (the caller says so), never a partial list.
    const auto listed = files::entries(proc_root);
    if (!listed) return out;
    for (const auto& e : *listed) {
        const std::string pid = e.path().filename().string();
        if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
        // Read as a value: a process that exits meanwhile fails the read (ESRCH), which a stream
        // iterator throws out of (it ended the config-manager with std::terminate).
        const std::string cmdline = files::read(e.path() / "cmdline").value_or("");
        if (cmdline.empty()) continue;
        const std::string argv0 = cmdline.substr(0, cmdline.find('\0'));
        const auto rest = cmdline.find('\0') == std::string::npos ? std::string() : cmdline.substr(cmdline.find('\0') + 1);
        const std::string argv1 = rest.substr(0, rest.find('\0'));
        const std::string base = fs::path(argv0).filename().string();
        if (argv0 == name || base == name || (base + " " + argv1) == name) {
            const int p = std::atoi(pid.c_str());
            if (p != self) out.push_back(p);
        }
    }
    std::sort(out.begin(), out.end());
    // A child the process forked has its command line until it execs (the MPS daemon starting
    // nvidia-cuda-mps-control): not signalled, SIGHUP would kill it. Its parent is the one.
    std::vector<int> roots;
    for (int p : out) {
        const std::string text = files::read(fs::path(proc_root) / std::to_string(p) / "stat").value_or("");
        int ppid = 0;
        // "<pid> (<comm>) <state> <ppid> ...": the command may hold ") ", so after the last one.
        if (const auto close = text.rfind(") "); close != std::string::npos) {
            std::istringstream rest(text.substr(close + 2));
            std::string state;
            rest >> state >> ppid;
        }
        if (!std::binary_search(out.begin(), out.end(), ppid)) roots.push_back(p);
    }
    return roots;
}

}  // namespace kgpu::deviceplugin
