// `kgpu demo --mps` (walk.h): two pods share one GPU through MPS.
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

// ---- --mps: two pods share one GPU through MPS ---------------------------------------------------

// The MPS daemon before the plugin (as the DaemonSets start on an MPS node): the stand-in control
// binary next to the simulator, NVIDIA's README MPS config with 4 replicas, the MPS root in the
// work dir.
std::optional<Failure> Demo::start_mps() {
    mps_control_ = sim_.parent_path() / "nvidia-cuda-mps-control";
    std::error_code ec;
    if (!fs::is_regular_file(mps_control_, ec))
        return Failure{2,
                       fmt::format("--mps needs the simulator's stand-in nvidia-cuda-mps-control next to {} (tried {})",
                                   sim_.string(), mps_control_.string()),
                       {}};
    mps_root_ = work_ / "mps";
    mps_config_ = work_ / "mps-config.yaml";
    const std::string cfg = fmt::format(
        "# NVIDIA's README \"With CUDA MPS\" config, with {} replicas\nversion: v1\nsharing:\n  mps:\n    resources:\n"
        "    - name: nvidia.com/gpu\n      replicas: {}\n",
        kMpsReplicas, kMpsReplicas);
    if (auto st = files::write_atomic(mps_config_, cfg); !st) return Failure{1, st.error().message, {}};
    auto d = child("mps-control-daemon", {"mps-control-daemon", "--log-level", "info", "--nvml-library", sim_.string(),
                                          "--config-file", mps_config_.string(), "--mps-root", mps_root_.string(),
                                          "--mps-control-binary", mps_control_.string()});
    auto c = Child::spawn(d);
    if (!c) return Failure{1, "starting kgpu mps-control-daemon: " + c.error().message, {}};
    mps_daemon_ = std::move(*c);
    say("  kgpu mps-control-daemon: pid {} (sharing.mps, {} replicas per GPU; --mps-root {}), log {}", mps_daemon_.pid(),
        kMpsReplicas, mps_root_.string(), mps_daemon_.log_path());
    say("    its control binary: the simulator's stand-in {}", mps_control_.string());
    return std::nullopt;
}

std::optional<Failure> Demo::step_mps_register() {
    say("");
    say("[1/{}] The MPS daemon sets the limits; the device plugin registers {} replicas per GPU", kMpsSteps, kMpsReplicas);
    const fs::path started = mps_root_ / kResource / ".started";
    auto end = Clock::now() + opts_.step_timeout;
    while (!fs::exists(started)) {
        if (auto f = interrupted_failure()) return f;
        if (auto code = mps_daemon_.poll())
            return step_failure(fmt::format("kgpu mps-control-daemon exited with {}", *code), mps_daemon_.log_path());
        if (Clock::now() > end)
            return step_failure(fmt::format("no {} within {} s", started.string(), opts_.step_timeout.count()),
                                mps_daemon_.log_path());
        std::this_thread::sleep_for(50ms);
    }
    const fs::path control_log = mps_root_ / kResource / "log" / "control.log";
    say("  the daemon's commands, from {}:", control_log.string());
    // (The texts are named: a range-for does not extend the life of a temporary inside its range.)
    const std::string commands = read_or_empty(control_log);
    for (auto l : strings::split(commands, '\n'))
        if (!l.empty()) say("    | {}", l);
    size_t exclusive = 0;
    const std::string events = read_or_empty(events_);
    for (auto l : strings::split(events, '\n'))
        if (l.starts_with("computemode ") && l.ends_with(" 3")) ++exclusive;
    say("  and every GPU to compute mode EXCLUSIVE_PROCESS through NVML ({} `computemode <gpu> 3` lines in the", exclusive);
    say("  simulator's events file: compute mode is the GPU's, every process sees it)");

    auto reg = kubelet_->wait_registered(kResource, opts_.step_timeout, cancel_fn());
    if (!reg) return step_failure(fmt::format("no Register for {} within {} s", kResource, opts_.step_timeout.count()),
                                  plugin_.log_path());
    reg_ = *reg;
    const size_t want = node_.gpus.size() * kMpsReplicas;
    auto list = kubelet_->wait_devices(
        kResource, [&](const DeviceList& l) { return l.devices.size() == want && l.healthy() == static_cast<int>(want); },
        opts_.step_timeout, cancel_fn());
    if (!list) {
        auto now = kubelet_->devices(kResource);
        return step_failure(fmt::format("ListAndWatch lists {} devices ({} Healthy); expected {} Healthy", now.devices.size(),
                                        now.healthy(), want),
                            plugin_.log_path());
    }
    say("  ListAndWatch (update #{}): {} devices, Healthy once the plugin's `get_default_active_thread_percentage`", list->update,
        list->devices.size());
    say("  to the daemon was answered:");
    for (size_t i = 0; i < list->devices.size() && i < kMpsReplicas + 1; ++i)
        say("    {}  {}", list->devices[i].id, list->devices[i].health);
    say("    … ({} more)", list->devices.size() - std::min<size_t>(list->devices.size(), kMpsReplicas + 1));
    say("  => node status: capacity nvidia.com/gpu: {}, allocatable nvidia.com/gpu: {}", list->devices.size(), list->healthy());
    return std::nullopt;
}

