#include "mig/manager.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/duration.h"
#include "common/files.h"
#include "common/log.h"
#include "deviceplugin/paused.h"
#include "mig/node.h"

namespace kgpu::mig {

namespace {

// The paused-GPUs file: written whole (atomically) or removed.
class Pause {
public:
    explicit Pause(std::string path, std::string selected) : path_(std::move(path)), selected_(std::move(selected)) {}
    // Writes the file when `uuids` differ from what it lists. Returns whether a GPU was added.
    Result<bool> set(const std::set<std::string>& uuids) {
        if (path_.empty() || uuids == uuids_) return false;
        std::error_code ec;
        std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
        auto st = files::write_atomic(path_, deviceplugin::paused_gpus_text(
                                                 uuids, fmt::format("kgpu mig-manager is applying MIG config '{}'", selected_)));
        if (!st)
            return std::unexpected(Error{st.error().code, fmt::format("cannot pause the GPUs for the device plugin: {}",
                                                                      st.error().message)});
        const bool added = !std::ranges::includes(uuids_, uuids);
        uuids_ = uuids;
        return added;
    }
    void clear() {
        if (path_.empty()) return;
        std::error_code ec;
        if (std::filesystem::remove(path_, ec) || !uuids_.empty()) log::info("mig-manager: GPUs resumed ({} removed)", path_);
        if (ec) log::error("mig-manager: removing {}: {}", path_, ec.message());
        uuids_.clear();
    }

private:
    std::string path_, selected_;
    std::set<std::string> uuids_;
};

// Waits `d`, in steps, unless `interrupted` says to stop (then true).
bool wait_for(std::chrono::milliseconds d, const ManagerHooks& hooks) {
    const auto wake = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < wake) {
        if (hooks.interrupted && hooks.interrupted()) return true;
        std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(d, std::chrono::milliseconds(100)));
    }
    return hooks.interrupted && hooks.interrupted();
}

}  // namespace

