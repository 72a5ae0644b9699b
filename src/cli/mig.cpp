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
#include "mig/node.h"
#include "mig/plan.h"

namespace kgpu::cli {

namespace {

using mig::Gpu;
using mig::label;
using mig::read_node;

Result<std::vector<mig::Entry>> load_entries(const MigOptions& o) { return mig::load_entries(o.config_file, o.selected_config); }

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
        auto w = mig::wanted(*entries, g);
        if (!w) why.push_back(label(g) + " is not selected by any entry of the config");
        else if (auto m = mig::mismatch(g, *w, o.mode_only); !m.empty()) why.push_back(m);
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
    auto plan = mig::assess(*gpus, *entries, o.mode_only);
    for (const auto& st : plan.steps) {
        const Gpu& g = (*gpus)[st.gpu];
        if (!o.force && !st.busy.empty())
            plan.problems.push_back(fmt::format("{} has processes on what would change (pids {}); stop them or use --force",
                                                label(g), fmt::join(st.busy, ", ")));
        else if (!o.force && !g.pids_unknown.empty() && (st.mode_change || st.plan))
            plan.problems.push_back(fmt::format("{}: cannot tell which processes run on it ({}); use --force to change it anyway",
                                                label(g), g.pids_unknown));
    }
    if (!plan.problems.empty()) {
        std::cerr << "kgpu mig apply: nothing changed:\n";
        for (const auto& p : plan.problems) std::cerr << "  " << p << "\n";
        return kMigFailed;
    }

    int rc = kMigOk;
    for (auto& st : plan.steps) {
        Gpu& g = (*gpus)[st.gpu];
        auto r = mig::apply_step(g, st, o.mode_only);
        if (!r) return fail(r.error().message);
        if (*r == mig::Applied::done) continue;
        const bool reboot = *r == mig::Applied::needs_reboot;
        std::cerr << fmt::format("kgpu mig apply: {}: MIG mode {} is pending: {}\n", label(g),
                                 st.want.enabled ? "enabled" : "disabled",
                                 reboot ? "this host cannot reset the GPU (passed through to a VM?): reboot it"
                                        : "the GPU was busy; reset it (nvidia-smi -r) once idle, then apply again");
        rc = std::max(rc, reboot ? kMigNeedsReboot : kMigNeedsReset);
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