std::optional<Failure> Demo::step_mps_share() {
    say("");
    say("[2/{}] Two pods share one GPU through MPS, each within its limits", kMpsSteps);
    const auto list = kubelet_->devices(kResource);
    if (list.devices.empty()) return step_failure("no devices listed", plugin_.log_path());
    const std::string first = list.devices.front().id;
    mps_uuid_ = first.substr(0, first.find("::"));
    const SimGpu* gpu = node_.by_id(mps_uuid_);
    const char* pods[] = {"mps-a", "mps-b"};
    for (unsigned k = 0; k < 2; ++k) {
        const std::string id = fmt::format("{}::{}", mps_uuid_, k);
        auto resp = kubelet_->allocate(kResource, {id});
        if (!resp) return step_failure(resp.error().message, plugin_.log_path());
        std::map<std::string, std::string> envs(resp->envs().begin(), resp->envs().end());
        say("  pod {}/{} (nvidia.com/gpu: 1) -> Allocate({}):", kNamespace, pods[k], id);
        for (const auto& [key, v] : envs) say("    env {}={}", key, v);
        for (const auto& m : resp->mounts()) say("    mount {} -> {}", m.host_path(), m.container_path());
        auto pipe = envs.find("CUDA_MPS_PIPE_DIRECTORY");
        if (pipe == envs.end() || pipe->second != "/mps/nvidia.com/gpu/pipe")
            return step_failure("Allocate answered without CUDA_MPS_PIPE_DIRECTORY=/mps/nvidia.com/gpu/pipe", plugin_.log_path());
        mps_pod_ids_.push_back(id);
        kubelet_->add_pod({kNamespace, pods[k], "main", kResource, {id}});
    }
    // What a CUDA process in either pod gets from the daemon, asked as it would (same pipe directory).
    process::RunOptions ask;
    ask.argv = {mps_control_.string()};
    ask.set_env = {{"CUDA_MPS_PIPE_DIRECTORY", (mps_root_ / kResource / "pipe").string()},
                   {"CUDA_MPS_LOG_DIRECTORY", (mps_root_ / kResource / "log").string()}};
    ask.stdin_text = fmt::format("get_default_active_thread_percentage\nget_default_device_pinned_mem_limit {}\n",
                                 gpu ? gpu->index : 0);
    auto answer = process::run(ask);
    if (!answer || answer->exit_code != 0)
        return step_failure(fmt::format("asking the MPS daemon for its limits failed: {}",
                                        answer ? answer->err : answer.error().message),
                            mps_daemon_.log_path());
    auto parts = strings::split(strings::trim(answer->out), '\n');
    say("  both run on GPU {} ({}), as clients of one MPS server: `echo get_default_active_thread_percentage |",
        gpu ? gpu->index : 0, short_uuid(mps_uuid_));
    say("  nvidia-cuda-mps-control` answers {} (% of the SMs each may use), the pinned-memory limit of each on that GPU",
        parts.empty() ? "?" : std::string(parts[0]));
    say("  is {} (its memory / {})", parts.size() > 1 ? std::string(parts[1]) : "?", kMpsReplicas);
    say("  => unlike time-slicing, the two pods run at once, each capped; unlike MIG, nothing is partitioned in hardware");
    return std::nullopt;
}

