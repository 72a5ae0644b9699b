#include "doctor/host.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <regex>

#include <toml++/toml.h>

#include "cdi/driver_files.h"
#include "common/files.h"
#include "common/strings.h"

namespace kgpu::doctor {

namespace fs = std::filesystem;

std::vector<std::string> parse_modules(std::string_view text) {
    std::vector<std::string> out;
    for (auto line : strings::split(text, '\n')) {
        line = strings::trim(line);
        if (line.empty()) continue;
        auto sp = line.find(' ');
        out.emplace_back(line.substr(0, sp));
    }
    return out;
}

std::string parse_driver_version(std::string_view text) { return cdi::parse_proc_driver_version(text); }

std::vector<XidEvent> parse_xids(std::string_view log) {
    static const std::regex re(R"(NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): ([0-9]+))");
    std::vector<XidEvent> out;
    for (auto line : strings::split(log, '\n')) {
        std::string s(line);
        std::smatch m;
        if (!std::regex_search(s, m, re)) continue;
        // A number past int (a corrupt or forged line) is no XID: skipped, where std::stoi threw
        // out of `kgpu doctor` (found by fuzz/doctor_kernel_log).
        int xid = 0;
        const auto digits = m[2].str();
        if (auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), xid); ec != std::errc{}) continue;
        out.push_back({m[1].str(), xid, std::string(strings::trim(s))});
    }
    return out;
}

XidClass classify_xid(int xid) {
    switch (xid) {
        case 13: case 31: case 43: case 45: case 68: case 109: return XidClass::application;
        case 92: case 94: return XidClass::recoverable;
        case 48: case 61: case 62: case 63: case 64: case 74: case 79: case 95: case 119: case 120: case 140: case 143:
            return XidClass::reset_required;
        default: return XidClass::unknown;
    }
}

Result<std::string> read_kernel_log(const fs::path& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) return fail(Code::not_found, "{}: no such file", path.string());
        return fail(Code::io, "{}: {}", path.string(), std::strerror(errno));
    }
    if (!S_ISCHR(st.st_mode)) return files::read(path);
    // /dev/kmsg: each read() returns one record; EAGAIN at the end of the buffer.
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        Code code = errno == EACCES || errno == EPERM ? Code::no_permission : Code::io;
        return fail(code, "opening {}: {}", path.string(), std::strerror(errno));
    }
    std::string out;
    char buf[8192];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n > 0) {
            // "<prio>,<seq>,<usec>,<flags>;message" -> message
            std::string_view rec(buf, static_cast<size_t>(n));
            auto semi = rec.find(';');
            out.append(semi == std::string_view::npos ? rec : rec.substr(semi + 1));
            if (out.empty() || out.back() != '\n') out.push_back('\n');
            continue;
        }
        if (n < 0 && errno == EPIPE) continue;  // a record was overwritten while reading
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN) {
            Code code = errno == EPERM || errno == EACCES ? Code::no_permission : Code::io;
            int e = errno;
            ::close(fd);
            return fail(code, "reading {}: {}", path.string(), std::strerror(e));
        }
        break;
    }
    ::close(fd);
    return out;
}

kgpu::Status probe_unix_socket(const fs::path& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return fail(Code::not_found, "{}: no such file", path.string());
    if (!S_ISSOCK(st.st_mode)) return fail(Code::invalid_argument, "{} exists but is not a unix socket", path.string());
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.string().size() >= sizeof addr.sun_path)
        return fail(Code::invalid_argument, "{}: path too long for a unix socket", path.string());
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return fail(Code::io, "socket(): {}", std::strerror(errno));
    int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    int e = errno;
    ::close(fd);
    if (rc == 0) return {};
    if (e == ECONNREFUSED) return fail(Code::unavailable, "{}: connection refused (stale socket: nobody listens)", path.string());
    if (e == EACCES || e == EPERM) return fail(Code::no_permission, "{}: {}", path.string(), std::strerror(e));
    return fail(Code::io, "{}: {}", path.string(), std::strerror(e));
}

std::optional<fs::path> find_binary(const fs::path& root, std::string_view name, const std::vector<std::string>& dirs) {
    for (const auto& d : dirs) {
        fs::path p = files::under_root(root, fs::path(d) / name);
        std::error_code ec;
        if (fs::is_regular_file(p, ec)) return fs::path(d) / name;
    }
    return std::nullopt;
}

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

void apply(const toml::table& t, ContainerdConfig& c, bool is_main) {
    if (is_main) {
        c.version = static_cast<int>(t["version"].value_or<int64_t>(1));
        c.plugin = c.version >= 3 ? "io.containerd.cri.v1.runtime" : c.version == 2 ? "io.containerd.grpc.v1.cri" : "cri";
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

Result<ContainerdConfig> read_containerd_config(const fs::path& root, const fs::path& config) {
    ContainerdConfig c;
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

}  // namespace kgpu::doctor
