#include "mig/node.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/files.h"
#include "common/log.h"
#include "inventory/node.h"

namespace kgpu::mig {

namespace {

// go-nvlib's names: the memory in eighths of the GPU's, and the attribute of the profile index
// (REV1 +me; GFX +gfx; NO_ME -me; ALL_ME +me.all).
std::string profile_name(const nvml::GpuInstanceProfile& p, std::uint64_t gpu_mib) {
    std::string name = inventory::mig_profile_name(p.slices, p.memory_mb, gpu_mib);
    switch (p.index) {
        case 0x07: case 0x08: return name + "+me";
        case 0x0A: case 0x0B: case 0x0C: case 0x11: return name + "+gfx";
        case 0x0D: case 0x0E: return name + "-me";
        case 0x0F: case 0x10: return name + "+me.all";
        default: return name;
    }
}

// The planner's view of a profile: its name, id, size in memory slices and starts.
Profile plan_profile(const nvml::GpuInstanceProfile& p, std::uint64_t gpu_mib) {
    Profile mp{profile_name(p, gpu_mib), p.id, 0, p.instance_count, {}};
    for (auto [start, size] : p.placements) {
        mp.size = size;
        mp.starts.push_back(start);
    }
    return mp;
}

Result<Gpu> read_gpu(const nvml::Session& s, unsigned index) {
    auto dev = s.device_by_index(index);
    if (!dev) return std::unexpected(dev.error());
    Gpu g(index, *dev);
    g.name = dev->name().value_or("GPU");
    g.uuid = dev->uuid().value_or("");
    auto pci = dev->pci_info();
    if (!pci) return std::unexpected(pci.error());  // without its device id no entry could select it
    g.device_id = pci->device_id;
    g.subsystem_id = pci->subsystem_id;
    auto mode = dev->mig_mode();
    if (!mode) {
        if (mode.error().code == Code::not_supported) return g;  // not MIG capable
        return std::unexpected(mode.error());
    }
    g.capable = true;
    g.mode = *mode;
    const auto mem = dev->memory();
    const std::uint64_t gpu_mib = mem ? mem->total >> 20 : 0;
    auto profiles = dev->gpu_instance_profiles();
    if (!profiles) return std::unexpected(profiles.error());
    g.nvml_profiles = *profiles;
    for (const auto& p : g.nvml_profiles) {
        const Profile mp = plan_profile(p, gpu_mib);
        g.profiles.push_back(mp);
        if (!g.mode.current) continue;
        auto gis = dev->gpu_instances(p);
        if (!gis) return std::unexpected(gis.error());
        for (const auto& gi : *gis) {
            g.by_gi[gi.id] = gi;
            if (gi.compute_instances == 1) g.instances.push_back({mp.name, gi.start, gi.id});
            else g.partial.push_back(gi.id);  // half made (or made by hand): re-made by apply
        }
    }
    // Who runs where: the GPU's processes, or each MIG device's under its GPU instance. What
    // cannot be read counts as busy (apply refuses to change it without --force).
    if (auto procs = dev->compute_processes())
        for (const auto& p : *procs) g.pids[kNoGi].push_back(p.pid);
    else if (procs.error().code != Code::not_supported)
        g.pids_unknown = procs.error().message;
    if (g.mode.current) {
        auto slots = dev->max_mig_devices();
        if (!slots) g.pids_unknown = slots.error().message;
        for (unsigned i = 0; slots && i < *slots; ++i) {
            auto m = dev->mig_device(i);
            if (!m) {
                g.pids_unknown = m.error().message;
                continue;
            }
            if (!*m) continue;
            const auto gi = (*m)->gpu_instance_id();
            auto procs = (*m)->compute_processes();
            if (!gi || !procs) {
                g.pids_unknown = !gi ? gi.error().message : procs.error().message;
                continue;
            }
            for (const auto& p : *procs) g.pids[*gi].push_back(p.pid);
        }
    }
    return g;
}

std::vector<unsigned> all_pids(const Gpu& g) {
    std::vector<unsigned> out;
    for (const auto& [gi, pids] : g.pids) out.insert(out.end(), pids.begin(), pids.end());
    return out;
}

bool same_counts(std::map<std::string, unsigned> a, std::map<std::string, unsigned> b) {
    std::erase_if(a, [](const auto& kv) { return kv.second == 0; });
    std::erase_if(b, [](const auto& kv) { return kv.second == 0; });
    return a == b;
}

}  // namespace

std::string label(const Gpu& g) { return fmt::format("GPU {} ({})", g.index, g.name); }

Result<std::vector<Gpu>> read_node(const nvml::Session& s) {
    auto n = s.device_count();
    if (!n) return std::unexpected(n.error());
    std::vector<Gpu> out;
    for (unsigned i = 0; i < *n; ++i) {
        auto g = read_gpu(s, i);
        if (!g) return std::unexpected(Error{g.error().code, fmt::format("GPU {}: {}", i, g.error().message)});
        out.push_back(std::move(*g));
    }
    return out;
}

std::optional<Want> wanted(const std::vector<Entry>& entries, const Gpu& g) {
    std::optional<Want> out;
    for (const auto& e : entries)
        if (matches(e, g.index, g.device_id, g.subsystem_id)) out = Want{e.mig_enabled, e.mig_devices, !e.devices};
    return out;
}

std::string mismatch(const Gpu& g, const Want& w, bool mode_only) {
    if (!g.capable) return w.enabled && !w.all ? label(g) + " is not MIG capable" : "";
    if (g.mode.current == w.enabled && g.mode.pending != w.enabled)
        return fmt::format("{}: MIG mode {} is pending (after the next GPU reset); the config wants it {}", label(g),
                           g.mode.pending ? "enabled" : "disabled", w.enabled ? "enabled" : "disabled");
    if (g.mode.current != w.enabled)
        return fmt::format("{}: MIG mode is {}, the config wants it {}{}", label(g), g.mode.current ? "enabled" : "disabled",
                           w.enabled ? "enabled" : "disabled",
                           g.mode.pending != g.mode.current ? " (the change is pending a GPU reset)" : "");
    if (mode_only || !w.enabled) return "";
    if (!g.partial.empty())
        return fmt::format("{}: GPU instance {} has no compute instance (no MIG device)", label(g), g.partial.front());
    const auto have = counts(g.instances);
    if (same_counts(have, w.devices)) return "";
    auto show = [](const std::map<std::string, unsigned>& m) {
        std::string s;
        for (const auto& [k, v] : m)
            if (v) s += (s.empty() ? "" : ", ") + fmt::format("{} x {}", v, k);
        return s.empty() ? std::string("none") : s;
    };
    return fmt::format("{}: has {}, the config wants {}", label(g), show(have), show(w.devices));
}

Result<std::vector<Entry>> load_entries(const std::string& file, const std::string& selected) {
    if (file.empty())
        return std::unexpected(Error{Code::invalid_argument, "missing required flags 'config-file' (-f FILE or MIG_PARTED_CONFIG_FILE)"});
    auto text = files::read(file);
    if (!text) return std::unexpected(Error{text.error().code, "error parsing config file: " + text.error().message});
    auto config = parse_config(*text, file);
    if (!config) return std::unexpected(Error{config.error().code, "error parsing config file: " + config.error().message});
    auto entries = select(*config, selected);
    if (!entries) return std::unexpected(Error{entries.error().code, "error selecting MIG config: " + entries.error().message});
    return entries;
}

Assessment assess(const std::vector<Gpu>& gpus, const std::vector<Entry>& entries, bool mode_only) {
    Assessment out;
    for (std::size_t i = 0; i < gpus.size(); ++i) {
        const Gpu& g = gpus[i];
        auto w = wanted(entries, g);
        if (!w) continue;  // not selected: left alone
        if (!g.capable) {
            if (w->enabled && !w->all) out.problems.push_back(label(g) + " is not MIG capable; the config enables MIG on it");
            continue;
        }
        Step st{i, *w, std::nullopt, g.mode.current != w->enabled, g.mode.current == w->enabled && g.mode.pending != w->enabled, {}};
        // A driver that lists no profiles while MIG is off (older ones): the fit is checked
        // once MIG is on.
        const bool can_plan = !(st.mode_change && g.profiles.empty());
        if (w->enabled && !mode_only && can_plan) {
            std::string why;
            auto p = plan(g.profiles, st.mode_change ? std::vector<Placed>{} : g.instances, w->devices, &why);
            if (!p) {
                out.problems.push_back(fmt::format("{}: {}", label(g), why));
                continue;
            }
            if ((p->changes() || !g.partial.empty()) && !st.mode_change) st.plan = p;
        }
        if (!st.mode_change && !st.plan && !st.cancel_pending) continue;  // already right
        if (st.mode_change) {
            st.busy = all_pids(g);
        } else if (st.plan) {
            for (const auto& d : st.plan->destroy)
                if (auto it = g.pids.find(*d.gi_id); it != g.pids.end()) st.busy.insert(st.busy.end(), it->second.begin(), it->second.end());
        }
        out.steps.push_back(std::move(st));
    }
    return out;
}

Result<Applied> apply_step(Gpu& g, Step& st, bool mode_only) {
    const nvml::Device& dev = g.dev;
    auto fail = [&](const std::string& what, const Error& e) -> Result<Applied> {
        return std::unexpected(Error{e.code, fmt::format("{}: {}: {}", label(g), what, e.message)});
    };
    auto destroy = [&](unsigned gi_id) -> Status {
        auto it = g.by_gi.find(gi_id);
        if (it == g.by_gi.end()) return {};
        return dev.destroy_gpu_instance(it->second);
    };
    auto create = [&](const Placed& p) -> Status {
        const auto mp = std::ranges::find(g.profiles, p.profile, &Profile::name);
        const auto np = mp == g.profiles.end() ? g.nvml_profiles.end()
                                               : std::ranges::find(g.nvml_profiles, mp->id, &nvml::GpuInstanceProfile::id);
        if (np == g.nvml_profiles.end()) return std::unexpected(Error{Code::not_found, "no profile " + p.profile});
        auto made = dev.create_gpu_instance(*np, p.start);
        if (!made) return std::unexpected(made.error());
        log::info("{}: created {} at memory slice {} (GPU instance {})", label(g), p.profile, p.start, made->id);
        return {};
    };
    if (st.cancel_pending && !st.mode_change) {
        if (auto act = dev.set_mig_mode(st.want.enabled); !act) return fail("setting MIG mode", act.error());
        log::info("{}: the pending MIG mode change is cancelled", label(g));
    }
    for (unsigned gi : g.partial)  // half-made GPU instances go first
        if (auto r = destroy(gi); !r) return fail(fmt::format("destroying GPU instance {}", gi), r.error());
    g.partial.clear();
    if (st.mode_change) {
        for (const auto& i : g.instances)
            if (auto r = destroy(*i.gi_id); !r) return fail(fmt::format("destroying GPU instance {}", *i.gi_id), r.error());
        auto act = dev.set_mig_mode(st.want.enabled);
        if (!act) return fail("setting MIG mode", act.error());
        if (*act != nvml::MigActivation::now)
            return *act == nvml::MigActivation::needs_reboot ? Applied::needs_reboot : Applied::needs_reset;
        log::info("{}: MIG mode {}", label(g), st.want.enabled ? "enabled" : "disabled");
        if (!st.want.enabled || mode_only) return Applied::done;
        // The profiles as the driver lists them with MIG on.
        auto listed = dev.gpu_instance_profiles();
        if (!listed) return fail("reading the MIG profiles", listed.error());
        const auto mem = dev.memory();
        g.nvml_profiles = *listed;
        g.profiles.clear();
        for (const auto& np : g.nvml_profiles) g.profiles.push_back(plan_profile(np, mem ? mem->total >> 20 : 0));
        std::string why;
        auto p = plan(g.profiles, {}, st.want.devices, &why);
        if (!p) return std::unexpected(Error{Code::invalid_argument, fmt::format("{}: MIG is on, but {}", label(g), why)});
        st.plan = p;
        g.by_gi.clear();
    }
    if (!st.plan) return Applied::done;
    for (const auto& d : st.plan->destroy)
        if (auto r = destroy(*d.gi_id); !r) return fail(fmt::format("destroying GPU instance {}", *d.gi_id), r.error());
    for (const auto& c : st.plan->create)
        if (auto r = create(c); !r) return fail(fmt::format("creating {} at memory slice {}", c.profile, c.start), r.error());
    return Applied::done;
}

}  // namespace kgpu::mig
