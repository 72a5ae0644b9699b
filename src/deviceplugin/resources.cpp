#include "deviceplugin/resources.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kgpu::deviceplugin {

const Device* Resource::find(std::string_view id) const {
    if (id_index.size() == devices.size()) {
        auto it = id_index.find(std::string(id));
        if (it != id_index.end() && it->second < devices.size() && devices[it->second].id == id)
            return &devices[it->second];
        if (it == id_index.end()) return nullptr;
    }
    for (const Device& d : devices)
        if (d.id == id) return &d;
    return nullptr;
}

void Resource::reindex() {
    id_index.clear();
    id_index.reserve(devices.size());
    for (size_t i = 0; i < devices.size(); ++i) id_index.emplace(devices[i].id, i);
}

bool Resource::has_mig() const {
    return std::any_of(devices.begin(), devices.end(), [](const Device& d) { return d.mig.has_value(); });
}

bool pattern_matches(std::string_view pattern, std::string_view text) {
    // Iterative glob with '*' only: remember the last star and where the text resumed after it.
    size_t p = 0, t = 0, star = std::string_view::npos, resume = 0;
    while (t < text.size()) {
        if (p < pattern.size() && pattern[p] == '*') {
            star = p++;
            resume = t;
        } else if (p < pattern.size() && pattern[p] == text[t]) {
            ++p, ++t;
        } else if (star != std::string_view::npos) {
            p = star + 1;
            t = ++resume;
        } else {
            return false;
        }
    }
    while (p < pattern.size() && pattern[p] == '*') ++p;
    return p == pattern.size();
}

std::string mig_resource_name(std::string_view profile) {
    std::string name = "nvidia.com/mig-";
    for (char c : profile) name += c == '+' ? '.' : c;
    return name;
}

