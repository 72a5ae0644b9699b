#include "common/elf.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <gnu/libc-version.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>

namespace kgpu::elf {

namespace fs = std::filesystem;

namespace {

struct Image {
    Elf64_Ehdr eh;
    std::string_view bytes;
    Elf64_Phdr phdr(unsigned i) const {
        Elf64_Phdr ph;
        std::memcpy(&ph, bytes.data() + eh.e_phoff + i * sizeof ph, sizeof ph);
        return ph;
    }
    bool in_bounds(uint64_t offset, uint64_t size) const { return offset <= bytes.size() && bytes.size() - offset >= size; }
    // The file offset of virtual address `vaddr` (through the PT_LOAD segment that holds it).
    std::optional<uint64_t> offset_of(uint64_t vaddr) const {
        for (unsigned i = 0; i < eh.e_phnum; ++i) {
            auto ph = phdr(i);
            if (ph.p_type == PT_LOAD && vaddr >= ph.p_vaddr && vaddr - ph.p_vaddr < ph.p_filesz)
                return ph.p_offset + (vaddr - ph.p_vaddr);
        }
        return std::nullopt;
    }
};

Result<Image> parse(std::string_view image, std::string_view what) {
    Image im{{}, image};
    if (image.size() < sizeof im.eh || std::memcmp(image.data(), ELFMAG, SELFMAG) != 0)
        return fail(Code::parse, "{}: not an ELF file", what);
    std::memcpy(&im.eh, image.data(), sizeof im.eh);
    if (im.eh.e_ident[EI_CLASS] != ELFCLASS64 || im.eh.e_ident[EI_DATA] != ELFDATA2LSB)
        return fail(Code::parse, "{}: not a 64-bit little-endian ELF file", what);
    if (im.eh.e_phentsize != sizeof(Elf64_Phdr) || !im.in_bounds(im.eh.e_phoff, uint64_t{im.eh.e_phnum} * sizeof(Elf64_Phdr)))
        return fail(Code::parse, "{}: program headers out of bounds", what);
    return im;
}

// The NUL-terminated string at `offset`, within `limit` bytes.
Result<Slot> string_at(const Image& im, uint64_t offset, uint64_t limit, std::string_view what, std::string_view name) {
    if (!im.in_bounds(offset, limit) || limit == 0) return fail(Code::parse, "{}: {} out of bounds", what, name);
    std::string_view s = im.bytes.substr(offset, limit);
    const size_t nul = s.find('\0');
    if (nul == std::string_view::npos) return fail(Code::parse, "{}: {} is not NUL-terminated", what, name);
    return Slot{std::string(s.substr(0, nul)), offset, nul + 1};
}

}  // namespace

Result<Slot> read_interpreter(std::string_view image, std::string_view what) {
    auto im = parse(image, what);
    if (!im) return std::unexpected(im.error());
    for (unsigned i = 0; i < im->eh.e_phnum; ++i) {
        auto ph = im->phdr(i);
        if (ph.p_type != PT_INTERP) continue;
        auto slot = string_at(*im, ph.p_offset, ph.p_filesz, what, "PT_INTERP");
        if (slot) slot->room = ph.p_filesz;  // the NUL padding after the path is the interpreter's too
        return slot;
    }
    return fail(Code::not_found, "{}: no program interpreter (statically linked)", what);
}

Result<Slot> read_rpath(std::string_view image, std::string_view what) {
    auto im = parse(image, what);
    if (!im) return std::unexpected(im.error());
    for (unsigned i = 0; i < im->eh.e_phnum; ++i) {
        auto ph = im->phdr(i);
        if (ph.p_type != PT_DYNAMIC) continue;
        if (!im->in_bounds(ph.p_offset, ph.p_filesz)) return fail(Code::parse, "{}: PT_DYNAMIC out of bounds", what);
        std::optional<uint64_t> strtab, strsz, rpath;
        for (uint64_t at = ph.p_offset; at + sizeof(Elf64_Dyn) <= ph.p_offset + ph.p_filesz; at += sizeof(Elf64_Dyn)) {
            Elf64_Dyn d;
            std::memcpy(&d, image.data() + at, sizeof d);
            if (d.d_tag == DT_NULL) break;
            if (d.d_tag == DT_STRTAB) strtab = d.d_un.d_ptr;
            if (d.d_tag == DT_STRSZ) strsz = d.d_un.d_val;
            if (d.d_tag == DT_RPATH || d.d_tag == DT_RUNPATH) rpath = d.d_un.d_val;
        }
        if (!rpath) break;
        if (!strtab || !strsz || *rpath >= *strsz) return fail(Code::parse, "{}: DT_RPATH out of its string table", what);
        auto table = im->offset_of(*strtab);
        if (!table) return fail(Code::parse, "{}: DT_STRTAB is not in a loaded segment", what);
        return string_at(*im, *table + *rpath, *strsz - *rpath, what, "DT_RPATH");
    }
    return fail(Code::not_found, "{}: no RPATH", what);
}

Status rewrite(std::string& image, const Slot& slot, const std::string& value, std::string_view what) {
    if (value.empty() || value.front() != '/')
        return fail(Code::invalid_argument, "{}: '{}': expected an absolute path", what, value);
    if (value.size() + 1 > slot.room || value.find('\0') != std::string::npos || slot.offset > image.size() ||
        image.size() - slot.offset < slot.room)
        return fail(Code::invalid_argument,
                    "{}: {} ({} bytes) does not fit the {} bytes the build reserved for it (src/CMakeLists.txt pads "
                    "them): choose a shorter --install-dir",
                    what, value, value.size(), slot.room - 1);
    std::memset(image.data() + slot.offset, 0, slot.room);
    std::memcpy(image.data() + slot.offset, value.data(), value.size());
    return {};
}

std::string running_libc_dir() {
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&::gnu_get_libc_version), &info) == 0 || info.dli_fname == nullptr) return {};
    std::error_code ec;
    fs::path p = fs::weakly_canonical(info.dli_fname, ec);
    if (ec || !p.is_absolute()) return {};
    return p.parent_path().string();
}

