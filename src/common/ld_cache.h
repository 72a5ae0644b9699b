// glibc's dynamic linker cache (/etc/ld.so.cache, written by ldconfig), read the way
// nvidia-ctk v1.20 reads it (internal/ldcache) to find driver libraries installed in a
// directory that only ld.so.conf(.d) names (Debian's /usr/lib/x86_64-linux-gnu/nvidia/current,
// a .run install elsewhere, a driver root under /run/nvidia/driver).
//
// The format (glibc elf/cache.c, sysdeps/generic/dl-cache.h), little-endian:
//  - the new format: a 48-byte header "glibc-ld.so.cache" "1.1", nlibs (u32), the string
//    table's length (u32), 20 bytes of flags/extension offset/unused; then nlibs 24-byte entries
//    {flags i32, key u32, value u32, osversion u32, hwcap u64}; key (the SONAME) and value (the
//    path) are offsets of NUL-terminated strings from the start of this header;
//  - the old format "ld.so-1.7.0\0", nlibs (u32), nlibs 12-byte entries {flags, key, value},
//    which glibc before 2.32 (and `ldconfig -c compat`) writes with the new format appended
//    after them, aligned to 8 bytes: then the new part is the one read.
// flags: the low byte is the type (bit 0: ELF), the next the architecture (x86-64 0x0300,
// AArch64 0x0a00, ppc64le 0x0500 are 64-bit; i386 0x0000, x32 0x0800, ARM hard-float 0x0900
// are 32-bit; any other is skipped).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace kgpu::ldcache {

inline constexpr std::string_view kPath = "/etc/ld.so.cache";

struct Entry {
    std::string name;  // the key: the SONAME, e.g. libcuda.so.1
    std::string path;  // the value: e.g. /usr/lib/x86_64-linux-gnu/libcuda.so.1
    int bits = 64;     // 32 or 64
};

// The ELF entries of a cache, in the cache's order. Entries of another type or architecture, or
// whose strings lie outside the file or are empty, are skipped (as nvidia-ctk does). Errors:
// parse naming `source` when the data is not a "glibc-ld.so.cache1.1" cache (alone or after an
// old-format part) or is cut short of its header or entries.
Result<std::vector<Entry>> parse(std::string_view data, std::string_view source);

// The paths of the 64-bit libraries of `entries`, each once, in order, under `root` (the
// cache's paths are the ones the root's own loader sees).
std::vector<std::string> libraries64(const std::vector<Entry>& entries, const std::filesystem::path& root = "/");

// The directories under a driver root where nvidia-ctk v1.20's library locator looks before it
// falls back to the root's cache (pkg/lookup/library.go), in its order ("/" first). The CDI
// code's driver libraries and NVML's libnvidia-ml.so.1 are looked for in the same places.
const std::vector<std::string>& driver_library_dirs();

// <root>/etc/ld.so.cache parsed. Errors: not_found when it does not exist, io when it cannot be
// read or is larger than 256 MiB, parse as above.
Result<std::vector<Entry>> read(const std::filesystem::path& root);

}  // namespace kgpu::ldcache