namespace {

// The advertised ID is the UUID under every deviceIDStrategy, as in NVIDIA's plugin: the
// strategy only changes what the container is handed (allocate.cpp), so the kubelet's checkpoint
// and PodResources keep naming the same devices when an operator switches strategy.
Device whole_gpu(const inventory::Gpu& g) {
    Device d;
    d.id = g.uuid;
    d.gpu_index = g.index;
    d.uuid = g.uuid;
    d.minor = g.minor;
    d.numa = g.numa_node;
    d.lost = g.lost;
    d.physical_id = d.id;
    return d;
}

Device mig_device(const inventory::Gpu& g, const inventory::MigDevice& m) {
    Device d;
    d.id = m.uuid;
    d.gpu_index = g.index;
    d.uuid = m.uuid;
    d.minor = g.minor;
    d.numa = g.numa_node;
    d.lost = g.lost;
    d.mig = MigInstance{m.index, m.gpu_instance_id, m.compute_instance_id, m.profile, std::nullopt, std::nullopt, ""};
    d.physical_id = d.id;
    return d;
}

bool before(const Device& a, const Device& b) {
    if (a.gpu_index != b.gpu_index) return a.gpu_index < b.gpu_index;
    const unsigned am = a.mig ? a.mig->index + 1 : 0, bm = b.mig ? b.mig->index + 1 : 0;
    if (am != bm) return am < bm;
    return a.replica.value_or(0) < b.replica.value_or(0);
}

// Whether a sharing `devices` entry names physical device `d`: its UUID, its GPU index (whole
// GPUs), or "i:j" (MIG devices).
bool names(const Device& d, std::string_view ref) {
    if (ref == d.uuid) return true;
    if (d.mig) return ref == fmt::format("{}:{}", d.gpu_index, d.mig->index);
    return ref == std::to_string(d.gpu_index);
}

// The name a whole GPU / a MIG device is served under: the first matching resources.gpus /
// resources.mig pattern when the patterns are applied, else the default.
std::string gpu_resource(const inventory::Gpu& g, const Config& c) {
    if (c.apply_resource_naming)
        for (const auto& p : c.resources.gpus)
            if (pattern_matches(p.pattern, g.name)) return p.name;
    return std::string(kGpuResourceName);
}
std::string mig_resource(const inventory::MigDevice& m, const Config& c, std::string fallback) {
    if (c.apply_resource_naming)
        for (const auto& p : c.resources.mig)
            if (pattern_matches(p.pattern, m.profile)) return p.name;
    return fallback;
}

std::string gpu_list(const std::vector<const inventory::Gpu*>& gpus) {
    std::vector<unsigned> idx;
    for (const auto* g : gpus) idx.push_back(g->index);
    return fmt::format("{}", fmt::join(idx, ", "));
}

// The physical resources (before time-slicing), by name.
Result<std::map<std::string, Resource>> physical(const inventory::Node& node, const Config& config,
                                                 std::vector<std::string>* warnings) {
    std::map<std::string, Resource> out;
    auto add = [&](const std::string& name, Device d) {
        auto& r = out[name];
        r.name = name;
        r.devices.push_back(std::move(d));
    };
    auto warn_empty = [&](const inventory::Gpu& g) {
        if (warnings)
            warnings->push_back(fmt::format(
                "GPU {} ({}) has MIG enabled but no MIG devices: it serves nothing with MIG strategy {} (create "
                "instances with nvidia-smi mig -cgi ... -C, or disable MIG)",
                g.index, g.uuid, to_string(config.mig_strategy)));
    };
    const bool any_mig = std::any_of(node.gpus.begin(), node.gpus.end(), [](const inventory::Gpu& g) {
        return g.mig_mode == inventory::MigMode::enabled;
    });

    if (config.mig_strategy == MigStrategy::none || (config.mig_strategy == MigStrategy::single && !any_mig)) {
        for (const auto& g : node.gpus) add(gpu_resource(g, config), whole_gpu(g));
        return out;
    }
    if (config.mig_strategy == MigStrategy::single) {
        std::vector<const inventory::Gpu*> on, off;
        std::map<std::string, std::vector<const inventory::Gpu*>> profiles;
        for (const auto& g : node.gpus) {
            if (g.mig_mode != inventory::MigMode::enabled) {
                if (!g.lost) off.push_back(&g);
                continue;
            }
            on.push_back(&g);
            for (const auto& m : g.mig_devices) {
                auto& v = profiles[m.profile];
                if (v.empty() || v.back() != &g) v.push_back(&g);
            }
        }
        if (!off.empty())
            return fail(Code::not_supported,
                        "MIG strategy single needs MIG enabled on every GPU, but GPU(s) {} have it enabled and GPU(s) "
                        "{} do not; enable MIG everywhere, or use --mig-strategy mixed",
                        gpu_list(on), gpu_list(off));
        if (profiles.size() > 1) {
            std::vector<std::string> parts;
            for (const auto& [p, gpus] : profiles) parts.push_back(fmt::format("{} on GPU(s) {}", p, gpu_list(gpus)));
            return fail(Code::not_supported,
                        "MIG strategy single needs one MIG profile on every GPU, but the node has {}; use one "
                        "profile, or --mig-strategy mixed",
                        fmt::join(parts, "; "));
        }
        for (const auto& g : node.gpus) {
            if (g.mig_devices.empty()) warn_empty(g);
            for (const auto& m : g.mig_devices)
                add(mig_resource(m, config, std::string(kGpuResourceName)), mig_device(g, m));
        }
        return out;
    }
    // mixed
    for (const auto& g : node.gpus) {
        if (g.mig_mode != inventory::MigMode::enabled) {
            add(gpu_resource(g, config), whole_gpu(g));
            continue;
        }
        if (g.mig_devices.empty()) warn_empty(g);
        for (const auto& m : g.mig_devices) add(mig_resource(m, config, mig_resource_name(m.profile)), mig_device(g, m));
    }
    return out;
}

Resource replicate(const std::string& name, const std::vector<const Device*>& devices, unsigned replicas,
                   bool fail_gt_one) {
    Resource r;
    r.name = name;
    r.replicas = replicas;
    r.fail_requests_greater_than_one = fail_gt_one;
    r.devices.reserve(devices.size() * replicas);
    for (const Device* d : devices) {
        for (unsigned n = 0; n < replicas; ++n) {
            Device copy = *d;
            copy.id = fmt::format("{}::{}", d->id, n);
            copy.physical_id = d->id;
            copy.replica = n;
            r.devices.push_back(std::move(copy));
        }
    }
    return r;
}

}  // namespace