namespace {

// The program interpreter this process was started with (PT_INTERP of the main program, in memory:
// no /proc needed), "" when none.
std::string running_interpreter() {
    std::string out;
    ::dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) {
            for (int i = 0; i < info->dlpi_phnum; ++i)
                if (info->dlpi_phdr[i].p_type == PT_INTERP)
                    *static_cast<std::string*>(data) = reinterpret_cast<const char*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
            return 1;  // the first object is the main program
        },
        &out);
    return out;
}

}  // namespace

const std::string& pin_carried_glibc() {
    static std::once_flag once;
    static std::string dir;
    std::call_once(once, [] {
        // Carried: the loader and libc come from one directory that is not the system's (the
        // system's loader is /lib64/ld-linux-x86-64.so.2 or /lib/ld-linux-aarch64.so.1, padded).
        const std::string loader_dir = fs::path(running_interpreter()).lexically_normal().parent_path().string();
        Dl_info info{};
        if (::dladdr(reinterpret_cast<void*>(&::gnu_get_libc_version), &info) == 0 || info.dli_fname == nullptr) return;
        const std::string libc_dir = fs::path(info.dli_fname).lexically_normal().parent_path().string();
        if (loader_dir.empty() || libc_dir != loader_dir || loader_dir == "/lib64" || loader_dir == "/lib") return;
        for (std::string_view name : kCarriedLibraries) {
            const std::string p = libc_dir + "/" + std::string(name);
            // Kept loaded for the life of the process (the handle is never closed).
            if (::access(p.c_str(), F_OK) == 0) (void)::dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
        }
        dir = libc_dir;
    });
    return dir;
}

}  // namespace kgpu::elf
