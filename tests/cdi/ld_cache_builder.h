// Writes glibc ld.so.cache files from the format (common/ld_cache.h describes it), for tests
// that cannot run ldconfig (not root, or no ldconfig): the new format alone, as glibc >= 2.32
// writes it, or the old format with the new one appended (glibc < 2.32, `ldconfig -c compat`).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kgpu::test {

struct CacheEntry {
    std::string key;    // SONAME
    std::string value;  // path
    int32_t flags = 0x0303;  // ELF libc6, x86-64
};

inline void put32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }

// The bytes of a cache holding `entries`; `compat` prepends the old format's part.
inline std::string ld_so_cache(const std::vector<CacheEntry>& entries, bool compat = false) {
    // Strings after the new format's entries; offsets from the new header's start.
    const uint32_t new_size = 48 + 24 * static_cast<uint32_t>(entries.size());
    std::string strings;
    std::vector<std::pair<uint32_t, uint32_t>> offsets;
    for (const auto& e : entries) {
        const uint32_t key = new_size + static_cast<uint32_t>(strings.size());
        strings += e.key + '\0';
        const uint32_t value = new_size + static_cast<uint32_t>(strings.size());
        strings += e.value + '\0';
        offsets.emplace_back(key, value);
    }
    std::string out;
    if (compat) {
        out.append("ld.so-1.7.0", 12);  // with its NUL
        put32(out, static_cast<uint32_t>(entries.size()));
        // Old entries' offsets count from the end of the old entries, before the padding that
        // aligns the new part to 8 bytes.
        const uint32_t pad = static_cast<uint32_t>((8 - (16 + 12 * entries.size()) % 8) % 8);
        for (size_t i = 0; i < entries.size(); ++i) {
            put32(out, static_cast<uint32_t>(entries[i].flags));
            put32(out, offsets[i].first + pad);
            put32(out, offsets[i].second + pad);
        }
        while (out.size() % 8 != 0) out.push_back('\0');
    }
    std::string n = "glibc-ld.so.cache1.1";
    put32(n, static_cast<uint32_t>(entries.size()));
    put32(n, static_cast<uint32_t>(strings.size()));
    n.append(20, '\0');
    for (size_t i = 0; i < entries.size(); ++i) {
        put32(n, static_cast<uint32_t>(entries[i].flags));
        put32(n, offsets[i].first);
        put32(n, offsets[i].second);
        put32(n, 0);      // osversion
        n.append(8, '\0');  // hwcap
    }
    return out + n + strings;
}

}  // namespace kgpu::test
