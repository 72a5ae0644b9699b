// What every fuzz target (fuzz/targets/<name>.cpp) is written with. A target is one function:
//
//     KGPU_FUZZ_TARGET(deviceplugin_config) {   // const uint8_t* data, size_t size
//         ...feed the bytes to one parser of outside input...
//         return 0;                              // -1: not a valid input for this target
//     }
//
// It is built two ways (fuzz/README.md):
// - by clang with libFuzzer, ASan and UBSan (scripts/fuzz, fuzz/CMakeLists.txt): the macro
//   defines LLVMFuzzerTestOneInput, and libFuzzer mutates the seeds of fuzz/corpus/<name>/;
// - by the project's own build (tests/fuzz/): the macro registers the function with
//   kgpu_fuzz_replay, which runs every file of fuzz/corpus/<name>/ (seeds and the inputs that
//   once crashed) through it, in the release and sanitizer suites, with or without clang.
// A crash, a sanitizer report or a failed KGPU_FUZZ_CHECK is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kgpu::fuzz {

using TargetFn = int (*)(const uint8_t* data, size_t size);

// Registers a target with kgpu_fuzz_replay (unused in libFuzzer builds).
struct Registration {
    Registration(const char* name, TargetFn fn);
};

inline std::string_view text(const uint8_t* data, size_t size) {
    return {reinterpret_cast<const char*>(data), size};
}

// `text` cut at each line that is exactly `separator` (without its newline), into at most
// `parts` pieces (the last keeps any further separators). Lets one input carry several documents.
std::vector<std::string_view> split_documents(std::string_view text, std::string_view separator, size_t parts);

// A directory of this process for targets whose parser reads files (created on first use,
// removed at exit).
const std::filesystem::path& scratch_dir();
// Writes `content` to scratch_dir()/name (creating parent directories) and returns the path.
std::filesystem::path write_scratch(const std::string& name, std::string_view content);

// Reports a broken invariant and aborts: a finding in both builds.
[[noreturn]] void check_failed(const char* condition, const char* file, int line, std::string_view detail);

}  // namespace kgpu::fuzz

#define KGPU_FUZZ_CHECK(cond, detail) \
    ((cond) ? (void)0 : ::kgpu::fuzz::check_failed(#cond, __FILE__, __LINE__, (detail)))

#if defined(KGPU_FUZZ_LIBFUZZER)
#define KGPU_FUZZ_TARGET(name) extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
#else
#define KGPU_FUZZ_TARGET(name)                                                                    \
    static int kgpu_fuzz_target_##name(const uint8_t* data, size_t size);                         \
    static const ::kgpu::fuzz::Registration kgpu_fuzz_registration_##name(#name, kgpu_fuzz_target_##name); \
    static int kgpu_fuzz_target_##name(const uint8_t* data, size_t size)
#endif
