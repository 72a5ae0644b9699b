#include "nvml/library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string_view>
#include <type_traits>

#include "common/elf.h"
#include "common/files.h"
#include "common/ld_cache.h"
#include "common/log.h"
#include "nvml/trace.h"

namespace kgpu::nvml {
namespace {

// A replacement for a missing optional entry point: same signature, answers NOT_SUPPORTED.
template <class F>
struct NotSupported;
template <class R, class... A>
struct NotSupported<R (*)(A...)> {
    static R call(A...) {
        if constexpr (std::is_pointer_v<R>)
            return "Not Supported";
        else
            return NVML_ERROR_NOT_SUPPORTED;
    }
};

enum class Need { required, optional };
constexpr Need required = Need::required;
constexpr Need optional = Need::optional;

struct Binding {
    std::vector<std::string> missing_required;
    std::vector<std::string> missing_optional;
    std::vector<std::pair<std::string, std::string>> bound;
};

// One tag per entry point for its tracing wrapper (trace.h), named after its symbol.
#define KGPU_NVML_TRACE_TAG(field, need, symbol, fallback)                                         \
    struct TraceTag_##field {                                                                      \
        static constexpr const char* name = #symbol;                                               \
    };
KGPU_NVML_ENTRY_POINTS(KGPU_NVML_TRACE_TAG)
#undef KGPU_NVML_TRACE_TAG

// Fills every entry of `table` from `lookup(name)`, trying the fallback name when the preferred
// one is absent; records what was missing. Entries already set are kept (from_table). With
// KGPU_NVML_TRACE, every entry is wrapped so that its calls are logged (trace.h).
template <class Lookup>
Binding bind(EntryPoints& table, Lookup&& lookup) {
    Binding b;
    const bool tracing = trace::enabled();
#define KGPU_NVML_BIND(field, need, symbol, fallback)                                              \
    {                                                                                              \
        const char* used = #symbol;                                                                \
        if (table.field == nullptr) {                                                              \
            void* p = lookup(#symbol);                                                             \
            const char* fb = fallback;                                                             \
            if (p == nullptr && fb != nullptr) {                                                   \
                p = lookup(fb);                                                                    \
                if (p != nullptr) used = fb;                                                       \
            }                                                                                      \
            table.field = reinterpret_cast<decltype(table.field)>(p);                              \
        }                                                                                          \
        if (table.field == nullptr) {                                                              \
            const char* fb = fallback;                                                             \
            std::string name = fb ? std::string(#symbol) + " (or " + fb + ")" : std::string(#symbol); \
            if (need == Need::required) {                                                          \
                b.missing_required.push_back(name);                                                \
            } else {                                                                               \
                b.missing_optional.push_back(#symbol);                                             \
                table.field = &NotSupported<decltype(table.field)>::call;                          \
            }                                                                                      \
        }                                                                                          \
        b.bound.emplace_back(#field, used);                                                        \
        if (tracing && table.field != nullptr) trace::wrap<TraceTag_##field>(table.field);         \
    }
    KGPU_NVML_ENTRY_POINTS(KGPU_NVML_BIND)
#undef KGPU_NVML_BIND
    return b;
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
    std::string out;
    for (const auto& s : items) {
        if (!out.empty()) out += sep;
        out += s;
    }
    return out;
}

}  // namespace

std::vector<std::string> candidate_paths(const LoadOptions& options) {
    if (!options.library_path.empty()) return {options.library_path};
    std::vector<std::string> out;
    std::set<std::string> seen;
    // Under another root, links are the root's own: an absolute one points into the root, not
    // at this machine's files (resolved inside it; an unresolvable one is tried as it is).
    auto add = [&](const std::string& in_root) {
        auto resolved = files::resolve_in_root(options.driver_root, in_root);
        std::string p = resolved ? resolved->string() : files::under_root(options.driver_root, in_root).string();
        if (seen.insert(p).second) out.push_back(std::move(p));
    };
    for (const auto& d : ldcache::driver_library_dirs()) add((std::filesystem::path(d) / kLibraryName).string());
    // Then the root's own loader cache, as nvidia-ctk's locator falls back to it: a driver in a
    // directory only its ld.so.conf.d names (a .run install under /opt, a distribution's own
    // folder). A missing or unreadable cache adds nothing.
    if (auto entries = ldcache::read(options.driver_root)) {
        for (const auto& e : *entries)
            if (e.bits == 64 && e.name == kLibraryName && e.path.starts_with('/')) add(e.path);
    }
    out.emplace_back(kLibraryName);  // the dynamic loader's own search (this machine's ld.so.cache, LD_LIBRARY_PATH)
    return out;
}

Result<std::shared_ptr<const Library>> Library::load(const LoadOptions& options) {
    std::vector<std::string> tried;
    // A copy installed on the host (`kgpu runtime install`) runs on the glibc it carries: the
    // driver library's own glibc dependencies must be those, never the host's (common/elf.h).
    (void)elf::pin_carried_glibc();
    for (const auto& path : candidate_paths(options)) {
        const bool bare = path.find('/') == std::string::npos;
        std::error_code ec;
        if (!bare && !std::filesystem::exists(path, ec)) {
            tried.push_back(path + " (no such file)");
            continue;
        }
        // RTLD_NOW: a library with unresolved dependencies fails here, with a message, rather
        // than at the first call. RTLD_LOCAL: its symbols do not leak into other libraries.
        void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (h == nullptr) {
            const char* why = ::dlerror();
            tried.push_back(path + " (" + (why ? why : "dlopen failed") + ")");
            continue;
        }
        std::shared_ptr<Library> lib(new Library());
        lib->handle_ = h;
        lib->origin_ = path;
        Binding b = bind(lib->table_, [h](const char* name) { return ::dlsym(h, name); });
        if (!b.missing_required.empty()) {
            return fail(Code::not_supported,
                        "{} is not a usable NVML library: missing required symbols {}. Is it the NVIDIA "
                        "driver's libnvidia-ml.so.1? Run `kgpu doctor` to check the driver installation",
                        path, join(b.missing_required, ", "));
        }
        lib->missing_optional_ = std::move(b.missing_optional);
        lib->bound_names_ = std::move(b.bound);
        return std::shared_ptr<const Library>(std::move(lib));
    }
    return fail(Code::not_found,
                "could not load the NVML library; tried: {}. Is the NVIDIA driver installed? Use "
                "--nvml-library PATH or --nvidia-driver-root DIR, and run `kgpu doctor` to diagnose",
                join(tried, "; "));
}

Result<std::shared_ptr<const Library>> Library::from_table(EntryPoints table, std::string origin) {
    std::shared_ptr<Library> lib(new Library());
    lib->table_ = table;
    lib->origin_ = std::move(origin);
    Binding b = bind(lib->table_, [](const char*) -> void* { return nullptr; });
    if (!b.missing_required.empty()) {
        return fail(Code::not_supported, "{} is not a usable NVML library: missing required symbols {}",
                    lib->origin_, join(b.missing_required, ", "));
    }
    lib->missing_optional_ = std::move(b.missing_optional);
    lib->bound_names_ = std::move(b.bound);
    return std::shared_ptr<const Library>(std::move(lib));
}

Library::~Library() {
    if (handle_ != nullptr) ::dlclose(handle_);
}

std::string Library::symbol_name(std::string_view field) const {
    auto it = std::find_if(bound_names_.begin(), bound_names_.end(),
                           [&](const auto& p) { return p.first == field; });
    return it == bound_names_.end() ? "nvml" + std::string(field) : it->second;
}

namespace trace {

bool enabled() {
    const char* v = std::getenv("KGPU_NVML_TRACE");
    return v != nullptr && *v != 0 && std::string_view(v) != "0";
}

bool logging() { return log::level() <= log::Level::debug; }

void line(std::string_view name, const std::vector<std::string>& args, std::string_view result) {
    std::string text;
    for (const auto& a : args) text += (text.empty() ? "" : ", ") + a;
    log::debug("nvml: {}({}) = {}", name, text, result);
}

}  // namespace trace

}  // namespace kgpu::nvml