Result<std::vector<Resource>> build_resources(const inventory::Node& node, const Config& config,
                                              std::vector<std::string>* warnings) {
    auto phys = physical(node, config, warnings);
    if (!phys) return std::unexpected(phys.error());
    for (auto& [name, r] : *phys) std::stable_sort(r.devices.begin(), r.devices.end(), before);

    // Which resource name a device reference is served under (for error messages).
    auto served_as = [&](std::string_view ref) -> std::string {
        for (const auto& [name, r] : *phys)
            for (const auto& d : r.devices)
                if (names(d, ref)) return name;
        return {};
    };

    std::vector<std::pair<Resource, int>> out;  // resource, the sharing entry that made it (-1: none)
    // Time-slicing and MPS replicate devices the same way (resolve() refuses both at once); an MPS
    // resource is marked so Allocate hands its pods the daemon's pipe directory.
    const bool mps = !config.sharing.time_slicing && config.sharing.mps;
    const ReplicatedResources* ts = config.sharing.time_slicing ? &*config.sharing.time_slicing
                                    : mps                       ? &*config.sharing.mps
                                                                : nullptr;
    const std::string section = mps ? "sharing.mps" : "sharing.timeSlicing";
    const std::string file = config.config_file.empty() ? std::string("config") : config.config_file;
    auto where = [&](size_t i, int line, std::string_view key) {
        return fmt::format("{}:{}: key '{}.resources[{}]{}'", file, line, section, i, key);
    };
    std::vector<bool> matched(ts ? ts->resources.size() : 0, false);

    for (auto& [name, base] : *phys) {
        std::vector<int> owner(base.devices.size(), -1);
        std::vector<std::pair<size_t, std::vector<size_t>>> selections;  // entry, device positions
        for (size_t i = 0; ts && i < ts->resources.size(); ++i) {
            const ReplicatedResource& e = ts->resources[i];
            if (e.name != name || e.unserved) continue;
            matched[i] = true;
            std::vector<size_t> picked;
            auto take = [&](size_t pos, int line, std::string_view ref) -> Status {
                if (owner[pos] >= 0)
                    return fail(Code::parse, "{}: device '{}' ({}) is listed twice{}", where(i, line, ".devices"),
                                ref, base.devices[pos].physical_id,
                                owner[pos] == static_cast<int>(i)
                                    ? std::string(" in this list")
                                    : fmt::format(" (also in {}.resources[{}])", section, owner[pos]));
                owner[pos] = static_cast<int>(i);
                picked.push_back(pos);
                return {};
            };
            const int dline = e.devices_line ? e.devices_line : e.line;
            if (e.all_devices) {
                for (size_t p = 0; p < base.devices.size(); ++p)
                    if (auto st = take(p, dline, base.devices[p].physical_id); !st) return std::unexpected(st.error());
            } else if (e.device_count) {
                if (*e.device_count > base.devices.size())
                    return fail(Code::parse, "{}: {} devices requested, but {} has only {}", where(i, dline, ".devices"),
                                *e.device_count, name, base.devices.size());
                for (size_t p = 0; p < *e.device_count; ++p)
                    if (auto st = take(p, dline, base.devices[p].physical_id); !st) return std::unexpected(st.error());
            } else {
                for (size_t k = 0; k < e.device_ids.size(); ++k) {
                    const std::string& ref = e.device_ids[k];
                    const int line = k < e.device_lines.size() ? e.device_lines[k] : dline;
                    auto it = std::find_if(base.devices.begin(), base.devices.end(),
                                           [&](const Device& d) { return names(d, ref); });
                    if (it == base.devices.end()) {
                        const std::string other = served_as(ref);
                        return fail(Code::parse, "{}: unknown device '{}' for {}{}", where(i, line, ".devices"), ref,
                                    name,
                                    other.empty() ? std::string(" (no such GPU index, i:j or UUID on this node)")
                                                  : fmt::format(" (it is served as {})", other));
                    }
                    if (auto st = take(static_cast<size_t>(it - base.devices.begin()), line, ref); !st)
                        return std::unexpected(st.error());
                }
            }
            std::sort(picked.begin(), picked.end());
            selections.emplace_back(i, std::move(picked));
        }
        for (const auto& [i, picked] : selections) {
            const ReplicatedResource& e = ts->resources[i];
            const std::string target = !e.rename.empty() ? e.rename : ts->rename_by_default ? name + ".shared" : name;
            std::vector<const Device*> devices;
            for (size_t p : picked) devices.push_back(&base.devices[p]);
            if (mps)
                for (const Device* d : devices)
                    if (d->mig)
                        return fail(Code::parse,
                                    "{}: MPS sharing is not supported for MIG devices ({} serves MIG device {} "
                                    "under migStrategy {}; MPS shares whole GPUs)",
                                    where(i, e.line, ".name"), name, d->physical_id, to_string(config.mig_strategy));
            out.emplace_back(replicate(target, devices, e.replicas, ts->fail_requests_greater_than_one),
                             static_cast<int>(i));
            out.back().first.mps = mps;
        }
        Resource rest;
        rest.name = name;
        for (size_t p = 0; p < base.devices.size(); ++p)
            if (owner[p] < 0) rest.devices.push_back(base.devices[p]);
        if (!rest.devices.empty()) out.emplace_back(std::move(rest), -1);
    }

    for (size_t i = 0; ts && i < ts->resources.size(); ++i) {
        const ReplicatedResource& e = ts->resources[i];
        if (matched[i] || e.unserved) continue;  // unserved: resolve() warned
        if (!e.all_devices) {
            const int line = e.devices_line ? e.devices_line : e.line;
            if (e.device_count)
                return fail(Code::parse, "{}: {} devices requested, but this node serves no {}",
                            where(i, line, ".devices"), *e.device_count, e.name);
            const std::string other = served_as(e.device_ids.front());
            return fail(Code::parse, "{}: unknown device '{}' for {}{}",
                        where(i, e.device_lines.empty() ? line : e.device_lines.front(), ".devices"),
                        e.device_ids.front(), e.name,
                        other.empty() ? std::string(" (this node serves no such resource)")
                                      : fmt::format(" (it is served as {})", other));
        }
        if (warnings)
            warnings->push_back(fmt::format("{}:{}: {}.resources[{}]: this node serves no {}; "
                                            "nothing to share",
                                            file, e.line, section, i, e.name));
    }

    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first.name < b.first.name; });
    for (size_t k = 1; k < out.size(); ++k) {
        if (out[k].first.name != out[k - 1].first.name) continue;
        const int entry = out[k].second >= 0 ? out[k].second : out[k - 1].second;
        if (entry < 0 || ts == nullptr) return fail(Code::internal, "two resources named {}", out[k].first.name);
        const ReplicatedResource& e = ts->resources[static_cast<size_t>(entry)];
        return fail(Code::parse, "{}: the shared devices would be served as {}, a name another resource already has",
                    where(static_cast<size_t>(entry), e.line, e.rename.empty() ? ".name" : ".rename"),
                    out[k].first.name);
    }
    std::vector<Resource> result;
    result.reserve(out.size());
    for (auto& [r, entry] : out) {
        r.reindex();
        result.push_back(std::move(r));
    }
    return result;
}

