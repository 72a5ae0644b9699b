// The ELF program interpreter (PT_INTERP) of an executable, read and rewritten in place, and the
// glibc a copy of kgpu carries next to it.
//
// Why: `kgpu runtime install` copies kgpu onto the host, where containerd runs it as
// kgpu-container-runtime and runc as the CDI hook. kgpu is static apart from glibc, but a build on
// Debian 12 needs glibc 2.36, newer than most GPU nodes' (Ubuntu 22.04: 2.35, RHEL 8: 2.28). So
// the install carries the image's own loader and glibc into <install-dir>/lib/<hash> (a directory
// per glibc, toolkit/install.h) and points the copy's PT_INTERP there; the link gives kgpu a padded
// interpreter path (src/CMakeLists.txt) so the new path fits, and a padded RPATH
// ($ORIGIN/lib////...) that the install rewrites to <install-dir>/lib/<hash> so that loader finds
// the carried libc first (an absolute path: $ORIGIN needs
// /proc/self/exe, which a chroot or an early hook may not have).
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "common/error.h"

namespace kgpu::elf {

// A NUL-terminated string in the file that can be rewritten in place.
struct Slot {
    std::string value;     // as written, without the terminating NUL
    size_t offset = 0;     // of the string in the file
    size_t room = 0;       // bytes that may be rewritten, the NUL included
};

// PT_INTERP of a 64-bit little-endian ELF image (x86_64, aarch64); room is the segment's size.
// Errors: parse when `image` is not such an ELF file or a header is out of bounds; not_found
// when it has no interpreter (a static executable). `what` names the file in messages.
Result<Slot> read_interpreter(std::string_view image, std::string_view what);

// The DT_RPATH (or DT_RUNPATH) string of the same kind of image; room is its length plus the
// NUL. Errors as read_interpreter's (not_found: no RPATH/RUNPATH).
Result<Slot> read_rpath(std::string_view image, std::string_view what);

// Writes `value` into `slot` of `image`, NUL-padded to the slot's room. Errors: invalid_argument
// when `value` is not an absolute path or does not fit (`what` names the file and the cause).
Status rewrite(std::string& image, const Slot& slot, const std::string& value, std::string_view what);

// What strip_debug() did.
struct Stripped {
    std::string image;         // the image without debug information (the input when there was none)
    size_t sections = 0;       // how many sections were dropped
};

// `image` (a 64-bit little-endian ELF executable or shared object) without what only a debugger
// reads: the non-allocated sections .debug_*, .zdebug_*, .symtab and the string table it links
// (as `strip --strip-debug` plus the symbol table). Nothing the loader reads moves: every byte up
// to the end of the last loaded segment and the last allocated section is kept in place, the
// kept non-allocated sections (.comment, .shstrtab, ...) follow it, then the section headers.
// Why: `kgpu runtime install` copies the binary every container start executes (as the runtime
// and the hooks); from a build tree that is the 47.7 MB file with debug information, and each
// exec pays for it (about +21 ms per container under load). A node has no binutils, so this is
// kgpu's own code. Errors: parse when `image` is not such an ELF file or a header lies out of
// bounds; not_supported when a dropped section precedes an allocated one or a kept section
// links a dropped one (section numbers would change; `strip` can, this does not).
Result<Stripped> strip_debug(std::string_view image, std::string_view what);

// The glibc libraries a carried copy of kgpu needs besides the loader: what kgpu links (libc,
// libm) and what the driver's libnvidia-ml.so.1, which kgpu dlopens, links (libm, libdl,
// libpthread, librt). All must come from the same glibc as the loader: one process cannot mix two.
inline constexpr std::array<std::string_view, 5> kCarriedLibraries = {"libc.so.6", "libm.so.6", "libpthread.so.0",
                                                                      "libdl.so.2", "librt.so.1"};

// The directory of the libc.so.6 this process runs on (dladdr), or "" when unknown.
std::string running_libc_dir();

// When this process runs on a carried glibc (its loader and libc come from one directory, not the
// system's /lib64 or /lib: <install-dir>/lib/<hash>), loads
// each of kCarriedLibraries from there, once, so that a library dlopened later (the driver's
// libnvidia-ml.so.1) that links them by soname gets these and never the host's: the loader reuses
// an object already loaded under that soname. The executable's RPATH does the same for libraries
// without a RUNPATH of their own; this covers those with one. Returns the directory used, "" when
// not running on a carried glibc. Thread-safe; cheap after the first call.
const std::string& pin_carried_glibc();

}  // namespace kgpu::elf
