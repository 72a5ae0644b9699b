#include "cli/mig.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/log.h"
#include "inventory/node.h"
#include "mig/config.h"
#include "mig/plan.h"

namespace kgpu::cli {

namespace {

// One GPU as `kgpu mig` sees it.
struct Gpu {
    Gpu(unsigned i, nvml::Device d) : index(i), dev(std::move(d)) {}
    unsigned index = 0;
    nvml::Device dev;
    std::string name;
    unsigned device_id = 0, subsystem_id = 0;
    bool capable = false;
    nvml::MigMode mode;
    std::vector<nvml::GpuInstanceProfile> nvml_profiles;
    std::vector<mig::Profile> profiles;
    std::vector<mig::Placed> instances;
    std::map<unsigned, nvml::GpuInstanceInfo> by_gi;  // present GPU instances by id
    std::vector<unsigned> partial;  // GPU instances without their one compute instance: no MIG device
    std::map<unsigned, std::vector<unsigned>> pids;    // GPU instance id (or kNoGi for the GPU) -> pids
    std::string pids_unknown;  // why the processes could not be read ("" when they were)
};
constexpr unsigned kNoGi = ~0u;

std::string label(const Gpu& g) { return fmt::format("GPU {} ({})", g.index, g.name); }

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
mig::Profile plan_profile(const nvml::GpuInstanceProfile& p, std::uint64_t gpu_mib) {
    mig::Profile mp{profile_name(p, gpu_mib), p.id, 0, p.instance_count, {}};
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
        const mig::Profile mp = plan_profile(p, gpu_mib);
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

// What one GPU should become: the last entry of the config that matches it.
struct Want {
    bool enabled = false;
    std::map<std::string, unsigned> devices;
    bool all = false;  // selected by `devices: all` (a GPU without MIG is then skipped, as mig-parted does)
};
std::optional<Want> wanted(const std::vector<mig::Entry>& entries, const Gpu& g) {
    std::optional<Want> out;
    for (const auto& e : entries)
        if (mig::matches(e, g.index, g.device_id, g.subsystem_id)) out = Want{e.mig_enabled, e.mig_devices, !e.devices};
    return out;
}

bool same_counts(std::map<std::string, unsigned> a, std::map<std::string, unsigned> b) {
    std::erase_if(a, [](const auto& kv) { return kv.second == 0; });
    std::erase_if(b, [](const auto& kv) { return kv.second == 0; });
    return a == b;
}

// Why GPU `g` does not match `w` ("" when it does); mode_only compares the mode alone.
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
    const auto have = mig::counts(g.instances);
    if (same_counts(have, w.devices)) return "";
    auto show = [](const std::map<std::string, unsigned>& m) {
        std::string s;
        for (const auto& [k, v] : m)
            if (v) s += (s.empty() ? "" : ", ") + fmt::format("{} x {}", v, k);
        return s.empty() ? std::string("none") : s;
    };
    return fmt::format("{}: has {}, the config wants {}", label(g), show(have), show(w.devices));
}

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

Result<std::vector<mig::Entry>> load_entries(const MigOptions& o) {
    if (o.config_file.empty())
        return std::unexpected(Error{Code::invalid_argument, "missing required flags 'config-file' (-f FILE or MIG_PARTED_CONFIG_FILE)"});
    auto text = files::read(o.config_file);
    if (!text) return std::unexpected(Error{text.error().code, "error parsing config file: " + text.error().message});
    auto config = mig::parse_config(*text, o.config_file);
    if (!config) return std::unexpected(Error{config.error().code, "error parsing config file: " + config.error().message});
    auto entries = mig::select(*config, o.selected_config);
    if (!entries) return std::unexpected(Error{entries.error().code, "error selecting MIG config: " + entries.error().message});
    return entries;
}

int run_assert(const nvml::Session& s, const MigOptions& o) {
    auto entries = load_entries(o);
    if (!entries) {
        std::cerr << "kgpu mig assert: " << entries.error().message << "\n";
        return kMigFailed;
    }
    auto gpus = read_node(s);
    if (!gpus) {
        std::cerr << "kgpu mig assert: " << gpus.error().message << "\n";
        return kMigFailed;
    }
    std::vector<std::string> why;
    for (const Gpu& g : *gpus) {
        auto w = wanted(*entries, g);
        if (!w) why.push_back(label(g) + " is not selected by any entry of the config");
        else if (auto m = mismatch(g, *w, o.mode_only); !m.empty()) why.push_back(m);
    }
    if (!why.empty()) {
        std::cerr << "kgpu mig assert: assertion failure: selected configuration not currently applied\n";
        for (const auto& line : why) std::cerr << "  " << line << "\n";
        return kMigFailed;
    }
    std::cout << (o.mode_only ? "Selected MIG mode settings from configuration currently applied\n"
                              : "Selected MIG configuration currently applied\n");
    return kMigOk;
}

int run_apply(const nvml::Session& s, const MigOptions& o) {
    auto fail = [](const std::string& msg) {
        std::cerr << "kgpu mig apply: " << msg << "\n";
        return kMigFailed;
    };
    auto entries = load_entries(o);
    if (!entries) return fail(entries.error().message);
    auto gpus = read_node(s);
    if (!gpus) return fail(gpus.error().message);

    // Everything is checked before anything changes: a layout that does not fit, a GPU that is
    // not MIG capable, or one with processes where something would be destroyed, stops it all.
    struct Step {
        Gpu* gpu;
        Want want;
        std::optional<mig::Plan> plan;  // when the instances change (MIG stays on)
        bool mode_change = false;
        bool cancel_pending = false;    // the mode is right but another one is pending: set it again
    };
    std::vector<Step> steps;
    std::vector<std::string> problems;
    for (Gpu& g : *gpus) {
        auto w = wanted(*entries, g);
        if (!w) continue;  // not selected: left alone
        if (!g.capable) {
            if (w->enabled && !w->all) problems.push_back(label(g) + " is not MIG capable; the config enables MIG on it");
            continue;
        }
        Step st{&g, *w, std::nullopt, g.mode.current != w->enabled, g.mode.current == w->enabled && g.mode.pending != w->enabled};
        // A driver that lists no profiles while MIG is off (older ones): the fit is checked
        // once MIG is on.
        const bool can_plan = !(st.mode_change && g.profiles.empty());
        if (w->enabled && !o.mode_only && can_plan) {
            std::string why;
            auto p = mig::plan(g.profiles, st.mode_change ? std::vector<mig::Placed>{} : g.instances, w->devices, &why);
            if (!p) {
                problems.push_back(fmt::format("{}: {}", label(g), why));
                continue;
            }
            if ((p->changes() || !g.partial.empty()) && !st.mode_change) st.plan = p;
        }
        if (!st.mode_change && !st.plan && !st.cancel_pending) continue;  // already right
        std::vector<unsigned> busy;
        if (st.mode_change) {
            busy = all_pids(g);
        } else if (st.plan) {
            for (const auto& d : st.plan->destroy)
                if (auto it = g.pids.find(*d.gi_id); it != g.pids.end()) busy.insert(busy.end(), it->second.begin(), it->second.end());
        }
        if (!o.force && !busy.empty()) {
            problems.push_back(fmt::format("{} has processes on what would change (pids {}); stop them or use --force",
                                           label(g), fmt::join(busy, ", ")));
            continue;
        }
        if (!o.force && !g.pids_unknown.empty() && (st.mode_change || st.plan)) {
            problems.push_back(fmt::format("{}: cannot tell which processes run on it ({}); use --force to change it anyway",
                                           label(g), g.pids_unknown));
            continue;
        }
        steps.push_back(std::move(st));
    }
    if (!problems.empty()) {
        std::cerr << "kgpu mig apply: nothing changed:\n";
        for (const auto& p : problems) std::cerr << "  " << p << "\n";
        return kMigFailed;
    }

    int rc = kMigOk;
    for (Step& st : steps) {
        Gpu& g = *st.gpu;
        const nvml::Device& dev = g.dev;
        auto destroy = [&](unsigned gi_id) -> Status {
            auto it = g.by_gi.find(gi_id);
            if (it == g.by_gi.end()) return {};
            return dev.destroy_gpu_instance(it->second);
        };
        auto create = [&](const mig::Placed& p) -> Status {
            const auto mp = std::ranges::find(g.profiles, p.profile, &mig::Profile::name);
            const auto np = mp == g.profiles.end() ? g.nvml_profiles.end()
                                                   : std::ranges::find(g.nvml_profiles, mp->id, &nvml::GpuInstanceProfile::id);
            if (np == g.nvml_profiles.end()) return std::unexpected(Error{Code::not_found, "no profile " + p.profile});
            auto made = dev.create_gpu_instance(*np, p.start);
            if (!made) return std::unexpected(made.error());
            log::info("{}: created {} at memory slice {} (GPU instance {})", label(g), p.profile, p.start, made->id);
            return {};
        };
        if (st.cancel_pending && !st.mode_change) {
            if (auto act = dev.set_mig_mode(st.want.enabled); !act)
                return fail(fmt::format("{}: setting MIG mode: {}", label(g), act.error().message));
            log::info("{}: the pending MIG mode change is cancelled", label(g));
        }
        for (unsigned gi : g.partial)  // half-made GPU instances go first
            if (auto r = destroy(gi); !r) return fail(fmt::format("{}: destroying GPU instance {}: {}", label(g), gi, r.error().message));
        if (st.mode_change) {
            for (const auto& i : g.instances)
                if (auto r = destroy(*i.gi_id); !r) return fail(fmt::format("{}: destroying GPU instance {}: {}", label(g), *i.gi_id, r.error().message));
            auto act = dev.set_mig_mode(st.want.enabled);
            if (!act) return fail(fmt::format("{}: setting MIG mode: {}", label(g), act.error().message));
            if (*act != nvml::MigActivation::now) {
                const bool reboot = *act == nvml::MigActivation::needs_reboot;
                std::cerr << fmt::format("kgpu mig apply: {}: MIG mode {} is pending: {}\n", label(g),
                                         st.want.enabled ? "enabled" : "disabled",
                                         reboot ? "this host cannot reset the GPU (passed through to a VM?): reboot it"
                                                : "the GPU was busy; reset it (nvidia-smi -r) once idle, then apply again");
                rc = std::max(rc, reboot ? kMigNeedsReboot : kMigNeedsReset);
                continue;
            }
            log::info("{}: MIG mode {}", label(g), st.want.enabled ? "enabled" : "disabled");
            if (!st.want.enabled || o.mode_only) continue;
            // The profiles as the driver lists them with MIG on.
            auto listed = dev.gpu_instance_profiles();
            if (!listed) return fail(fmt::format("{}: reading the MIG profiles: {}", label(g), listed.error().message));
            const auto mem = dev.memory();
            g.nvml_profiles = *listed;
            g.profiles.clear();
            for (const auto& np : g.nvml_profiles) g.profiles.push_back(plan_profile(np, mem ? mem->total >> 20 : 0));
            std::string why;
            auto p = mig::plan(g.profiles, {}, st.want.devices, &why);
            if (!p) return fail(fmt::format("{}: MIG is on, but {}", label(g), why));
            st.plan = p;
            g.by_gi.clear();
        }
        if (!st.plan) continue;
        for (const auto& d : st.plan->destroy)
            if (auto r = destroy(*d.gi_id); !r) return fail(fmt::format("{}: destroying GPU instance {}: {}", label(g), *d.gi_id, r.error().message));
        for (const auto& c : st.plan->create)
            if (auto r = create(c); !r) return fail(fmt::format("{}: creating {} at memory slice {}: {}", label(g), c.profile, c.start, r.error().message));
    }
    if (rc == kMigOk) std::cout << (o.mode_only ? "MIG mode applied successfully\n" : "MIG configuration applied successfully\n");
    return rc;
}

int run_export(const nvml::Session& s, const MigOptions& o) {
    if (o.output_format != "yaml" && o.output_format != "json") {
        std::cerr << "kgpu mig export: -o: expected yaml or json, got '" << o.output_format << "'\n";
        return kMigFailed;
    }
    auto gpus = read_node(s);
    if (!gpus) {
        std::cerr << "kgpu mig export: " << gpus.error().message << "\n";
        return kMigFailed;
    }
    // GPUs with the same state share one entry; `devices: all` when that is every GPU; device
    // filters only when the node has more than one kind of GPU.
    struct Group {
        bool enabled;
        std::map<std::string, unsigned> devices;
        std::vector<unsigned> indices;
        std::set<unsigned> ids;
    };
    std::vector<Group> groups;
    std::set<unsigned> kinds;
    for (const Gpu& g : *gpus) {
        kinds.insert(g.device_id);
        const bool en = g.capable && g.mode.current;
        auto c = en ? mig::counts(g.instances) : std::map<std::string, unsigned>{};
        auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return x.enabled == en && x.devices == c; });
        if (it == groups.end()) it = groups.insert(groups.end(), Group{en, c, {}, {}});
        it->indices.push_back(g.index);
        it->ids.insert(g.device_id);
    }
    auto id_str = [](unsigned id) { return fmt::format("0x{:08X}", id); };
    nlohmann::ordered_json entries = nlohmann::ordered_json::array();
    for (const Group& gr : groups) {
        nlohmann::ordered_json e;
        if (kinds.size() > 1 && groups.size() > 1) {
            if (gr.ids.size() == 1) e["device-filter"] = id_str(*gr.ids.begin());
            else for (unsigned id : gr.ids) e["device-filter"].push_back(id_str(id));
        }
        if (gr.indices.size() == gpus->size()) e["devices"] = "all";
        else e["devices"] = gr.indices;
        e["mig-enabled"] = gr.enabled;
        e["mig-devices"] = nlohmann::ordered_json::object();
        for (const auto& [k, v] : gr.devices) e["mig-devices"][k] = v;
        entries.push_back(e);
    }
    if (o.output_format == "json") {
        nlohmann::ordered_json doc;
        doc["version"] = "v1";
        doc["mig-configs"][o.config_label] = entries;
        std::cout << doc.dump(2) << "\n";
        return kMigOk;
    }
    std::string out = "version: v1\nmig-configs:\n  " + o.config_label + ":\n";
    for (const auto& e : entries) {
        bool first = true;
        auto line = [&](const std::string& text) {
            out += (first ? "  - " : "    ") + text + "\n";
            first = false;
        };
        if (e.contains("device-filter")) line("device-filter: " + e["device-filter"].dump());
        line("devices: " + (e["devices"].is_string() ? std::string("all") : e["devices"].dump()));
        line(std::string("mig-enabled: ") + (e["mig-enabled"].get<bool>() ? "true" : "false"));
        if (e["mig-devices"].empty()) {
            line("mig-devices: {}");
        } else {
            line("mig-devices:");
            for (const auto& [k, v] : e["mig-devices"].items()) out += "      " + nlohmann::json(k).dump() + ": " + v.dump() + "\n";
        }
    }
    std::cout << out;
    return kMigOk;
}

}  // namespace