std::optional<Failure> Demo::step_mps_kill() {
    say("");
    say("[3/{}] The MPS daemon dies: its replicas turn Unhealthy, it is restarted, they come back", kMpsSteps);
    const fs::path pidfile = mps_root_ / kResource / "pipe" / "nvidia-cuda-mps-control.pid";
    const std::string pid_text(strings::trim(read_or_empty(pidfile)));
    const int pid = pid_text.empty() ? 0 : std::atoi(pid_text.c_str());
    if (pid <= 0) return step_failure(fmt::format("no daemon pid in {}", pidfile.string()), mps_daemon_.log_path());
    const auto t_kill = Clock::now();
    ::kill(pid, SIGKILL);
    say("  kill -9 {} (the stand-in nvidia-cuda-mps-control daemon, from {})", pid, pidfile.string());
    auto bad = kubelet_->wait_devices(kResource, [](const DeviceList& l) { return l.healthy() == 0; }, opts_.step_timeout,
                                      cancel_fn());
    if (!bad) return step_failure("the replicas did not turn Unhealthy", plugin_.log_path());
    say("  ListAndWatch (update #{}, {} ms after the kill): all {} replicas Unhealthy, allocatable 0 (NVIDIA's plugin",
        bad->update, millis(bad->when - t_kill), bad->devices.size());
    say("  would keep advertising them Healthy)");
    const int total = static_cast<int>(bad->devices.size());
    auto good = kubelet_->wait_devices(kResource, [&](const DeviceList& l) { return l.healthy() == total; },
                                       opts_.step_timeout, cancel_fn());
    if (!good) return step_failure("the replicas did not come back", mps_daemon_.log_path());
    say("  ListAndWatch (update #{}, {} ms after the kill): Healthy again: kgpu mps-control-daemon saw its daemon die",
        good->update, millis(good->when - t_kill));
    say("  (it is the daemon's subreaper), started it again after its backoff and set the limits again");
    const std::string daemon_log = read_or_empty(mps_daemon_.log_path());
    for (auto l : strings::split(daemon_log, '\n'))
        if (l.find("control daemon down") != std::string_view::npos || l.find("retrying") != std::string_view::npos ||
            l.find("control daemon running") != std::string_view::npos)
            say("    | {}", l);
    return std::nullopt;
}

std::optional<Failure> Demo::step_mps_metrics() {
    say("");
    say("[4/{}] The exporter shows the MPS limits, the daemon's state and both pods", kMpsSteps);
    if (auto f = wait_exporter()) return f;
    auto end = Clock::now() + opts_.step_timeout;
    std::vector<std::string> mps_lines, pod_lines;
    std::string body;
    while (true) {
        auto r = http_get(exporter_host_, exporter_port_, "/metrics", 5s);
        if (r && r->status == 200) {
            body = std::move(r->body);
            mps_lines.clear();
            pod_lines.clear();
            bool restarted = false;
            for (auto l : strings::split(body, '\n')) {
                if (l.starts_with("kgpu_mps_")) mps_lines.emplace_back(l);
                if (l.starts_with("kgpu_mps_daemon_restarts_total{") && l.ends_with(" 1")) restarted = true;
                if (l.starts_with("DCGM_FI_DEV_GPU_UTIL{") && l.find("pod=\"mps-") != std::string_view::npos)
                    pod_lines.emplace_back(l);
            }
            if (restarted && pod_lines.size() == 2) break;
        }
        if (auto f = interrupted_failure()) return f;
        if (Clock::now() > end) {
            (void)files::write_atomic(logs_ / "metrics.txt", body);
            return step_failure(fmt::format("no scrape showed kgpu_mps_daemon_restarts_total 1 and both MPS pods within {} s",
                                            opts_.step_timeout.count()),
                                exporter_.log_path());
        }
        std::this_thread::sleep_for(250ms);
    }
    (void)files::write_atomic(logs_ / "metrics.txt", body);
    for (const auto& l : mps_lines)
        if (!l.starts_with("kgpu_mps_pinned_memory_limit_bytes") || l.find("\"" + mps_uuid_ + "\"") != std::string::npos)
            say("    {}", l);
    say("    … (one kgpu_mps_pinned_memory_limit_bytes per GPU)");
    for (const auto& l : pod_lines) say("    {}", l);
    say("  => each pod on the shared GPU has its own series (vgpu = its replica), as for time-slicing");
    return std::nullopt;
}

}  // namespace kgpu::demo::detail
