// Loading libnvidia-ml.so.1: one table of entry points, filled once (STYLE.md #2).
//
// The table is built either by dlopen + dlsym (Library::load) or in memory (Library::from_table,
// for tests that replace single entries with lambdas). Callers never see a null pointer: a
// missing optional entry point is replaced by one that returns NVML_ERROR_NOT_SUPPORTED.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "nvml/device.h"
#include "nvml/entry_points.h"
#include "nvml/nvml_abi.h"

namespace kgpu::nvml {

struct EntryPoints {
#define KGPU_NVML_FIELD(field, need, symbol, fallback) decltype(&::symbol) field = nullptr;
    KGPU_NVML_ENTRY_POINTS(KGPU_NVML_FIELD)
#undef KGPU_NVML_FIELD
};

// Where to look for the library. Filled from --nvml-library and --nvidia-driver-root.
struct LoadOptions {
    // An explicit path: only this file is tried.
    std::string library_path;
    // Root of the driver installation (GPU Operator: /run/nvidia/driver).
    std::filesystem::path driver_root = "/";
};

// The file name real clients dlopen.
inline constexpr const char* kLibraryName = "libnvidia-ml.so.1";

// The candidate paths in search order: explicit path alone; else, under the driver root (its
// symlinks resolved inside it), the library directories nvidia-ctk searches
// (ldcache::driver_library_dirs(): facts/nvml.md's six and Debian's nvidia/current), then every
// 64-bit libnvidia-ml.so.1 the root's own /etc/ld.so.cache lists, then the bare name (the dynamic
// loader's own search). Each path once.
std::vector<std::string> candidate_paths(const LoadOptions& options);

class Library {
public:
    // dlopens the first candidate that loads and resolves every entry point. Errors:
    //  - not_found: nothing loaded; the message names every path tried and why, and suggests
    //    `kgpu doctor`;
    //  - not_supported: a library loaded but lacks required symbols; all of them are listed.
    static Result<std::shared_ptr<const Library>> load(const LoadOptions& options);

    // A library made of an in-memory table (tests). Null optional entries become NOT_SUPPORTED
    // stubs; null required entries are an error listing them, as for a real library.
    static Result<std::shared_ptr<const Library>> from_table(EntryPoints table, std::string origin);

    ~Library();
    Library(const Library&) = delete;
    Library& operator=(const Library&) = delete;

    const EntryPoints& api() const { return table_; }
    // The path that was loaded, or the origin given to from_table.
    const std::string& origin() const { return origin_; }
    // Optional entry points the library did not have (for diagnostics).
    const std::vector<std::string>& missing_optional() const { return missing_optional_; }
    // The symbol name of a table field, e.g. "DeviceGetUUID" -> "nvmlDeviceGetUUID"
    // (the preferred name, or the fallback when that is what was bound).
    std::string symbol_name(std::string_view field) const;

private:
    Library() = default;
    EntryPoints table_{};
    void* handle_ = nullptr;
    std::string origin_;
    std::vector<std::string> missing_optional_;
    std::vector<std::pair<std::string, std::string>> bound_names_;  // field -> symbol
};

// Library::load then Session::open. An init failure's message names the library and, where the
// return code has a usual cause, says it ("... DRIVER_NOT_LOADED (9) ... — the NVIDIA kernel
// module is not loaded ..."); nvml_return stays set.
Result<Session> open_session(const LoadOptions& options);

}  // namespace kgpu::nvml
