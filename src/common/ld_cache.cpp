#include "common/ld_cache.h"

#include <sys/stat.h>

#include <cstring>
#include <set>

#include "common/files.h"

namespace kgpu::ldcache {

namespace {

constexpr std::string_view kOldMagic = "ld.so-1.7.0";  // followed by a NUL
constexpr std::string_view kNewMagic = "glibc-ld.so.cache1.1";
constexpr uint64_t kOldHeader = 16, kOldEntry = 12;
constexpr uint64_t kNewHeader = 48, kNewEntry = 24;
constexpr uint64_t kMaxSize = 256ull << 20;

uint32_t u32(std::string_view data, uint64_t at) {
    uint32_t v = 0;
    std::memcpy(&v, data.data() + at, sizeof v);  // the cache is written in the host's (little) byte order
    return v;
}

// The NUL-terminated string at `offset` of `table`; "" when it runs off the end.
std::string_view string_at(std::string_view table, uint32_t offset) {
    if (offset >= table.size()) return {};
    const std::string_view rest = table.substr(offset);
    const auto nul = rest.find('\0');
    return nul == std::string_view::npos ? std::string_view{} : rest.substr(0, nul);
}

int bits_of(uint32_t flags) {
    if ((flags & 0x00ff & 0x0001) == 0) return 0;  // not an ELF library
    switch (flags & 0xff00) {
    case 0x0300:  // x86-64
    case 0x0a00:  // AArch64
    case 0x0500:  // ppc64le
        return 64;
    case 0x0000:  // i386
    case 0x0800:  // x32
    case 0x0900:  // ARM hard-float
        return 32;
    default:
        return 0;
    }
}

}  // namespace

Result<std::vector<Entry>> parse(std::string_view data, std::string_view source) {
    const uint64_t size = data.size();
    if (size <= kOldHeader)
        return fail(Code::parse, "{}: not an ld.so.cache ({} bytes, shorter than any cache header)", source, size);
    uint64_t base = 0;
    if (data.substr(0, kOldMagic.size()) == kOldMagic) {
        // The old format's entries, then the new format aligned to 8 bytes.
        const uint64_t nlibs = u32(data, kOldMagic.size() + 1);
        base = kOldHeader + nlibs * kOldEntry;
        base += (-base) & 7;
        if (base >= size || size - base < kNewHeader)
            return fail(Code::parse,
                        "{}: an old-format (ld.so-1.7.0) ld.so.cache without the glibc-ld.so.cache1.1 part after its {} "
                        "entries (file cut short, or written by a glibc older than 2.2)",
                        source, nlibs);
    }
    if (size - base < kNewHeader)
        return fail(Code::parse, "{}: not an ld.so.cache ({} bytes, shorter than its header)", source, size);
    if (data.substr(base, kNewMagic.size()) != kNewMagic)
        return fail(Code::parse, "{}: not an ld.so.cache: expected the magic \"{}\" at byte {}", source, kNewMagic, base);
    const uint64_t nlibs = u32(data, base + 20);
    if ((size - base - kNewHeader) / kNewEntry < nlibs)
        return fail(Code::parse, "{}: ld.so.cache cut short: its header counts {} entries, the file holds {}", source,
                    nlibs, (size - base - kNewHeader) / kNewEntry);
    const std::string_view table = data.substr(base);
    std::vector<Entry> out;
    for (uint64_t i = 0; i < nlibs; ++i) {
        const uint64_t at = base + kNewHeader + i * kNewEntry;
        const int bits = bits_of(u32(data, at));
        if (bits == 0) continue;
        const std::string_view key = string_at(table, u32(data, at + 4));
        const std::string_view value = string_at(table, u32(data, at + 8));
        if (key.empty() || value.empty()) continue;
        out.push_back({std::string(key), std::string(value), bits});
    }
    return out;
}

std::vector<std::string> libraries64(const std::vector<Entry>& entries, const std::filesystem::path& root) {
    std::vector<std::string> out;
    std::set<std::string> seen;
    for (const auto& e : entries) {
        if (e.bits != 64 || e.path.empty()) continue;
        // Normalised as an absolute path first, so that ".." never leaves the root (a relative
        // value, which ldconfig never writes, is taken as under the root too).
        const std::filesystem::path in_root = (std::filesystem::path("/") / e.path).lexically_normal();
        std::string p = files::under_root(root, in_root).string();
        if (seen.insert(p).second) out.push_back(std::move(p));
    }
    return out;
}

const std::vector<std::string>& driver_library_dirs() {
    static const std::vector<std::string> dirs = {
        "/",
        "/usr/lib64",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu/nvidia/current",
        "/usr/lib/aarch64-linux-gnu/nvidia/current",
        "/lib64",
        "/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/lib/x86_64-linux-gnu/nvidia/current",
        "/lib/aarch64-linux-gnu/nvidia/current",
    };
    return dirs;
}

Result<std::vector<Entry>> read(const std::filesystem::path& root) {
    const std::filesystem::path path = files::under_root(root, std::string(kPath));
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) > kMaxSize)
        return fail(Code::io, "{}: {} bytes, larger than any ld.so.cache (256 MiB at most)", path.string(),
                    static_cast<uint64_t>(st.st_size));
    auto data = files::read(path);
    if (!data) return std::unexpected(data.error());
    return parse(*data, path.string());
}

}  // namespace kgpu::ldcache