void add_mig_command(CLI::App& app, MigOptions& o) {
    auto* cmd = app.add_subcommand("mig", "MIG layouts as declarative config (mig-parted's file format and flags)");
    cmd->require_subcommand(1);
    auto config_flags = [&](CLI::App* sub) {
        add_nvml_options(*sub, o.nvml);
        sub->add_option("-f,--config-file", o.config_file, "mig-parted configuration file")->envname("MIG_PARTED_CONFIG_FILE");
        sub->add_option("-c,--selected-config", o.selected_config, "The config (mig-configs key) to apply; optional with one")
            ->envname("MIG_PARTED_SELECTED_CONFIG");
        sub->add_flag("-m,--mode-only", o.mode_only, "Only the MIG mode, not the instances")->envname("MIG_PARTED_MODE_CHANGE_ONLY");
    };
    auto* apply = cmd->add_subcommand("apply", "Make the GPUs match the selected config (changes nothing already right)");
    config_flags(apply);
    apply->add_flag("-s,--skip-reset", o.skip_reset, "Accepted for mig-parted; kgpu never resets a GPU (a pending mode exits 3)")
        ->envname("MIG_PARTED_SKIP_RESET");
    apply->add_flag("--force", o.force, "Also GPUs with processes: a mode change then waits for a reset; an instance in use is not destroyed (the driver refuses)");
    auto* assert_cmd = cmd->add_subcommand("assert", "Exit 0 only if every GPU matches the selected config");
    config_flags(assert_cmd);
    auto* exp = cmd->add_subcommand("export", "Print the GPUs' present MIG layout as a mig-parted config");
    add_nvml_options(*exp, o.nvml);
    exp->add_option("-o,--output-format", o.output_format, "yaml or json")->envname("MIG_PARTED_OUTPUT_FORMAT")->capture_default_str();
    exp->add_option("-l,--config-label", o.config_label, "The config's name in the output")->envname("MIG_PARTED_CONFIG_LABEL")->capture_default_str();
}

int run_mig(const CLI::App& mig_cmd, const MigOptions& o) {
    auto session = open_nvml(o.nvml);
    if (!session) {
        std::cerr << "kgpu mig: " << session.error().message << "\n";
        return kMigFailed;
    }
    if (mig_cmd.got_subcommand("apply")) return run_apply(*session, o);
    if (mig_cmd.got_subcommand("assert")) return run_assert(*session, o);
    return run_export(*session, o);
}

}  // namespace kgpu::cli
