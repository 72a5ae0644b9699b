#include "cdi/driver_files.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <set>

#include "common/fd.h"
#include "common/files.h"
#include "common/ld_cache.h"
#include "common/log.h"
#include "common/strings.h"

namespace kgpu::cdi {

namespace fs = std::filesystem;

const std::vector<std::string>& library_dirs() { return ldcache::driver_library_dirs(); }

namespace {

bool is_regular(const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec);  // follows symlinks
}

// Every name in `dir`, sorted (none when it cannot be listed).
std::vector<std::string> list_dir(const fs::path& dir) {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

std::vector<std::string> matching(const std::vector<std::string>& names, const std::string& pattern) {
    std::vector<std::string> out;
    for (const auto& n : names)
        if (::fnmatch(pattern.c_str(), n.c_str(), 0) == 0) out.push_back(n);
    return out;
}

// Sorted names in `dir` matching the shell pattern `pattern` (Go's filepath.Glob on one level).
std::vector<std::string> glob_dir(const fs::path& dir, const std::string& pattern) { return matching(list_dir(dir), pattern); }

// `candidate` (a file under `root`) with its symlinks resolved, kept inside the root: a link
// that leaves the driver root (an absolute target) is taken as found. nullopt when it is not a
// file (following links).
std::optional<std::string> resolve_in_root(const fs::path& root, const fs::path& canonical_root, const fs::path& candidate) {
    if (!is_regular(candidate)) return std::nullopt;
    std::error_code ec;
    fs::path resolved = fs::canonical(candidate, ec);
    std::string host = ec ? candidate.lexically_normal().string() : resolved.string();
    if (!is_root(root) && !ec) {
        const std::string cr = canonical_root.string();
        if (!host.starts_with(cr + "/")) host = candidate.lexically_normal().string();
        else host = (root.lexically_normal() / fs::path(host.substr(cr.size() + 1))).string();
    }
    return host;
}

fs::path canonical_root_of(const fs::path& root) {
    if (is_root(root)) return fs::path("/");
    // A driver root that cannot be resolved now (a driver container restarting): as it is given.
    std::error_code ec;
    fs::path resolved = fs::weakly_canonical(root, ec);
    return ec ? root.lexically_normal() : resolved;
}

// Files (not directories) matching `pattern` in each of `dirs` under `root`, symlinks resolved
// (kept inside the root), each once, in search order; each directory listed through `lister`.
void locate_resolved(const fs::path& root, const std::vector<std::string>& dirs, const std::string& pattern,
                     std::vector<HostFile>& out, std::set<std::string>& seen, LibraryLocator& lister) {
    const fs::path canonical_root = canonical_root_of(root);
    for (const auto& dir : dirs) {
        const fs::path host_dir = files::under_root(root, dir);
        for (const auto& name : matching(lister.names_in(host_dir), pattern)) {
            auto host = resolve_in_root(root, canonical_root, host_dir / name);
            if (!host || !seen.insert(*host).second) continue;
            out.push_back({relative_to_root(root, *host), *host});
        }
    }
}

// `path` (under `root`) and the links it leads through, up to the file (nvidia-ctk's
// ResolveChain, with absolute targets taken under the root). nullopt when a link dangles.
std::optional<std::vector<std::string>> link_chain(const fs::path& root, std::string path) {
    std::vector<std::string> chain;
    std::set<std::string> seen;
    while (seen.insert(path).second) {
        std::error_code ec;
        const auto st = fs::symlink_status(path, ec);
        if (ec || !fs::exists(st)) return std::nullopt;
        chain.push_back(path);
        if (!fs::is_symlink(st)) break;
        const fs::path target = fs::read_symlink(path, ec);
        if (ec) return std::nullopt;
        path = target.is_absolute() ? files::under_root(root, target.lexically_normal()).string()
                                    : (fs::path(path).parent_path() / target).lexically_normal().string();
    }
    return chain;
}

}  // namespace

bool is_root(const fs::path& root) { return root.empty() || root == "/"; }

std::string relative_to_root(const fs::path& root, const std::string& host) {
    if (is_root(root)) return host;
    std::string prefix = root.lexically_normal().string();
    if (prefix.ends_with('/')) prefix.pop_back();
    return host.starts_with(prefix + "/") ? host.substr(prefix.size()) : host;
}

LibraryLocator::LibraryLocator(fs::path root, std::vector<std::string> search_paths)
    : root_(root.empty() ? fs::path("/") : std::move(root)),
      search_paths_(std::move(search_paths)),
      explicit_paths_(!search_paths_.empty()) {}

const std::vector<std::string>& LibraryLocator::names_in(const fs::path& host_dir) {
    auto it = listings_.find(host_dir.string());
    if (it == listings_.end()) it = listings_.emplace(host_dir.string(), list_dir(host_dir)).first;
    return it->second;
}

std::vector<std::string> LibraryLocator::searched() const {
    std::vector<std::string> out;
    // Explicit search paths are host paths (nvidia-ctk: "used as absolute paths").
    for (const auto& d : explicit_paths_ ? search_paths_ : library_dirs())
        out.push_back(files::under_root(explicit_paths_ ? fs::path("/") : root_, d).string());
    if (cache_files_) {
        const std::string cache = files::under_root(root_, std::string(ldcache::kPath)).string();
        out.push_back(cache_note_.empty() ? cache : cache + " (" + cache_note_ + ")");
    }
    return out;
}

const std::vector<std::string>& LibraryLocator::cache_files() {
    if (cache_files_) return *cache_files_;
    cache_files_.emplace();
    auto entries = ldcache::read(root_);
    if (!entries) {
        if (entries.error().code == Code::not_found) {
            cache_note_ = "missing";
            log::debug("cdi: no {} under {}", ldcache::kPath, root_.string());
        } else {
            cache_note_ = "unreadable";
            log::warn("cdi: ignoring the driver root's loader cache: {}", entries.error().message);
        }
        return *cache_files_;
    }
    for (const auto& lib : ldcache::libraries64(*entries, root_)) {
        auto chain = link_chain(root_, lib);
        if (!chain) {
            log::debug("cdi: {} (from {}) is a dangling link; skipped", lib, ldcache::kPath);
            continue;
        }
        cache_files_->insert(cache_files_->end(), chain->begin(), chain->end());
    }
    if (cache_files_->empty()) cache_note_ = "no 64-bit libraries";
    return *cache_files_;
}

std::vector<HostFile> LibraryLocator::locate(const std::string& pattern) {
    std::vector<HostFile> out;
    std::set<std::string> seen;
    const fs::path search_root = explicit_paths_ ? fs::path("/") : root_;
    locate_resolved(search_root, explicit_paths_ ? search_paths_ : library_dirs(), pattern, out, seen, *this);
    if (!out.empty() || explicit_paths_) {
        if (explicit_paths_)
            for (auto& f : out) f.path = relative_to_root(root_, f.host_path);
        return out;
    }
    // Not in the standard directories: the libraries the root's loader cache names.
    const fs::path canonical_root = canonical_root_of(root_);
    for (const auto& file : cache_files()) {
        if (::fnmatch(pattern.c_str(), fs::path(file).filename().c_str(), 0) != 0) continue;
        auto host = resolve_in_root(root_, canonical_root, file);
        if (!host || !seen.insert(*host).second) continue;
        out.push_back({relative_to_root(root_, *host), *host});
    }
    return out;
}

DriverLibraries find_driver_libraries(const fs::path& root, const std::string& driver_version,
                                      const std::vector<std::string>& search_paths) {
    LibraryLocator libraries(root, search_paths);
    return find_driver_libraries(libraries, driver_version);
}

DriverLibraries find_driver_libraries(LibraryLocator& libraries, const std::string& driver_version) {
    DriverLibraries out;
    if (driver_version.empty()) return out;
    const fs::path& root = libraries.root();

    // The directories of lib*.so.<version>: NVIDIA_CTK_LIBCUDA_DIR and where the rest is looked for.
    const std::vector<HostFile> versioned = libraries.locate("lib*.so." + driver_version);
    out.searched = libraries.searched();
    std::vector<std::string> host_dirs;
    for (const auto& f : versioned) {
        const std::string host_dir = fs::path(f.host_path).parent_path().string();
        if (std::find(host_dirs.begin(), host_dirs.end(), host_dir) != host_dirs.end()) continue;
        host_dirs.push_back(host_dir);
        out.dirs.push_back(relative_to_root(root, host_dir));
    }
    if (host_dirs.empty()) return out;

    // *.so.<version> in those directories, then in their vdpau/ subdirectories.
    std::vector<std::string> lib_dirs = host_dirs;
    for (const auto& d : host_dirs) lib_dirs.push_back(d + "/vdpau");
    std::set<std::string> seen;
    locate_resolved("/", lib_dirs, "*.so." + driver_version, out.libraries, seen, libraries);
    locate_resolved("/", host_dirs, "libnvidia-nvvm70.so.*", out.libraries, seen, libraries);
    for (auto& f : out.libraries) f.path = relative_to_root(root, f.host_path);
    return out;
}

std::vector<HostFile> find_libraries(const fs::path& root, const std::string& driver_version) {
    return find_driver_libraries(root, driver_version).libraries;
}

std::vector<HostFile> find_binaries(const fs::path& root) {
    static const char* const names[] = {"nvidia-smi",          "nvidia-debugdump",       "nvidia-persistenced",
                                        "nvidia-cuda-mps-control", "nvidia-cuda-mps-server", "nvidia-imex",
                                        "nvidia-imex-ctl"};
    std::vector<std::string> dirs;
    if (const char* path = std::getenv("PATH"))
        for (auto d : strings::split(path, ':'))
            if (!d.empty()) dirs.emplace_back(d);
    for (const char* d : {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"})
        if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.emplace_back(d);
    std::vector<HostFile> out;
    for (const char* name : names) {
        for (const auto& dir : dirs) {
            const fs::path host = files::under_root(root, fs::path(dir) / name);
            struct stat st {};
            if (::stat(host.c_str(), &st) != 0 || S_ISDIR(st.st_mode) || (st.st_mode & 0111) == 0) continue;
            out.push_back({relative_to_root(root, host.string()), host.string()});
            break;
        }
    }
    return out;
}

std::vector<HostFile> find_firmware(const fs::path& root, const std::string& driver_version,
                                    const std::string& kernel_release, const std::string& custom_path) {
    std::vector<HostFile> out;
    if (driver_version.empty()) return out;
    std::vector<std::string> dirs;
    if (!custom_path.empty()) dirs.push_back(custom_path);
    if (!kernel_release.empty()) dirs.push_back("/lib/firmware/updates/" + kernel_release);
    dirs.push_back("/lib/firmware/updates");
    if (!kernel_release.empty()) dirs.push_back("/lib/firmware/" + kernel_release);
    dirs.push_back("/lib/firmware");
    std::set<std::string> seen_dirs;
    for (const auto& d : dirs) {
        if (!seen_dirs.insert(d).second) continue;
        const std::string dir = (fs::path(d) / "nvidia" / driver_version).string();
        const fs::path host_dir = files::under_root(root, dir);
        for (const auto& name : glob_dir(host_dir, "gsp*.bin")) {
            if (!is_regular(host_dir / name)) continue;
            out.push_back({dir + "/" + name, (host_dir / name).string()});
        }
    }
    return out;
}

std::vector<HostFile> find_ipc_sockets(const fs::path& root) {
    std::vector<HostFile> out;
    auto first_of = [&](const std::vector<std::string>& candidates) {
        for (const auto& c : candidates) {
            const fs::path host = files::under_root(root, c);
            struct stat st {};
            if (::stat(host.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) continue;
            out.push_back({c, host.string()});
            return;
        }
    };
    first_of({"/run/nvidia-persistenced/socket", "/var/run/nvidia-persistenced/socket"});
    first_of({"/run/nvidia-fabricmanager/socket", "/var/run/nvidia-fabricmanager/socket"});
    first_of({"/tmp/nvidia-mps"});
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
    DeviceNode node{path, host.string(), std::nullopt, std::nullopt, std::nullopt, std::nullopt};
    if (S_ISCHR(st.st_mode)) {
        node.major = major(st.st_rdev);
        node.minor = minor(st.st_rdev);
        node.file_mode = st.st_mode & 07777;
        if (st.st_gid != 0) node.gid = st.st_gid;
    }
    return node;
}

std::vector<DeviceNode> find_imex_channels(const fs::path& dev_root) {
    const std::string dir = "/dev/nvidia-caps-imex-channels";
    std::vector<std::pair<unsigned long, DeviceNode>> found;
    for (const auto& name : glob_dir(files::under_root(dev_root, dir), "channel*")) {
        std::string_view digits = std::string_view(name).substr(7);
        unsigned long n = 0;
        auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
        if (ec != std::errc{} || p != digits.data() + digits.size()) continue;
        if (auto node = find_device_node(dev_root, dir + "/" + name)) found.emplace_back(n, *node);
    }
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<DeviceNode> out;
    for (auto& [n, node] : found) out.push_back(std::move(node));
    return out;
}

std::vector<std::string> drm_nodes(const fs::path& sysfs_root, const std::string& bus_id) {
    std::vector<std::string> out;
    if (bus_id.empty()) return out;
    for (const auto& name : glob_dir(sysfs_root / "bus/pci/devices" / bus_id / "drm", "*"))
        out.push_back("/dev/dri/" + name);
    return out;
}

namespace {

// Up to `size` bytes of `fd` at `offset`, no further than `file_size` (fewer at the end).
std::string read_span(int fd, uint64_t offset, uint64_t size, uint64_t file_size) {
    size = offset < file_size ? std::min(size, file_size - offset) : 0;
    std::string out(size, '\0');
    size_t got = 0;
    while (got < size) {
        const ssize_t n = ::pread(fd, out.data() + got, size - got, static_cast<off_t>(offset + got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += static_cast<size_t>(n);
    }
    out.resize(got);
    return out;
}

template <class T>
T field(std::string_view bytes, uint64_t at) {
    T value{};
    std::memcpy(&value, bytes.data() + at, sizeof value);
    return value;
}

}  // namespace

// Reads only what it needs, each piece with one pread: the ELF header, the section headers, the
// dynamic section and the SONAME's string (the create path runs this for every driver library).
Result<std::string> read_soname(const fs::path& path) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return fail(errno == ENOENT ? Code::not_found : Code::io, "cannot open {}: {}", path.string(), std::strerror(errno));
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return fail(Code::io, "cannot stat {}: {}", path.string(), std::strerror(errno));
    const uint64_t file_size = static_cast<uint64_t>(st.st_size);
    const std::string header = read_span(fd.get(), 0, 64, file_size);
    if (header.size() < 16 || std::memcmp(header.data(), "\x7f" "ELF", 4) != 0)
        return fail(Code::parse, "{}: not an ELF file", path.string());
    const bool is64 = header[4] == 2;
    if ((header[4] != 1 && header[4] != 2) || header[5] != 1)
        return fail(Code::parse, "{}: not a little-endian 32- or 64-bit ELF file", path.string());
    if (header.size() < (is64 ? 0x3Eu : 0x32u)) return fail(Code::parse, "{}: truncated ELF header", path.string());
    const uint64_t shoff = is64 ? field<uint64_t>(header, 0x28) : field<uint32_t>(header, 0x20);
    const uint16_t shentsize = field<uint16_t>(header, is64 ? 0x3A : 0x2E);
    const uint16_t shnum = field<uint16_t>(header, is64 ? 0x3C : 0x30);
    if (shnum > 0 && shentsize < (is64 ? 0x30u : 0x1Cu))
        return fail(Code::parse, "{}: section header entries of {} bytes", path.string(), shentsize);
    // A table that ends early fails only when the section wanted lies past its end.
    const std::string table = read_span(fd.get(), shoff, uint64_t{shnum} * shentsize, file_size);
    struct Section {
        uint32_t type = 0;
        uint64_t offset = 0, size = 0;
        uint32_t link = 0;
    };
    auto section = [&](uint16_t i, Section& s) {
        const uint64_t at = uint64_t{i} * shentsize;
        if (at + shentsize > table.size()) return false;
        s.type = field<uint32_t>(table, at + 4);
        s.offset = is64 ? field<uint64_t>(table, at + 0x18) : field<uint32_t>(table, at + 0x10);
        s.size = is64 ? field<uint64_t>(table, at + 0x20) : field<uint32_t>(table, at + 0x14);
        s.link = field<uint32_t>(table, at + (is64 ? 0x28 : 0x18));
        return true;
    };
    std::vector<std::string> sonames;
    for (uint16_t i = 0; i < shnum; ++i) {
        Section dyn;
        if (!section(i, dyn)) return fail(Code::parse, "{}: truncated section headers", path.string());
        if (dyn.type != 6 /* SHT_DYNAMIC */) continue;
        Section strtab;
        if (dyn.link >= shnum || !section(static_cast<uint16_t>(dyn.link), strtab))
            return fail(Code::parse, "{}: bad string table of the dynamic section", path.string());
        const uint64_t entry = is64 ? 16 : 8;
        // The entries the file holds (a section past its end is read as far as it goes).
        const std::string entries = read_span(fd.get(), dyn.offset, dyn.size, file_size);
        for (uint64_t at = 0; at + entry <= entries.size(); at += entry) {
            const int64_t tag = is64 ? field<int64_t>(entries, at) : field<int32_t>(entries, at);
            const uint64_t val = is64 ? field<uint64_t>(entries, at + 8) : field<uint32_t>(entries, at + 4);
            if (tag == 0) break;      // DT_NULL
            if (tag != 14) continue;  // DT_SONAME
            if (val >= strtab.size) return fail(Code::parse, "{}: SONAME outside the string table", path.string());
            // Up to its NUL, the end of the file, or 4 KiB (no library's name is longer).
            std::string name = read_span(fd.get(), strtab.offset + val, std::min<uint64_t>(strtab.size - val, 4096), file_size);
            name.resize(std::min(name.size(), name.find('\0')));
            sonames.push_back(std::move(name));
        }
        break;
    }
    if (sonames.size() > 1) return fail(Code::parse, "{}: several SONAMEs", path.string());
    return sonames.empty() ? std::string{} : sonames.front();
}

namespace {

// "libfoo.so.1.2" -> "libfoo.so"; "" when the name has no ".so" part (nvidia-ctk's getSoLink).
std::string so_link(std::string name) {
    for (;;) {
        const auto dot = name.rfind('.');
        if (dot == std::string::npos || dot == 0) return "";
        if (name.substr(dot) == ".so") return name;
        name.resize(dot);
    }
}

bool is_link(const fs::path& p) {
    std::error_code ec;
    return fs::is_symlink(fs::symlink_status(p, ec));
}

bool matches(const std::string& pattern, const std::string& name) {
    return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

}  // namespace

std::vector<std::string> library_links(const HostFile& lib) {
    std::vector<std::string> links;
    const fs::path container(lib.path);
    const std::string dir = container.parent_path().string();
    const std::string name = container.filename().string();
    // Driver libraries carry a version suffix "x.y" or more (nvidia-ctk matches "<lib>.*.*").
    if (matches("libcuda.so.*.*", name)) links.push_back("libcuda.so.1::" + dir + "/libcuda.so");
    else if (matches("libGLX_nvidia.so.*.*", name)) links.push_back(name + "::" + dir + "/libGLX_indirect.so.0");
    else if (matches("libnvidia-opticalflow.so.*.*", name))
        links.push_back("libnvidia-opticalflow.so.1::" + dir + "/libnvidia-opticalflow.so");
    if (!matches("*.*.*", name)) return links;

    const fs::path host_dir = fs::path(lib.host_path).parent_path();
    auto soname = read_soname(lib.host_path);
    if (!soname) {
        log::debug("cdi: no SONAME links for {}: {}", lib.host_path, soname.error().message);
        return links;
    }
    std::string so = soname->empty() ? name : *soname;
    if (so != name && is_link(host_dir / so)) links.push_back(name + "::" + dir + "/" + so);
    const std::string dev_link = so_link(so);
    if (!dev_link.empty() && dev_link != so && is_link(host_dir / dev_link))
        links.push_back(so + "::" + dir + "/" + dev_link);
    return links;
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

std::string parse_proc_driver_version(std::string_view text) {
    static const std::regex re(R"(NVRM version:.*Kernel Module(?: for [a-z0-9_]+)?\s+([0-9]+\.[0-9]+(?:\.[0-9]+)?))");
    std::string s(text);
    std::smatch m;
    if (std::regex_search(s, m, re)) return m[1].str();
    return "";
}

}  // namespace kgpu::cdi