std::string describe_resources(const std::vector<Resource>& resources, const Config& config) {
    std::vector<std::string_view> lists;
    for (auto s : config.device_list_strategy) lists.push_back(to_string(s));
    std::string sharing = "none";
    if (config.sharing.time_slicing) sharing = "time-slicing";
    if (config.sharing.mps) sharing = "mps";
    std::string out = fmt::format(
        "serving {} resource{} (MIG strategy {}, containers see devices by {}, device list {}, sharing {}){}\n",
        resources.size(), resources.size() == 1 ? "" : "s", to_string(config.mig_strategy),
        to_string(config.device_id_strategy), fmt::join(lists, ","), sharing,
        resources.empty() ? ": serving no resource" : ":");
    size_t width = 0;
    for (const auto& r : resources) width = std::max(width, r.name.size());
    for (const auto& r : resources) {
        // The physical devices once each, in order.
        std::vector<std::string> phys;
        std::set<std::string> seen, profiles;
        for (const auto& d : r.devices) {
            if (!seen.insert(d.physical_id).second) continue;
            if (d.mig) {
                phys.push_back(fmt::format("{}:{}", d.gpu_index, d.mig->index));
                profiles.insert(d.mig->profile);
            } else {
                phys.push_back(std::to_string(d.gpu_index));
            }
        }
        std::string what = fmt::format("{} {}", profiles.empty() ? "GPU" : "MIG", fmt::join(phys, ", "));
        if (!profiles.empty()) what += fmt::format(" ({})", fmt::join(profiles, ", "));
        if (r.shared())
            what += fmt::format(" x {} replicas ({}{})", r.replicas, sharing,
                                r.fail_requests_greater_than_one ? ", at most 1 per container" : "");
        out += fmt::format("  {:<{}}  {:>3} {:<7} <- {}\n", r.name, width, r.devices.size(),
                           r.devices.size() == 1 ? "device" : "devices", what);
    }
    return out;
}

std::string socket_name(std::string_view resource_name) {
    std::string s = "kgpu-";
    for (char c : resource_name) s += (c == '/' || c == '.') ? '-' : c;
    return s + ".sock";
}

}  // namespace kgpu::deviceplugin
