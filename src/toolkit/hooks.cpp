// The CDI createContainer hooks but update-ldcache (ldcache.cpp): create-symlinks,
// enable-cuda-compat, disable-device-node-modification, update-application-profile, chmod.
#include "toolkit/hooks.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <optional>
#include <regex>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/elf.h"
#include "common/files.h"
#include "common/strings.h"
#include "toolkit/root.h"

namespace kgpu::toolkit {

namespace fs = std::filesystem;
using json = nlohmann::json;

Result<std::string> container_root_from_state(std::string_view state_json) {
    json state;
    try {
        state = json::parse(state_json);
    } catch (const json::exception& e) {
        return fail(Code::parse, "container state (stdin): not JSON: {}", e.what());
    }
    if (!state.is_object() || !state.contains("bundle") || !state["bundle"].is_string())
        return fail(Code::invalid_argument, "container state: no \"bundle\" string (expected the OCI state runc passes to hooks)");
    const fs::path bundle = state["bundle"].get<std::string>();
    auto text = files::read(bundle / "config.json");
    if (!text) return std::unexpected(text.error());
    json spec;
    try {
        spec = json::parse(*text);
    } catch (const json::exception& e) {
        return fail(Code::parse, "{}: not JSON: {}", (bundle / "config.json").string(), e.what());
    }
    std::string root;
    if (spec.is_object() && spec.contains("root") && spec["root"].is_object() && spec["root"].contains("path") &&
        spec["root"]["path"].is_string())
        root = spec["root"]["path"].get<std::string>();
    if (root.empty()) return fail(Code::invalid_argument, "{}: no root.path", (bundle / "config.json").string());
    return fs::path(root).is_absolute() ? root : (bundle / root).lexically_normal().string();
}

Result<std::string> load_container_root(const std::string& container_spec) {
    std::string text;
    if (container_spec.empty() || container_spec == "-") {
        text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    } else {
        auto t = files::read(container_spec);
        if (!t) return std::unexpected(t.error());
        text = std::move(*t);
    }
    return container_root_from_state(text);
}

// ---- create-symlinks -------------------------------------------------------------------------

Status create_symlinks(const std::string& root, const std::vector<std::string>& links) {
    auto r = RootDir::open(root);
    if (!r) return std::unexpected(r.error());
    std::set<std::string> done;
    for (const auto& spec : links) {
        if (!done.insert(spec).second) continue;
        auto sep = spec.find("::");
        if (sep == std::string::npos || spec.find("::", sep + 2) != std::string::npos || sep == 0 || sep + 2 == spec.size())
            return fail(Code::invalid_argument, "create-symlinks: --link '{}': expected <target>::<link>", spec);
        const std::string target = spec.substr(0, sep), link = spec.substr(sep + 2);
        if (auto current = r->readlink(link); current && *current == target) continue;
        if (auto st = r->symlink(target, link); !st) return std::unexpected(st.error().context("create-symlinks"));
    }
    return {};
}

// ---- enable-cuda-compat ----------------------------------------------------------------------

namespace {

template <class T>
bool read_at(std::string_view data, size_t off, T& out) {
    if (off > data.size() || data.size() - off < sizeof(T)) return false;
    std::memcpy(&out, data.data() + off, sizeof(T));
    return true;
}

}  // namespace

std::optional<std::string> cuda_compat_note(std::string_view elf) {
    // ELF64 little-endian only (x86_64, aarch64).
    if (elf.size() < 64 || elf.substr(0, 4) != "\x7f" "ELF" || elf[4] != 2 || elf[5] != 1) return std::nullopt;
    std::uint64_t shoff = 0;
    std::uint16_t shentsize = 0, shnum = 0, shstrndx = 0;
    if (!read_at(elf, 0x28, shoff) || !read_at(elf, 0x3A, shentsize) || !read_at(elf, 0x3C, shnum) ||
        !read_at(elf, 0x3E, shstrndx) || shentsize < 64 || shstrndx >= shnum)
        return std::nullopt;
    struct Section {
        std::uint32_t name, type;
        std::uint64_t offset, size, align;
    };
    auto section = [&](unsigned i, Section& s) {
        size_t base = shoff + static_cast<size_t>(i) * shentsize;
        return read_at(elf, base, s.name) && read_at(elf, base + 4, s.type) && read_at(elf, base + 24, s.offset) &&
               read_at(elf, base + 32, s.size) && read_at(elf, base + 48, s.align);
    };
    Section strtab{};
    if (!section(shstrndx, strtab) || strtab.offset > elf.size() || strtab.size > elf.size() - strtab.offset) return std::nullopt;
    std::string_view names = elf.substr(strtab.offset, strtab.size);
    for (unsigned i = 0; i < shnum; ++i) {
        Section s{};
        if (!section(i, s) || s.type != 7 /* SHT_NOTE */ || s.name >= names.size()) continue;
        std::string_view name = names.substr(s.name);
        name = name.substr(0, name.find('\0'));
        if (name != ".note.cuda.fwd_compatibility") continue;
        if (s.offset > elf.size() || s.size > elf.size() - s.offset) return std::nullopt;
        std::string_view note = elf.substr(s.offset, s.size);
        std::uint32_t namesz = 0, descsz = 0;
        if (!read_at(note, 0, namesz) || !read_at(note, 4, descsz) || namesz == 0 || descsz == 0) return std::nullopt;
        const std::uint64_t align = s.align > 1 ? s.align : 4;
        const size_t name_at = 12, desc_at = name_at + static_cast<size_t>((namesz + align - 1) & ~(align - 1));
        if (name_at + namesz > note.size() || desc_at > note.size()) return std::nullopt;
        std::string_view owner = note.substr(name_at, namesz);
        while (!owner.empty() && owner.back() == '\0') owner.remove_suffix(1);
        if (owner != "NVIDIA Corporation") return std::nullopt;
        std::string_view desc = note.substr(desc_at, std::min<size_t>(descsz, note.size() - desc_at));
        while (!desc.empty() && desc.back() == '\0') desc.remove_suffix(1);
        return std::string(desc);
    }
    return std::nullopt;
}

bool use_cuda_compat(const std::string& file_name, const std::optional<std::string>& note, const std::string& driver,
                     const std::string& cuda) {
    std::string_view v = file_name;
    if (v.starts_with("libcuda.so.")) v.remove_prefix(11);
    auto compat = strings::version_parts(v);
    auto host = strings::version_parts(driver);
    auto host_cuda = strings::version_parts(cuda);
    if (note) {
        json h;
        try {
            h = json::parse(*note);
        } catch (const json::exception&) {
            h = nullptr;
        }
        if (h.is_object()) {
            if (!compat || !host) {
                if (!host_cuda) return false;
                auto want = h.contains("CUDA Version") && h["CUDA Version"].is_string()
                                ? strings::version_parts(h["CUDA Version"].get<std::string>())
                                : std::nullopt;
                return want && strings::compare_versions(*want, *host_cuda) > 0;
            }
            bool branch = false;
            if (h.contains("Driver") && h["Driver"].is_array())
                for (const auto& d : h["Driver"])
                    if (d.is_number_integer() && d.get<long>() >= 0 && static_cast<unsigned long>(d.get<long>()) == host->front())
                        branch = true;
            return branch && strings::compare_versions(*compat, *host) > 0;
        }
    }
    if (!cuda.empty()) return false;
    if (!compat || !host) return false;
    return host->front() < compat->front();
}

Status enable_cuda_compat(const std::string& root, const CudaCompatOptions& o) {
    if (o.host_driver_version.empty() && o.host_cuda_version.empty()) return {};
    auto r = RootDir::open(root);
    if (!r) return std::unexpected(r.error());
    auto names = r->list(o.compat_dir);
    if (!names) return {};  // no compat directory in the image
    std::vector<std::string> libs;
    for (const auto& n : *names) {
        if (::fnmatch("libcuda.so.*.*", n.c_str(), 0) != 0) continue;
        auto fd = r->open_at(o.compat_dir + "/" + n, O_PATH | O_NOFOLLOW);
        struct stat st {};
        if (fd && ::fstat(fd->get(), &st) == 0 && S_ISREG(st.st_mode)) libs.push_back(n);
    }
    if (libs.size() != 1) return {};  // none, or ambiguous (NVIDIA warns and does nothing)
    auto fd = r->open_at(o.compat_dir + "/" + libs[0], O_RDONLY);
    if (!fd) return std::unexpected(fd.error().context("enable-cuda-compat"));
    auto bytes = files::read(fd_path(fd->get()));
    if (!bytes) return std::unexpected(bytes.error().context("enable-cuda-compat"));
    if (!use_cuda_compat(libs[0], cuda_compat_note(*bytes), o.host_driver_version, o.host_cuda_version)) return {};
    std::string dir = fs::path("/" + o.compat_dir).lexically_normal().string();
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    return r->write_file("/etc/ld.so.conf.d/00-compat-" + random_suffix() + ".conf", dir + "\n", 0644);
}

// ---- disable-device-node-modification --------------------------------------------------------

std::optional<std::string> params_without_device_modification(std::string_view params) {
    std::string out;
    bool changed = false;
    for (auto line : strings::split(params, '\n')) {
        if (line.starts_with("ModifyDeviceFiles: ")) {
            if (line == "ModifyDeviceFiles: 0") return std::nullopt;
            if (line == "ModifyDeviceFiles: 1") {
                line = "ModifyDeviceFiles: 0";
                changed = true;
            }
        }
        out += line;
        out += '\n';
    }
    if (!params.empty() && params.back() == '\n') out.pop_back();  // split's final empty piece
    if (!changed) return std::nullopt;
    return out;
}

Status disable_device_node_modification(const std::string& root, const std::string& params_path) {
    auto text = files::read(params_path);
    if (!text) return text.error().code == Code::not_found ? Status{} : std::unexpected(text.error());
    auto modified = params_without_device_modification(*text);
    if (!modified) return {};
    auto r = RootDir::open(root);
    if (!r) return std::unexpected(r.error());
    const std::string scratch = "/run/kgpu-hook-" + random_suffix();
    auto dir = r->mkdir_all(scratch, 0755);
    if (!dir) return std::unexpected(dir.error());
    const std::string opts = fmt::format("size={},mode=0755", std::max<size_t>(modified->size(), 4096));
    if (::mount("tmpfs", fd_path(dir->get()).c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts.c_str()) != 0)
        return fail(Code::io, "disable-device-node-modification: tmpfs on {}: {}", scratch, std::strerror(errno));
    if (auto st = r->write_file(scratch + "/params", *modified, 0444); !st) return st;
    auto src = r->open_at(scratch + "/params", O_PATH);
    if (!src) return std::unexpected(src.error());
    auto dst = r->open_at("/proc/driver/nvidia/params", O_PATH);
    if (!dst) return std::unexpected(dst.error().context("disable-device-node-modification"));
    if (::mount(fd_path(src->get()).c_str(), fd_path(dst->get()).c_str(), nullptr, MS_BIND, nullptr) != 0)
        return fail(Code::io, "disable-device-node-modification: bind mount over /proc/driver/nvidia/params: {}",
                    std::strerror(errno));
    auto bound = r->open_at("/proc/driver/nvidia/params", O_PATH);
    if (bound) ::mount(nullptr, fd_path(bound->get()).c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NODEV | MS_NOSUID, nullptr);
    return {};
}

// ---- update-application-profile --------------------------------------------------------------

Status update_application_profile(const std::string& root) {
    auto r = RootDir::open(root);
    if (!r) return std::unexpected(r.error());
    auto names = r->list("/dev");
    if (!names) return {};
    static const std::regex gpu_node("^nvidia[0-9]+$");
    std::uint64_t mask = 0;
    for (const auto& n : *names) {
        if (!std::regex_match(n, gpu_node)) continue;
        auto fd = r->open_at("/dev/" + n, O_PATH | O_NOFOLLOW);
        struct stat st {};
        if (!fd || ::fstat(fd->get(), &st) != 0 || !S_ISCHR(st.st_mode)) continue;
        unsigned minor_number = minor(st.st_rdev);
        if (minor_number < 64) mask |= std::uint64_t{1} << minor_number;
    }
    if (mask == 0) return {};
    const std::string conf = fmt::format(
        R"({{"profiles":[{{"name":"_container_","settings":["EGLVisibleDGPUDevices",0x{:x}]}}],"rules":[{{"pattern":[],"profile":"_container_"}}]}})",
        mask);
    return r->write_file("/etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf", conf, 0444, false, 0555);
}

// ---- chmod -----------------------------------------------------------------------------------

Status chmod_paths(const std::string& root, const std::vector<std::string>& paths, unsigned mode) {
    auto r = RootDir::open(root);
    if (!r) return std::unexpected(r.error());
    for (const auto& p : paths) {
        auto fd = r->open_at(p, O_PATH);
        if (!fd) continue;  // NVIDIA skips paths that do not exist
        struct stat st {};
        if (::fstat(fd->get(), &st) == 0 && (st.st_mode & 07777) == mode) continue;
        if (::fchmodat(AT_FDCWD, fd_path(fd->get()).c_str(), mode, 0) != 0 && errno != EPERM && errno != EACCES)
            return fail(Code::io, "chmod {} in {}: {}", p, root, std::strerror(errno));
    }
    return {};
}

}  // namespace kgpu::toolkit
