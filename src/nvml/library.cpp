#include "nvml/library.h"

#include <dlfcn.h>

#include <algorithm>
#include <type_traits>

#include "common/elf.h"
#include "common/files.h"

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

// Fills every entry of `table` from `lookup(name)`, trying the fallback name when the preferred
// one is absent; records what was missing. Entries already set are kept (from_table).
template <class Lookup>
Binding bind(EntryPoints& table, Lookup&& lookup) {
    Binding b;
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
    static constexpr const char* dirs[] = {
        "/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
        "/lib64",     "/lib/x86_64-linux-gnu",     "/lib/aarch64-linux-gnu",
    };
    std::vector<std::string> out;
    for (const char* d : dirs) out.push_back((files::under_root(options.driver_root, d) / kLibraryName).string());
    out.emplace_back(kLibraryName);  // the dynamic loader's own search (ld.so.cache, LD_LIBRARY_PATH)
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

}  // namespace kgpu::nvml
