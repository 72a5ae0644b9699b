// `kgpu demo`'s default walk (walk.h): register, allocate, an XID and its recovery, metrics with
// pod labels, doctor.
#include "demo/walk.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/process.h"
#include "deviceplugin/config.h"
#include "common/strings.h"
#include "demo/host.h"
#include "demo/http.h"
#include "demo/kubelet.h"
#include "demo/locate.h"
#include "demo/process.h"


namespace kgpu::demo::detail {

std::optional<Failure> Demo::step_register() {
    say("");
    say("[1/{}] The device plugin registers nvidia.com/gpu with the kubelet", kSteps);
    auto reg = kubelet_->wait_registered(kResource, opts_.step_timeout, cancel_fn());
    if (!reg) {
        if (auto code = plugin_.poll())
            return step_failure(fmt::format("kgpu device-plugin exited with {} before registering", *code), plugin_.log_path());
        return step_failure(fmt::format("no Register for {} on {} within {} s", kResource, kubelet_->kubelet_socket(),
                                        opts_.step_timeout.count()),
                            plugin_.log_path());
    }
    reg_ = *reg;
    say("  Register: resource {}, endpoint {}, API {}, {} ms after the plugin started", reg_.resource_name, reg_.endpoint,
        reg_.version, millis(reg_.when - plugin_started_));
    say("  GetDevicePluginOptions: get_preferred_allocation_available = {}", reg_.preferred_allocation);
    // The first list can race the first health probe: wait for every device to be listed Healthy.
    auto list = kubelet_->wait_devices(
        kResource, [&](const DeviceList& l) { return l.devices.size() == node_.gpus.size() && l.healthy() == static_cast<int>(l.devices.size()); },
        opts_.step_timeout, cancel_fn());
    if (!list) {
        auto now = kubelet_->devices(kResource);
        return step_failure(fmt::format("ListAndWatch lists {} devices ({} Healthy); the node has {} GPUs", now.devices.size(),
                                        now.healthy(), node_.gpus.size()),
                            plugin_.log_path());
    }
    say("  ListAndWatch (update #{}): {} devices", list->update, list->devices.size());
    for (const auto& d : list->devices) {
        const SimGpu* g = node_.by_id(d.id);
        std::string numa = d.numa.empty() ? "-" : std::to_string(d.numa.front());
        say("    {}  {:<8} NUMA {}   GPU {} {}", d.id, d.health, numa, g ? std::to_string(g->index) : "?", g ? g->name : "");
    }
    say("  => node status: capacity nvidia.com/gpu: {}, allocatable nvidia.com/gpu: {}", list->devices.size(), list->healthy());
    return std::nullopt;
}

std::optional<Failure> Demo::step_allocate() {
    say("");
    say("[2/{}] A pod asks for {} GPUs: GetPreferredAllocation, then Allocate", kSteps, kPodGpus);
    say("  pod {}/{}, container {}: resources.limits nvidia.com/gpu: {}", kNamespace, kPod, kContainer, kPodGpus);
    auto list = kubelet_->devices(kResource);
    std::vector<std::string> available;
    for (const auto& d : list.devices)
        if (d.health == "Healthy") available.push_back(d.id);
    std::vector<std::string> ids;
    if (reg_.preferred_allocation) {
        auto pref = kubelet_->prefer(kResource, available, kPodGpus);
        if (!pref) return step_failure(pref.error().message, plugin_.log_path());
        ids = *pref;
        say("  GetPreferredAllocation(available: {} devices, size {}) -> {}", available.size(), kPodGpus, fmt::join(ids, ", "));
    } else {
        if (available.size() < static_cast<size_t>(kPodGpus))
            return step_failure(fmt::format("{} Healthy devices listed, the pod needs {}", available.size(), kPodGpus),
                                plugin_.log_path());
        ids.assign(available.begin(), available.begin() + kPodGpus);  // what the kubelet does without it
        say("  the plugin offers no preferred allocation: the kubelet takes the first {}", kPodGpus);
    }
    if (ids.size() != static_cast<size_t>(kPodGpus))
        return step_failure(fmt::format("preferred allocation returned {} devices for a request of {}", ids.size(), kPodGpus),
                            plugin_.log_path());
    const SimGpu* a = node_.by_id(ids[0]);
    const SimGpu* b = node_.by_id(ids[1]);
    if (!a || !b) return step_failure(fmt::format("preferred allocation returned unknown IDs {}", fmt::join(ids, ", ")));
    const std::string conn = node_.connection(a->index, b->index);
    bool node_has_nvlink = false;
    for (size_t i = 0; i < node_.gpus.size(); ++i)
        for (size_t j = i + 1; j < node_.gpus.size(); ++j)
            node_has_nvlink |= SimNode::is_nvlink(node_.connection(static_cast<int>(i), static_cast<int>(j)));
    say("  topology (nvidia-smi topo -m): GPU {} <-> GPU {} = {}{}", a->index, b->index, conn,
        SimNode::is_nvlink(conn) ? fmt::format(" ({} bonded NVLinks): an NVLink pair", conn.substr(2)) : "");
    if (node_has_nvlink && !SimNode::is_nvlink(conn))
        return step_failure(fmt::format("the node has NVLink pairs but the preferred allocation is GPU {} + GPU {} ({})",
                                        a->index, b->index, conn),
                            plugin_.log_path());
    if (!node_has_nvlink) say("  (this node has no NVLink: the pair is the closest on PCIe)");

    auto resp = kubelet_->allocate(kResource, ids);
    if (!resp) return step_failure(resp.error().message, plugin_.log_path());
    say("  Allocate({}) -> the container's spec:", fmt::join(ids, ", "));
    std::map<std::string, std::string> envs(resp->envs().begin(), resp->envs().end());
    for (const auto& [k, v] : envs) say("    env {}={}", k, v);
    for (const auto& m : resp->mounts()) say("    mount {} -> {}{}", m.host_path(), m.container_path(), m.read_only() ? " (ro)" : "");
    for (const auto& d : resp->devices()) say("    device {} ({})", d.host_path(), d.permissions());
    for (const auto& [k, v] : resp->annotations()) say("    annotation {}={}", k, v);
    auto vis = envs.find("NVIDIA_VISIBLE_DEVICES");
    if (vis == envs.end())
        return step_failure("Allocate answered without NVIDIA_VISIBLE_DEVICES (default device-list strategy envvar)",
                            plugin_.log_path());
    for (const auto& id : ids)
        if (vis->second.find(id) == std::string::npos)
            return step_failure(fmt::format("NVIDIA_VISIBLE_DEVICES={} does not name {}", vis->second, id));
    pod_ids_ = ids;
    kubelet_->add_pod({kNamespace, kPod, kContainer, kResource, ids});
    // The pod's job starts working: the simulator shows it as utilisation on its two GPUs.
    if (auto st = append_event(fmt::format("util {} 87 41", a->index)); !st) return step_failure(st.error().message);
    if (auto st = append_event(fmt::format("util {} 92 44", b->index)); !st) return step_failure(st.error().message);
    say("  => the container runtime sees NVIDIA_VISIBLE_DEVICES and mounts exactly GPU {} and GPU {}; PodResources now "
        "lists {}/{} with them", a->index, b->index, kNamespace, kPod);
    say("     (its job starts: `util {} 87 41` and `util {} 92 44` appended to the simulator's events file)", a->index,
        b->index);
    return std::nullopt;
}

std::optional<Failure> Demo::step_xid() {
    say("");
    say("[3/{}] An XID makes a GPU Unhealthy; it recovers", kSteps);
    // The highest-index GPU the pod does not hold.
    const SimGpu* target = nullptr;
    for (auto it = node_.gpus.rbegin(); it != node_.gpus.rend() && !target; ++it)
        if (std::find(pod_ids_.begin(), pod_ids_.end(), it->uuid) == pod_ids_.end() &&
            std::find(pod_ids_.begin(), pod_ids_.end(), std::to_string(it->index)) == pod_ids_.end())
            target = &*it;
    if (!target) return step_failure("no GPU outside the pod to fault");
    const std::string id = target->uuid;
    faulted_uuid_ = id;
    const size_t log_offset = read_or_empty(plugin_.log_path()).size();
    const int total = static_cast<int>(node_.gpus.size());
    // NVML hands an event only to the processes registered for it when it happens: the exporter
    // must be up before the XID, or step 4 would show no XID (issue #23).
    if (auto f = wait_exporter()) return f;

    auto t_xid = Clock::now();
    if (auto st = append_event(fmt::format("xid {} {}", target->index, kXid)); !st) return step_failure(st.error().message);
    {
        std::ofstream k(host_.kernel_log(), std::ios::app);
        k << kernel_xid_line(*target, kXid) << '\n';
    }
    say("  `xid {} {}` appended to the simulator's events file (the driver reports XID {} on GPU {}, {});", target->index,
        kXid, kXid, target->index, short_uuid(id));
    say("  the kernel log line a real driver writes: {}", kernel_xid_line(*target, kXid));
    auto bad = kubelet_->wait_devices(
        kResource,
        [&](const DeviceList& l) {
            return std::any_of(l.devices.begin(), l.devices.end(), [&](const DeviceState& d) { return d.id == id && d.health == "Unhealthy"; });
        },
        opts_.step_timeout, cancel_fn());
    if (!bad)
        return step_failure(fmt::format("{} not Unhealthy in ListAndWatch within {} s of XID {}", id, opts_.step_timeout.count(), kXid),
                            plugin_.log_path());
    say("  ListAndWatch (update #{}, {} ms after the XID): {} Unhealthy", bad->update, millis(bad->when - t_xid), id);
    say("  => allocatable nvidia.com/gpu: {} (capacity {}): the scheduler places no new pod on GPU {}", bad->healthy(), total,
        target->index);
    if (bad->healthy() != total - 1)
        return step_failure(fmt::format("expected allocatable {} after one Unhealthy GPU, got {}", total - 1, bad->healthy()));

    auto good = kubelet_->wait_devices(
        kResource, [&](const DeviceList& l) { return l.healthy() == total; }, opts_.recovery_period + opts_.step_timeout,
        cancel_fn());
    if (!good)
        return step_failure(fmt::format("{} did not recover within {} s (XID {} is recoverable; --health-recovery-period {}s)", id,
                                        (opts_.recovery_period + opts_.step_timeout).count(), kXid, opts_.recovery_period.count()),
                            plugin_.log_path());
    say("  ListAndWatch (update #{}, {:.1f} s after the XID): {} Healthy again (XID {} is recoverable: no new XID and clean",
        good->update, seconds(good->when - t_xid), id, kXid);
    say("    probes for --health-recovery-period {}s; NVIDIA's plugin would keep it Unhealthy until restarted)",
        opts_.recovery_period.count());
    std::string log = read_or_empty(plugin_.log_path());
    std::vector<std::string> lines;
    for (auto l : strings::split(std::string_view(log).substr(std::min(log_offset, log.size())), '\n'))
        if (l.find(id) != std::string_view::npos || l.find("GPU " + std::to_string(target->index)) != std::string_view::npos)
            lines.emplace_back(l);
    if (!lines.empty()) {
        say("  the device plugin's log:");
        for (size_t i = 0; i < lines.size() && i < 4; ++i) say("    | {}", lines[i]);
    }
    say("  => allocatable nvidia.com/gpu: {}", good->healthy());
    return std::nullopt;
}

// Reads the exporter's address from its --ready-file, which it writes once serving, after its
// GPUs are registered for XID events (so an XID appended afterwards reaches it).
std::optional<Failure> Demo::wait_exporter() {
    if (exporter_port_ != 0) return std::nullopt;
    const fs::path ready = work_ / "exporter.ready";
    auto end = Clock::now() + opts_.step_timeout;
    while (exporter_port_ == 0) {
        auto where = parse_ready_address(read_or_empty(ready));
        if (!where) return step_failure(fmt::format("{}: {}", ready.string(), where.error().message), exporter_.log_path());
        if (*where) {
            exporter_host_ = (*where)->host;
            exporter_port_ = (*where)->port;
            break;
        }
        if (auto f = interrupted_failure()) return f;
        if (auto code = exporter_.poll())
            return step_failure(fmt::format("kgpu exporter exited with {} before listening", *code), exporter_.log_path());
        if (Clock::now() > end)
            return step_failure(fmt::format("kgpu exporter did not write its --ready-file {} within {} s", ready.string(),
                                            opts_.step_timeout.count()),
                                exporter_.log_path());
        std::this_thread::sleep_for(50ms);
    }
    say("  kgpu exporter listens on {}:{} (from its --ready-file; it watches XID events from then on)", exporter_host_,
        exporter_port_);
    return std::nullopt;
}

namespace {

// What step 4 looks for in one scrape: the GPU_UTIL lines, those with the demo pod's labels, and
// the XID line step 3 caused on the faulted GPU.
struct MetricsView {
    std::vector<std::string> util_lines, pod_lines;
    std::string xid_line;
};

MetricsView read_metrics(std::string_view body, const std::vector<std::string>& pod_labels,
                         const std::string& faulted_uuid, const std::string& xid_code) {
    MetricsView v;
    for (auto l : strings::split(body, '\n')) {
        if (l.starts_with("DCGM_FI_DEV_XID_ERRORS{") && !faulted_uuid.empty() &&
            l.find("\"" + faulted_uuid + "\"") != std::string_view::npos && l.find(xid_code) != std::string_view::npos)
            v.xid_line = l;
        if (!l.starts_with("DCGM_FI_DEV_GPU_UTIL{")) continue;
        v.util_lines.emplace_back(l);
        if (std::all_of(pod_labels.begin(), pod_labels.end(),
                        [&](const std::string& lab) { return l.find(lab) != std::string_view::npos; }))
            v.pod_lines.emplace_back(l);
    }
    return v;
}

}  // namespace

std::optional<Failure> Demo::step_metrics() {
    say("");
    say("[4/{}] The exporter's metrics carry the pod's labels", kSteps);
    if (auto f = wait_exporter()) return f;
    auto end = Clock::now() + opts_.step_timeout;

    // Wait until a scrape shows GPU_UTIL for each of the pod's GPUs with the pod's labels.
    const std::vector<std::string> pod_labels = {fmt::format("pod=\"{}\"", kPod),
                                                 fmt::format("namespace=\"{}\"", kNamespace),
                                                 fmt::format("container=\"{}\"", kContainer)};
    const std::string xid_code = fmt::format("err_code=\"{}\"", kXid);
    std::string body, last_error;
    MetricsView view;
    int scrapes = 0;
    auto t_scrape = Clock::now();
    while (true) {
        auto r = http_get(exporter_host_, exporter_port_, "/metrics", 5s);
        ++scrapes;
        if (r && r->status == 200) {
            body = std::move(r->body);
            view = read_metrics(body, pod_labels, faulted_uuid_, xid_code);
            bool every_gpu = std::all_of(pod_ids_.begin(), pod_ids_.end(), [&](const std::string& id) {
                const SimGpu* g = node_.by_id(id);
                return std::any_of(view.pod_lines.begin(), view.pod_lines.end(), [&](const std::string& l) {
                    return g && l.find("\"" + g->uuid + "\"") != std::string::npos;
                });
            });
            const bool xid_seen = faulted_uuid_.empty() || !view.xid_line.empty();
            if (every_gpu && xid_seen) break;
            last_error = fmt::format("{} DCGM_FI_DEV_GPU_UTIL lines, {} with the pod's labels{}", view.util_lines.size(),
                                     view.pod_lines.size(),
                                     xid_seen ? "" : fmt::format("; no DCGM_FI_DEV_XID_ERRORS line for {} with {}",
                                                                 faulted_uuid_, xid_code));
        } else {
            last_error = r ? fmt::format("HTTP {}", r->status) : r.error().message;
        }
        if (auto f = interrupted_failure()) return f;
        if (auto code = exporter_.poll())
            return step_failure(fmt::format("kgpu exporter exited with {}", *code), exporter_.log_path());
        if (Clock::now() > end) {
            (void)files::write_atomic(logs_ / "metrics.txt", body);
            return step_failure(fmt::format("no scrape of http://{}:{}/metrics showed DCGM_FI_DEV_GPU_UTIL with {} {} {} "
                                            "for the pod's GPUs and step 3's XID {} within {} s (last: {})",
                                            exporter_host_, exporter_port_, pod_labels[0], pod_labels[1], pod_labels[2],
                                            kXid, opts_.step_timeout.count(), last_error),
                                exporter_.log_path());
        }
        std::this_thread::sleep_for(250ms);
    }
    (void)files::write_atomic(logs_ / "metrics.txt", body);
    size_t families = 0;
    for (auto l : strings::split(body, '\n'))
        if (l.starts_with("# TYPE ")) ++families;
    say("  GET http://{}:{}/metrics (scrape {}, {} ms after the first): {} bytes, {} metric families", exporter_host_,
        exporter_port_, scrapes, millis(Clock::now() - t_scrape), body.size(), families);
    for (auto l : strings::split(body, '\n'))
        if (l.starts_with("# HELP DCGM_FI_DEV_GPU_UTIL") || l.starts_with("# TYPE DCGM_FI_DEV_GPU_UTIL")) say("    {}", l);
    for (const auto& l : view.pod_lines) say("    {}", l);
    for (const auto& l : view.util_lines)
        if (std::find(view.pod_lines.begin(), view.pod_lines.end(), l) == view.pod_lines.end()) {
            say("    {}", l);
            say("    … ({} more GPU_UTIL lines without a pod: GPUs no pod holds)",
                view.util_lines.size() - view.pod_lines.size() - 1);
            break;
        }
    if (!view.xid_line.empty()) {
        say("  and step 3's XID, as dcgm-exporter reports the last one:");
        say("    {}", view.xid_line);
    }
    say("  => the pod's GPUs are labelled pod/namespace/container from the kubelet's PodResources List, like dcgm-exporter");
    say("     with --kubernetes");
    return std::nullopt;
}

std::optional<Failure> Demo::step_doctor() {
    say("");
    say("[5/{}] kgpu doctor on the simulated node", kSteps);
    auto spawn = child("doctor", {"doctor", "--json", "--root", host_.root.string(), "--nvml-library", sim_.string()});
    spawn.stdout_path = (logs_ / "doctor.json").string();
    say("  kgpu doctor --root {} --nvml-library {}", host_.root.string(), sim_.string());
    auto rc = run_to_completion(spawn, std::chrono::duration_cast<std::chrono::milliseconds>(opts_.step_timeout), cancel_fn());
    if (!rc) return step_failure("kgpu doctor: " + rc.error().message, spawn.log_path);
    auto j = nlohmann::json::parse(read_or_empty(spawn.stdout_path), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("checks") || !j["checks"].is_array() || !j.contains("summary") ||
        !j["summary"].is_object())
        return step_failure(fmt::format("kgpu doctor exited {} without a JSON report (an object with a \"checks\" array "
                                        "and a \"summary\" object)",
                                        *rc),
                            spawn.log_path);
    // Grouped by layer like doctor's own text report; evidence for the links the demo exercised
    // (device plugin, kubelet, the XID it injected) and for anything not ok.
    for (const char* layer : {"hardware", "driver", "runtime", "device plugin", "kubelet", "workload"}) {
        bool header = false;
        for (const auto& c : j["checks"]) {
            if (!c.is_object() || c.value("layer", "") != layer) continue;
            if (!header) say("  {}", layer);
            header = true;
            const std::string status = c.value("status", "?");
            const std::string tag = status == "ok" ? "[ OK ]" : status == "warn" ? "[WARN]" : status == "fail" ? "[FAIL]" : "[SKIP]";
            say("    {} {:<28} {}", tag, c.value("id", ""), c.value("title", ""));
            const std::string l = layer, evidence = c.value("evidence", ""), fix = c.value("fix", "");
            if (status == "warn" || status == "fail" || l == "device plugin" || l == "kubelet" || c.value("id", "") == "kernel.xid") {
                for (auto e : strings::split(evidence, '\n'))
                    if (!e.empty()) say("           {}", e);
                if (!fix.empty() && status != "ok") say("           fix: {}", fix);
            }
        }
    }
    const auto& s = j["summary"];
    say("  doctor summary: {} ok, {} warn, {} fail, {} skipped (exit {})", s.value("ok", 0), s.value("warn", 0),
        s.value("fail", 0), s.value("skipped", 0), *rc);
    if (s.value("fail", 0) != 0 || *rc != 0)
        return step_failure(fmt::format("kgpu doctor found {} failing check(s) on the simulated node", s.value("fail", 0)),
                            spawn.log_path);
    return std::nullopt;
}

}  // namespace kgpu::demo::detail
