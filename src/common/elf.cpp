#include "common/elf.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <gnu/libc-version.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <vector>

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

namespace {

// The sections strip_debug drops: unallocated debug sections and the symbol table, with the symbol
// table's own string table (never the section names').
template <class NameOf>
std::vector<bool> debug_sections(const std::vector<Elf64_Shdr>& sh, size_t shstrndx, NameOf name_of) {
    std::vector<bool> drop(sh.size(), false);
    for (size_t i = 1; i < sh.size(); ++i) {
        if (sh[i].sh_flags & SHF_ALLOC) continue;
        const std::string_view n = name_of(sh[i]);
        if (n.starts_with(".debug_") || n.starts_with(".zdebug_") || sh[i].sh_type == SHT_SYMTAB) {
            drop[i] = true;
            if (sh[i].sh_type == SHT_SYMTAB && sh[i].sh_link < sh.size() && sh[i].sh_link != shstrndx &&
                !(sh[sh[i].sh_link].sh_flags & SHF_ALLOC))
                drop[sh[i].sh_link] = true;
        }
    }
    return drop;
}

// Where what the loader reads ends: the headers, every segment and every allocated section.
Result<uint64_t> loaded_end(const Image& im, const std::vector<Elf64_Shdr>& sh, std::string_view what) {
    const Elf64_Ehdr& eh = im.eh;
    uint64_t end = uint64_t{eh.e_phoff} + uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr);
    end = std::max<uint64_t>(end, sizeof(Elf64_Ehdr));
    for (unsigned i = 0; i < eh.e_phnum; ++i) {
        const auto ph = im.phdr(i);
        if (!im.in_bounds(ph.p_offset, ph.p_filesz)) return fail(Code::parse, "{}: a segment lies out of bounds", what);
        end = std::max(end, ph.p_offset + ph.p_filesz);
    }
    for (size_t i = 1; i < sh.size(); ++i) {
        if (!(sh[i].sh_flags & SHF_ALLOC) || sh[i].sh_type == SHT_NOBITS) continue;
        if (!im.in_bounds(sh[i].sh_offset, sh[i].sh_size)) return fail(Code::parse, "{}: section {} out of bounds", what, i);
        end = std::max(end, sh[i].sh_offset + sh[i].sh_size);
    }
    return end;
}

}  // namespace

Result<Stripped> strip_debug(std::string_view image, std::string_view what) {
    auto im = parse(image, what);
    if (!im) return std::unexpected(im.error());
    const Elf64_Ehdr& eh = im->eh;
    if (eh.e_shnum == 0 || eh.e_shoff == 0) return Stripped{std::string(image), 0};  // no section headers
    if (eh.e_shentsize != sizeof(Elf64_Shdr) || !im->in_bounds(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr)) ||
        eh.e_shstrndx >= eh.e_shnum)
        return fail(Code::parse, "{}: section headers out of bounds", what);
    std::vector<Elf64_Shdr> sh(eh.e_shnum);
    std::memcpy(sh.data(), image.data() + eh.e_shoff, sh.size() * sizeof(Elf64_Shdr));
    const Elf64_Shdr& names = sh[eh.e_shstrndx];
    if (names.sh_type == SHT_NOBITS || !im->in_bounds(names.sh_offset, names.sh_size))
        return fail(Code::parse, "{}: the section name table is out of bounds", what);
    auto name_of = [&](const Elf64_Shdr& s) -> std::string_view {
        if (s.sh_name >= names.sh_size) return {};
        std::string_view n = image.substr(names.sh_offset + s.sh_name, names.sh_size - s.sh_name);
        return n.substr(0, n.find('\0'));
    };
    const std::vector<bool> drop = debug_sections(sh, eh.e_shstrndx, name_of);
    size_t dropped = 0, first_dropped = sh.size(), last_alloc = 0;
    for (size_t i = 1; i < sh.size(); ++i) {
        if (drop[i]) {
            ++dropped;
            first_dropped = std::min(first_dropped, i);
        }
        if (sh[i].sh_flags & SHF_ALLOC) last_alloc = i;
    }
    if (dropped == 0) return Stripped{std::string(image), 0};
    if (first_dropped < last_alloc)
        return fail(Code::not_supported, "{}: a debug section (section {}) precedes an allocated one; strip it with "
                    "`strip --strip-debug` first", what, first_dropped);
    // New section numbers: allocated sections keep theirs (symbols refer to them).
    std::vector<size_t> number(sh.size(), 0);
    size_t next = 0;
    for (size_t i = 0; i < sh.size(); ++i)
        if (!drop[i]) number[i] = next++;
    // Everything the loader reads stays where it is.
    auto end = loaded_end(*im, sh, what);
    if (!end) return std::unexpected(end.error());
    std::string out(image.substr(0, *end));
    auto align = [&out](uint64_t a) {
        if (a > 1 && out.size() % a) out.append(a - out.size() % a, '\0');
    };
    std::vector<Elf64_Shdr> kept;
    for (size_t i = 0; i < sh.size(); ++i) {
        if (drop[i]) continue;
        Elf64_Shdr s = sh[i];
        if (s.sh_link != 0 && s.sh_link < sh.size()) {
            if (drop[s.sh_link])
                return fail(Code::not_supported, "{}: section {} links the dropped section {}", what, name_of(sh[i]),
                            name_of(sh[s.sh_link]));
            s.sh_link = static_cast<Elf64_Word>(number[s.sh_link]);
        }
        if ((s.sh_flags & SHF_INFO_LINK) && s.sh_info < sh.size()) {
            if (drop[s.sh_info])
                return fail(Code::not_supported, "{}: section {} refers to the dropped section {}", what, name_of(sh[i]),
                            name_of(sh[s.sh_info]));
            s.sh_info = static_cast<Elf64_Word>(number[s.sh_info]);
        }
        if (i != 0 && !(s.sh_flags & SHF_ALLOC) && s.sh_type != SHT_NOBITS) {
            if (!im->in_bounds(s.sh_offset, s.sh_size)) return fail(Code::parse, "{}: section {} out of bounds", what, i);
            align(s.sh_addralign);
            const uint64_t at = out.size();
            out.append(image.substr(s.sh_offset, s.sh_size));
            s.sh_offset = at;
        }
        kept.push_back(s);
    }
    align(8);
    Elf64_Ehdr neh = eh;
    neh.e_shoff = out.size();
    neh.e_shnum = static_cast<Elf64_Half>(kept.size());
    neh.e_shstrndx = static_cast<Elf64_Half>(number[eh.e_shstrndx]);
    out.append(reinterpret_cast<const char*>(kept.data()), kept.size() * sizeof(Elf64_Shdr));
    std::memcpy(out.data(), &neh, sizeof neh);
    return Stripped{std::move(out), dropped};
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
