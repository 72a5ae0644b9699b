#include "deviceplugin/mig_caps.h"

#include <charconv>
#include <optional>
#include <tuple>
#include <map>
#include <set>

#include <fmt/format.h>

#include "cdi/driver_files.h"
#include "common/files.h"
#include "common/strings.h"

namespace kgpu::deviceplugin {
namespace {

namespace fs = std::filesystem;

// "DeviceFileMinor: 12" somewhere in an access file. nullopt when the file does not exist.
Result<std::optional<unsigned>> read_access_file(const fs::path& file) {
    std::error_code ec;
    if (!fs::exists(file, ec)) return std::optional<unsigned>{};
    auto text = files::read(file);
    if (!text) return std::unexpected(text.error());
    for (auto line : strings::split(*text, '\n')) {
        line = strings::trim(line);
        constexpr std::string_view key = "DeviceFileMinor:";
        if (!line.starts_with(key)) continue;
        auto value = strings::trim(line.substr(key.size()));
        unsigned minor = 0;
        auto [ptr, err] = std::from_chars(value.data(), value.data() + value.size(), minor);
        if (err == std::errc{} && ptr == value.data() + value.size()) return std::optional<unsigned>{minor};
        break;
    }
    return fail(Code::parse, "{}: expected a line 'DeviceFileMinor: <number>'", file.string());
}

}  // namespace

Result<CapMinors> find_mig_caps(const fs::path& proc_root, unsigned gpu_minor, unsigned gi, unsigned ci) {
    const fs::path caps = proc_root / "driver/nvidia/capabilities" / fmt::format("gpu{}", gpu_minor) / "mig";
    const fs::path gi_file = caps / fmt::format("gi{}", gi) / "access";
    const fs::path ci_file = caps / fmt::format("gi{}", gi) / fmt::format("ci{}", ci) / "access";
    auto g = read_access_file(gi_file);
    if (!g) return std::unexpected(g.error());
    auto c = read_access_file(ci_file);
    if (!c) return std::unexpected(c.error());
    if (*g && *c) return CapMinors{**g, **c};

    // The driver's table of every capability minor.
    const std::string gi_key = fmt::format("gpu{}/gi{}/access", gpu_minor, gi);
    const std::string ci_key = fmt::format("gpu{}/gi{}/ci{}/access", gpu_minor, gi, ci);
    const fs::path table = proc_root / "driver/nvidia-caps/mig-minors";
    auto minors = cdi::read_mig_minors(proc_root);
    if (!minors) {
        if (minors.error().code == Code::parse) return std::unexpected(minors.error());
        return fail(Code::not_found, "no MIG capability files for GPU minor {} GI {} CI {}: tried {}, {} and {}",
                    gpu_minor, gi, ci, (*g ? ci_file : gi_file).string(), table.string(),
                    *g ? std::string("(GI found)") : ci_file.string());
    }
    auto gi_it = minors->find(gi_key), ci_it = minors->find(ci_key);
    if (!*g && gi_it == minors->end())
        return fail(Code::not_found, "no MIG capability minor for {}: neither {} nor an entry in {}", gi_key,
                    gi_file.string(), table.string());
    if (!*c && ci_it == minors->end())
        return fail(Code::not_found, "no MIG capability minor for {}: neither {} nor an entry in {}", ci_key,
                    ci_file.string(), table.string());
    return CapMinors{*g ? **g : gi_it->second, *c ? **c : ci_it->second};
}

std::vector<std::string> fill_mig_caps(std::vector<Resource>& resources, const fs::path& proc_root) {
    std::map<std::tuple<unsigned, unsigned, unsigned>, Result<CapMinors>> cache;
    std::vector<std::string> problems;
    std::set<std::string> seen;
    for (auto& r : resources) {
        for (auto& d : r.devices) {
            if (!d.mig) continue;
            const auto key = std::make_tuple(d.minor, d.mig->gpu_instance_id, d.mig->compute_instance_id);
            auto it = cache.find(key);
            if (it == cache.end())
                it = cache.emplace(key, find_mig_caps(proc_root, d.minor, d.mig->gpu_instance_id,
                                                      d.mig->compute_instance_id))
                         .first;
            if (it->second) {
                d.mig->gi_cap_minor = it->second->gi;
                d.mig->ci_cap_minor = it->second->ci;
                d.mig->caps_error.clear();
            } else {
                d.mig->caps_error = it->second.error().message;
                if (seen.insert(d.physical_id).second)
                    problems.push_back(fmt::format("MIG device {}:{} ({}): {}; Allocate with passDeviceSpecs will refuse it",
                                                   d.gpu_index, d.mig->index, d.uuid, d.mig->caps_error));
            }
        }
    }
    return problems;
}

}  // namespace kgpu::deviceplugin
