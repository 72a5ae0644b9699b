#include "mig/manager.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/files.h"
#include "common/log.h"
#include "deviceplugin/paused.h"
#include "mig/node.h"

namespace kgpu::mig {

namespace {

std::string seconds_of(std::chrono::milliseconds d) {
    const auto s = std::chrono::duration_cast<std::chrono::seconds>(d).count();
    return s % 60 == 0 && s >= 60 ? fmt::format("{}m", s / 60) : fmt::format("{}s", s);
}

// The paused-GPUs file: written whole (atomically) or removed.
class Pause {
public:
    explicit Pause(std::string path, std::string selected) : path_(std::move(path)), selected_(std::move(selected)) {}
    void set(const std::set<std::string>& uuids) {
        if (path_.empty() || uuids == uuids_) return;
        std::error_code ec;
        std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
        auto st = files::write_atomic(path_, deviceplugin::paused_gpus_text(
                                                 uuids, fmt::format("kgpu mig-manager is applying MIG config '{}'", selected_)));
        if (!st) log::error("mig-manager: {}: {} (the device plugin keeps offering these GPUs)", path_, st.error().message);
        uuids_ = uuids;
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

    bool announced = false;               // state pending set, the GPUs that change paused
    std::set<unsigned> changed;           // GPUs this run changed, by index
    std::map<unsigned, unsigned> tries;   // apply_step calls per GPU (a GPU that never matches fails)
    std::string waiting_said;
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
        // Paused: the GPUs still to change (one that is done is offered again at once).
        std::set<std::string> paused;
        for (const auto& st : a.steps) paused.insert((*gpus)[st.gpu].uuid);
        pause.set(paused);
        if (!announced) {
            announced = true;
            std::vector<std::string> names;
            for (const auto& st : a.steps) names.push_back(label((*gpus)[st.gpu]));
            log::info("mig-manager: MIG config '{}': {} to change ({}), paused for new pods", selected, names.size(),
                      fmt::join(names, ", "));
            hooks.set_state("pending");
        }

        std::vector<unsigned> busy;
        std::vector<std::string> busy_why, needs_reset;
        bool progressed = false;
        for (auto& st : a.steps) {
            Gpu& g = (*gpus)[st.gpu];
            if (!st.busy.empty() || (!g.pids_unknown.empty() && (st.mode_change || st.plan))) {
                busy.push_back(g.index);
                busy_why.push_back(st.busy.empty() ? fmt::format("{} (its processes cannot be read: {})", label(g), g.pids_unknown)
                                                   : fmt::format("{} (pids {})", label(g), fmt::join(st.busy, ", ")));
                continue;
            }
            if (++tries[g.index] > 3) return failed(fmt::format("{} still does not match after 3 attempts: {}", label(g), mismatch(g, st.want, false)));
            auto r = apply_step(g, st, false);
            if (!r) return failed(r.error().message);
            if (*r != Applied::done) {
                const bool reboot = *r == Applied::needs_reboot;
                needs_reset.push_back(fmt::format(
                    "{}: the MIG mode change is pending a GPU reset ({})", label(g),
                    reboot ? "the driver says only a reboot applies it (a GPU passed through to a VM, or a driver that "
                             "cannot reset it)"
                           : "the GPU was in use when the mode was set"));
                continue;
            }
            changed.insert(g.index);
            progressed = true;
        }
        if (!needs_reset.empty()) {  // the other GPUs were changed first
            const std::string why = fmt::format("{}", fmt::join(needs_reset, "; "));
            if (!o.with_reboot) return failed(why + "; reboot the node, or run the MIG manager with --with-reboot (WITH_REBOOT=true)");
            log::warn("mig-manager: {}: rebooting the node", why);
            hooks.set_state("rebooting");
            hooks.event("Warning", kReasonRebooting, why + ": rebooting the node");
            const std::string not_rebooted = hooks.reboot ? hooks.reboot() : std::string("no way to reboot");
            if (not_rebooted.empty()) return Outcome::rebooting;  // the paused file goes with /run
            return failed(why + "; the reboot did not start: " + not_rebooted);
        }
        if (progressed) continue;  // read the node again: the next round checks what was done
        const std::string who = hooks.pods_on ? hooks.pods_on(busy) : std::string();
        if (std::chrono::steady_clock::now() >= deadline)
            return failed(fmt::format("still in use after {}: {}{}{}; stop them and set the label again", seconds_of(o.process_timeout),
                                      fmt::join(busy_why, "; "), who.empty() ? "" : "; pods: ", who));
        const std::string waiting = fmt::format("MIG config '{}' waits for {} to be free (up to {}){}{}", selected,
                                                fmt::join(busy_why, "; "), seconds_of(o.process_timeout),
                                                who.empty() ? "" : "; pods: ", who);
        if (waiting != waiting_said) {
            log::info("mig-manager: {}", waiting);
            hooks.event("Normal", kReasonWaiting, waiting);
            waiting_said = waiting;
        }
        const auto wake = std::chrono::steady_clock::now() + o.poll;
        while (std::chrono::steady_clock::now() < wake) {
            if (hooks.interrupted && hooks.interrupted()) {
                pause.clear();
                return Outcome::interrupted;
            }
            std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(o.poll, std::chrono::milliseconds(100)));
        }
    }
}

}  // namespace kgpu::mig