Outcome reconfigure(const nvml::Session& session, const std::string& selected, const std::string& previous_state,
                    const ManagerOptions& o, const ManagerHooks& hooks) {
    Pause pause(o.paused_gpus_file, selected);
    auto failed = [&](const std::string& why) {
        pause.clear();
        log::error("mig-manager: MIG config '{}' failed: {}", selected, why);
        hooks.set_state("failed");
        hooks.event("Warning", kReasonFailed, fmt::format("MIG config '{}' failed: {}", selected, why));
        return Outcome::failed;
    };
    auto entries = load_entries(o.config_file, selected);
    if (!entries) return failed(entries.error().message);

    bool announced = false;               // state pending set
    std::set<unsigned> changed;           // GPUs this run changed, by index
    std::map<unsigned, unsigned> tries;   // apply_step calls per GPU (a GPU that never matches fails)
    std::map<unsigned, std::string> needs_reset;  // GPUs whose new mode waits for a reset, and why
    std::string waiting_said;
    bool pods_unknown_said = false;
    const auto deadline = std::chrono::steady_clock::now() + o.process_timeout;
    for (;;) {
        auto gpus = read_node(session);
        if (!gpus) return failed(gpus.error().message);
        auto a = assess(*gpus, *entries, false);
        if (!a.problems.empty()) return failed(fmt::format("{}", fmt::join(a.problems, "; ")));
        if (a.steps.empty()) {
            pause.clear();
            hooks.set_state("success");
            const std::string msg =
                changed.empty() ? fmt::format("MIG config '{}' is already applied", selected)
                                : fmt::format("MIG config '{}' applied: GPU{} {} changed", selected, changed.size() > 1 ? "s" : "",
                                              fmt::join(changed, ", "));
            log::info("mig-manager: {}", msg);
            hooks.event("Normal", kReasonApplied, msg);
            return Outcome::success;
        }
        if (previous_state == "rebooting")
            for (const auto& st : a.steps)
                if (st.mode_change)
                    return failed("MIG mode change did not take effect after rebooting: " +
                                  mismatch((*gpus)[st.gpu], st.want, true));
        if (!announced) {
            announced = true;
            std::vector<std::string> names;
            for (const auto& st : a.steps) names.push_back(label((*gpus)[st.gpu]));
            log::info("mig-manager: MIG config '{}': {} to change ({}), paused for new pods", selected, names.size(),
                      fmt::join(names, ", "));
            hooks.set_state("pending");
        }
        // Paused: the GPUs still to change (one that is done is offered again at once). A GPU
        // newly paused is changed only after the pause has reached the kubelet and the node
        // has been read again: a pod the kubelet gave it meanwhile is then seen.
        std::set<std::string> paused;
        for (const auto& st : a.steps) paused.insert((*gpus)[st.gpu].uuid);
        auto added = pause.set(paused);
        if (!added) return failed(added.error().message);
        if (*added) {
            if (wait_for(o.pause_settle, hooks)) {
                pause.clear();
                return Outcome::interrupted;
            }
            continue;
        }
        std::optional<std::vector<PodUse>> uses;
        if (hooks.pod_uses) uses = hooks.pod_uses();
        if (!uses && hooks.pod_uses && !pods_unknown_said) {
            log::warn("mig-manager: the kubelet's PodResources does not answer: only processes tell which GPUs are in use");
            pods_unknown_said = true;
        }

        std::vector<std::string> busy_why;
        bool progressed = false;
        for (auto& st : a.steps) {
            Gpu& g = (*gpus)[st.gpu];
            if (needs_reset.contains(g.index)) continue;
            // Who uses what would change: the whole GPU for a mode change, else the instances destroyed.
            std::set<unsigned> destroyed;
            if (st.plan)
                for (const auto& d : st.plan->destroy) destroyed.insert(*d.gi_id);
            std::vector<std::string> pods;
            for (const auto& u : uses.value_or(std::vector<PodUse>{}))
                if (u.gpu == g.index && (st.mode_change || (u.gpu_instance && destroyed.contains(*u.gpu_instance))) &&
                    std::ranges::find(pods, u.pod) == pods.end())
                    pods.push_back(u.pod);
            const bool unknown = st.busy.empty() && !g.pids_unknown.empty() && (st.mode_change || st.plan);
            if (!st.busy.empty() || !pods.empty() || unknown) {
                std::vector<std::string> parts;
                if (!st.busy.empty()) parts.push_back(fmt::format("pids {}", fmt::join(st.busy, ", ")));
                if (!pods.empty()) parts.push_back(fmt::format("pods {}", fmt::join(pods, ", ")));
                if (unknown) parts.push_back("its processes cannot be read: " + g.pids_unknown);
                busy_why.push_back(fmt::format("{} ({})", label(g), fmt::join(parts, "; ")));
                continue;
            }
            if (++tries[g.index] > 3) return failed(fmt::format("{} still does not match after 3 attempts: {}", label(g), mismatch(g, st.want, false)));
            auto r = apply_step(g, st, false);
            if (!r) return failed(r.error().message);
            if (*r != Applied::done) {
                needs_reset[g.index] = fmt::format(
                    "{}: the MIG mode change is pending a GPU reset ({})", label(g),
                    *r == Applied::needs_reboot
                        ? "the driver says only a reboot applies it (a GPU passed through to a VM, or a driver that cannot reset it)"
                        : "the GPU was in use when the mode was set");
                continue;
            }
            changed.insert(g.index);
            progressed = true;
        }
        if (progressed) continue;  // read the node again: the next round checks what was done
        std::vector<std::string> resets;
        for (const auto& [_, why] : needs_reset) resets.push_back(why);
        if (busy_why.empty() && !resets.empty()) {  // only resets left: the other GPUs are done
            const std::string why = fmt::format("{}", fmt::join(resets, "; "));
            if (!o.with_reboot) return failed(why + "; reboot the node, or run the MIG manager with --with-reboot (WITH_REBOOT=true)");
            log::warn("mig-manager: {}: rebooting the node", why);
            hooks.set_state("rebooting");
            hooks.event("Warning", kReasonRebooting, why + ": rebooting the node");
            const std::string not_rebooted = hooks.reboot ? hooks.reboot() : std::string("no way to reboot");
            if (not_rebooted.empty()) return Outcome::rebooting;  // the paused file goes with /run
            return failed(why + "; the reboot did not happen: " + not_rebooted);
        }
        if (std::chrono::steady_clock::now() >= deadline)
            return failed(fmt::format("still in use after {}: {}{}{}; once they are gone, set the label to another value "
                                      "and back (the same value is no change), or restart the MIG manager",
                                      format_duration(std::chrono::duration_cast<std::chrono::seconds>(o.process_timeout)), fmt::join(busy_why, "; "), resets.empty() ? "" : "; and ",
                                      fmt::join(resets, "; ")));
        const std::string waiting = fmt::format("MIG config '{}' waits for {} to be free (up to {})", selected,
                                                fmt::join(busy_why, "; "), format_duration(std::chrono::duration_cast<std::chrono::seconds>(o.process_timeout)));
        if (waiting != waiting_said) {
            log::info("mig-manager: {}", waiting);
            hooks.event("Normal", kReasonWaiting, waiting);
            waiting_said = waiting;
        }
        if (wait_for(o.poll, hooks)) {
            pause.clear();
            return Outcome::interrupted;
        }
    }
}

}  // namespace kgpu::mig
