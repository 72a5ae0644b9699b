// glibc's ld.so.cache as `kgpu cdi generate` reads it from a driver root (common/ld_cache.h):
// any bytes give entries or an error, never a read outside the data; the entries' strings come
// from the data, and their paths under a root stay under it.
#include "common/ld_cache.h"
#include "fuzz.h"

using namespace kgpu;

KGPU_FUZZ_TARGET(ld_so_cache) {
    const std::string_view text = fuzz::text(data, size);
    auto entries = ldcache::parse(text, "ld.so.cache");
    if (!entries) {
        KGPU_FUZZ_CHECK(!entries.error().message.empty(), "an error without a message");
        return 0;
    }
    for (const auto& e : *entries) {
        KGPU_FUZZ_CHECK(!e.name.empty() && !e.path.empty(), e.name);
        KGPU_FUZZ_CHECK(e.bits == 32 || e.bits == 64, e.name);
        KGPU_FUZZ_CHECK(text.find(e.path) != std::string_view::npos, e.path);
    }
    for (const auto& p : ldcache::libraries64(*entries, "/run/nvidia/driver"))
        KGPU_FUZZ_CHECK(p.starts_with("/run/nvidia/driver/"), p);
    return 0;
}
