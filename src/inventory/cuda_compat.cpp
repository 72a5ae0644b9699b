#include "inventory/cuda_compat.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "common/strings.h"

namespace kgpu::inventory::compat {

namespace {

// facts/diagnostics.md "CUDA toolkit -> minimum Linux driver (x86_64, GA releases)".
struct CudaRow {
    Cuda cuda;
    const char* driver;
};
constexpr CudaRow kCudaDrivers[] = {
    {{11, 0}, "450.51.05"}, {{11, 1}, "455.23"},    {{11, 2}, "460.27.03"}, {{11, 3}, "465.19.01"},
    {{11, 4}, "470.42.01"}, {{11, 5}, "495.29.05"}, {{11, 6}, "510.39.01"}, {{11, 7}, "515.43.04"},
    {{11, 8}, "520.61.05"}, {{12, 0}, "525.60.13"}, {{12, 1}, "530.30.02"}, {{12, 2}, "535.54.03"},
    {{12, 3}, "545.23.06"}, {{12, 4}, "550.54.14"}, {{12, 5}, "555.42.02"}, {{12, 6}, "560.28.03"},
    {{12, 8}, "570.26"},    {{12, 9}, "575.51.03"}, {{13, 0}, "580.65.06"}, {{13, 1}, "590.44.01"},
    {{13, 2}, "595.45.04"},
};

// Minor-version compatibility: a newer minor runs on the major's first driver.
struct MinorRow {
    int major;
    const char* driver;
};
constexpr MinorRow kMinorCompat[] = {{11, "450.80.02"}, {12, "525.60.13"}, {13, "580"}};

// Oldest compute capability each CUDA major builds for (CUDA 11 dropped 3.0/3.2, 12 dropped Kepler,
// 13 dropped Maxwell, Pascal and Volta).
struct MinCcRow {
    int major;
    Cc cc;
};
constexpr MinCcRow kMinCc[] = {{11, {3, 5}}, {12, {5, 0}}, {13, {7, 5}}};

struct ArchRow {
    Cc cc;
    const char* arch;
    Cuda first_cuda;  // the first CUDA release that builds for it (CUDA release notes)
};
constexpr ArchRow kArch[] = {
    {{3, 0}, "Kepler", {11, 0}},    {{3, 5}, "Kepler", {11, 0}},    {{3, 7}, "Kepler", {11, 0}},
    {{5, 0}, "Maxwell", {11, 0}},   {{5, 2}, "Maxwell", {11, 0}},   {{5, 3}, "Maxwell", {11, 0}},
    {{6, 0}, "Pascal", {11, 0}},    {{6, 1}, "Pascal", {11, 0}},    {{6, 2}, "Pascal", {11, 0}},
    {{7, 0}, "Volta", {11, 0}},     {{7, 2}, "Volta", {11, 0}},     {{7, 5}, "Turing", {11, 0}},
    {{8, 0}, "Ampere", {11, 0}},    {{8, 6}, "Ampere", {11, 1}},    {{8, 7}, "Ampere", {11, 4}},
    {{8, 9}, "Ada", {11, 8}},       {{9, 0}, "Hopper", {11, 8}},    {{10, 0}, "Blackwell", {12, 8}},
    {{10, 3}, "Blackwell", {12, 9}}, {{11, 0}, "Blackwell", {13, 0}}, {{12, 0}, "Blackwell", {12, 8}},
    {{12, 1}, "Blackwell", {12, 9}},
};

// GPUs by name fragment; matched longest fragment first, case-insensitively.
struct GpuRow {
    const char* fragment;
    Cc cc;
};
constexpr GpuRow kGpus[] = {
    {"K80", {3, 7}},     {"K40", {3, 5}},      {"K20", {3, 5}},      {"M40", {5, 2}},     {"M60", {5, 2}},
    {"M4", {5, 2}},      {"P100", {6, 0}},     {"P40", {6, 1}},      {"P4", {6, 1}},      {"V100", {7, 0}},
    {"Xavier", {7, 2}},  {"T4", {7, 5}},       {"RTX 20", {7, 5}},   {"A100", {8, 0}},    {"A30", {8, 0}},
    {"A10", {8, 6}},     {"A40", {8, 6}},      {"RTX 30", {8, 6}},   {"Orin", {8, 7}},    {"L4", {8, 9}},
    {"L40", {8, 9}},     {"L40S", {8, 9}},     {"RTX 40", {8, 9}},   {"H100", {9, 0}},    {"H200", {9, 0}},
    {"GH200", {9, 0}},   {"B200", {10, 0}},    {"GB200", {10, 0}},   {"B300", {10, 3}},   {"Thor", {11, 0}},
    {"RTX 50", {12, 0}}, {"RTX PRO 6000", {12, 0}}, {"GB10", {12, 1}},
};

bool all_digits(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string majors_with(Cc min) {
    std::vector<std::string> names;
    for (const auto& a : kArch)
        if (a.cc >= min && std::find(names.begin(), names.end(), a.arch) == names.end()) names.emplace_back(a.arch);
    std::string out;
    for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
    return out;
}

}  // namespace

std::string Cuda::str() const { return fmt::format("{}.{}", major, minor); }
std::string Cc::str() const { return fmt::format("{}.{}", major, minor); }

std::optional<Cuda> parse_cuda(std::string_view text) {
    auto parts = strings::split(strings::trim(text), '.');
    if (parts.size() < 2 || parts.size() > 3) return std::nullopt;
    for (auto p : parts)
        if (!all_digits(p)) return std::nullopt;
    Cuda c;
    std::from_chars(parts[0].data(), parts[0].data() + parts[0].size(), c.major);
    std::from_chars(parts[1].data(), parts[1].data() + parts[1].size(), c.minor);
    return c;
}

std::optional<Cc> parse_cc(std::string_view text) {
    text = strings::trim(text);
    if (text.starts_with("sm_") || text.starts_with("compute_")) text.remove_prefix(text.find('_') + 1);
    Cc c;
    auto dot = text.find('.');
    if (dot != std::string_view::npos) {
        auto a = text.substr(0, dot), b = text.substr(dot + 1);
        if (!all_digits(a) || !all_digits(b) || b.size() != 1) return std::nullopt;
        std::from_chars(a.data(), a.data() + a.size(), c.major);
        c.minor = b[0] - '0';
        return c;
    }
    if (!all_digits(text) || text.size() < 2 || text.size() > 3) return std::nullopt;
    int v = 0;
    std::from_chars(text.data(), text.data() + text.size(), v);
    return Cc{v / 10, v % 10};
}

bool valid_driver(std::string_view text) {
    auto parts = strings::split(text, '.');
    if (parts.empty() || parts.size() > 3) return false;
    return std::all_of(parts.begin(), parts.end(), [](std::string_view p) { return all_digits(p); });
}

int compare_driver(std::string_view a, std::string_view b) {
    // Both passed valid_driver(); a part that does not parse would count as 0.
    return strings::compare_versions(strings::version_parts(a).value_or(std::vector<unsigned long>{}),
                                     strings::version_parts(b).value_or(std::vector<unsigned long>{}));
}

std::optional<std::string> min_driver(Cuda cuda) {
    for (const auto& r : kCudaDrivers)
        if (r.cuda == cuda) return r.driver;
    return std::nullopt;
}

std::optional<std::string> minor_compat_driver(int major) {
    for (const auto& r : kMinorCompat)
        if (r.major == major) return r.driver;
    return std::nullopt;
}

std::optional<Cuda> newest_cuda(std::string_view driver) {
    std::optional<Cuda> best;
    for (const auto& r : kCudaDrivers)
        if (compare_driver(driver, r.driver) >= 0) best = r.cuda;
    return best;
}

std::string architecture(Cc cc) {
    for (const auto& a : kArch)
        if (a.cc == cc) return a.arch;
    return "";
}

std::optional<GpuModel> gpu_model(std::string_view name) {
    std::string hay = strings::lower(name);
    const GpuRow* best = nullptr;
    for (const auto& g : kGpus) {
        std::string frag = strings::lower(g.fragment);
        if (hay.find(frag) == std::string::npos) continue;
        if (!best || frag.size() > std::string_view(best->fragment).size()) best = &g;
    }
    if (!best) return std::nullopt;
    return GpuModel{best->fragment, best->cc};
}

Cc min_cc(int cuda_major) {
    for (const auto& r : kMinCc)
        if (r.major == cuda_major) return r.cc;
    return cuda_major > 13 ? Cc{7, 5} : Cc{3, 0};
}

Cuda first_cuda_for(Cc cc) {
    for (const auto& a : kArch)
        if (a.cc == cc) return a.first_cuda;
    // Unknown: newer than the table when above it.
    return cc > kArch[std::size(kArch) - 1].cc ? Cuda{99, 0} : Cuda{11, 0};
}

namespace {

// What an image built for `cuda` does on a GPU of compute capability `cc` (`gpu_label`): its
// lines added to `a`; false when it cannot run.
bool arch_lines(Cc cc, const Cuda& cuda, const std::string& gpu_label, Answer& a) {
    bool runs = true;
    Cc lo = min_cc(cuda.major);
    Cuda first = first_cuda_for(cc);
    std::string arch = architecture(cc);
    std::string arch_part = arch.empty() ? "" : fmt::format(", {}", arch);
    if (cc < lo) {
        runs = false;
        a.lines.push_back(fmt::format(
            "CUDA {}.x builds for compute capability {} and newer ({}); {} is {}: the container fails with \"no "
            "kernel image is available for execution on the device\".",
            cuda.major, lo.str(), majors_with(lo), gpu_label, arch.empty() ? "older" : arch));
        int last = cuda.major - 1;
        while (last >= 11 && cc < min_cc(last)) --last;
        a.lines.push_back(last >= 11 ? fmt::format("Use an image built for CUDA {}.x, the last to support {}.", last,
                                                   arch.empty() ? cc.str() : arch)
                                     : std::string("No supported CUDA release targets this GPU."));
    } else if (cuda < first) {
        runs = false;
        a.lines.push_back(fmt::format(
            "CUDA {} predates compute capability {}{}: an image built with it has no kernel for {} (\"no kernel "
            "image is available for execution on the device\") unless it carries PTX the driver can JIT-compile.",
            cuda.str(), cc.str(), arch_part, gpu_label));
        a.lines.push_back(fmt::format("Use an image built for CUDA {} or newer.", first.str()));
    } else {
        a.lines.push_back(fmt::format("CUDA {} builds for {}{}.", cuda.str(), gpu_label, arch_part));
    }
    return runs;
}

}  // namespace

Answer answer(const Query& q) {
    Answer a;
    auto bad = [&](std::string line) {
        a.exit_code = 2;
        a.lines.push_back(std::move(line));
        return a;
    };
    auto cuda = parse_cuda(q.cuda);
    if (!cuda) return bad(fmt::format("--cuda: expected a CUDA version like 12.4, got '{}'", q.cuda));
    auto need = min_driver(*cuda);
    if (!need) return bad(fmt::format("CUDA {} is not a CUDA release kgpu knows (there was no 12.7; known: 11.0 to 13.2)", cuda->str()));
    if (!q.driver.empty() && !valid_driver(q.driver))
        return bad(fmt::format("--driver: expected a driver version like 550.54.15, got '{}'", q.driver));
    std::optional<Cc> cc;
    std::string gpu_label;
    if (!q.compute_capability.empty()) {
        cc = parse_cc(q.compute_capability);
        if (!cc) return bad(fmt::format("--compute-capability: expected a version like 7.0 or sm_70, got '{}'", q.compute_capability));
        gpu_label = fmt::format("compute capability {}", cc->str());
    } else if (!q.gpu.empty()) {
        auto m = gpu_model(q.gpu);
        if (!m) return bad(fmt::format("--gpu: '{}' is not a GPU kgpu knows; pass --compute-capability instead", q.gpu));
        cc = m->cc;
        gpu_label = fmt::format("{} (compute capability {})", q.gpu, cc->str());
    }
    bool runs = true;

    if (!q.driver.empty()) {
        std::string compat = minor_compat_driver(cuda->major).value_or(*need);
        if (compare_driver(q.driver, *need) >= 0) {
            a.lines.push_back(fmt::format("Driver {} supports CUDA {} fully (minimum driver {}).", q.driver, cuda->str(), *need));
        } else if (cuda->minor > 0 && compare_driver(q.driver, compat) >= 0) {
            a.minor_compat_only = true;
            a.lines.push_back(fmt::format(
                "Driver {} runs CUDA {} only through CUDA minor-version compatibility (CUDA {}.x needs >= {}): "
                "features that need a newer driver and PTX JIT compilation are unavailable.",
                q.driver, cuda->str(), cuda->major, compat));
            a.lines.push_back(fmt::format("Driver {} or newer supports CUDA {} fully.", *need, cuda->str()));
        } else {
            runs = false;
            auto newest = newest_cuda(q.driver);
            a.lines.push_back(fmt::format(
                "Driver {} is too old for CUDA {}: it needs driver >= {}{}. The container fails at CUDA init "
                "(\"CUDA driver version is insufficient for CUDA runtime version\", or \"forward compatibility was "
                "attempted on non supported HW\").",
                q.driver, cuda->str(), cuda->minor > 0 ? compat : *need,
                cuda->minor > 0 ? fmt::format(" (minor-version compatibility; {} for full support)", *need) : ""));
            a.lines.push_back(newest ? fmt::format("Upgrade the driver, or use an image built for CUDA {} or older.", newest->str())
                                     : std::string("Upgrade the driver."));
        }
    } else {
        a.lines.push_back(fmt::format("CUDA {} needs driver >= {} (>= {} with minor-version compatibility).", cuda->str(),
                                      *need, minor_compat_driver(cuda->major).value_or(*need)));
    }

    if (cc && !arch_lines(*cc, *cuda, gpu_label, a)) runs = false;
    a.exit_code = runs ? 0 : 1;
    a.lines.insert(a.lines.begin(), runs ? (a.minor_compat_only ? "Runs (through minor-version compatibility)." : "Runs.")
                                         : "Does not run.");
    return a;
}

}  // namespace kgpu::inventory::compat
