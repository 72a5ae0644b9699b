// The NVML reads of a collection pass (Collector::Impl, collector_impl.h).
#include "exporter/collector_impl.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "common/log.h"
#include "exporter/catalogue.h"
#include "exporter/exposition.h"
#include "mps/supervisor.h"
#include "nvml/brand.h"
#include "nvml/gpm.h"

namespace kgpu::exporter {

bool Collector::Impl::read_device(const nvml::Device& dev, const std::vector<Read>& reads, ReadSet& unsupported,
                                  Values& values, bool& had_error) {
    for (Read r : reads) {
        if (unsupported.test(static_cast<std::size_t>(r))) continue;
        auto v = read_source(r, dev);
        if (!v) {
            if (v.error().code == Code::not_supported) {
                unsupported.set(static_cast<std::size_t>(r));
                continue;
            }
            if (v.error().code == Code::gpu_lost) return false;
            if (count_error(nvml_function(r), v.error())) had_error = true;
            continue;
        }
        for (const auto& m : catalogue()) {
            if (m.read != r) continue;
            double x = (*v)[m.part] * m.scale;
            if (m.whole) x = std::floor(x);
            values[static_cast<std::size_t>(m.id)] = x;
        }
    }
    return true;
}

bool Collector::Impl::read_gpm(GpmState& st, std::string_view function,
                               const std::function<Status(nvml::GpmSample&)>& take, Values& values, bool& supported,
                               bool& had_error) {
    const auto now = Clock::now();
    if (st.prev && now - st.prev_at < kGpmMinGap) {
        // Too soon for a new rate (passes under 100 ms apart): keep the baseline and serve the
        // last rate again, so the series do not flap.
        for (std::size_t i = 0; i < st.last.size() && i < gpm_rows.size(); ++i)
            if (st.last[i]) values[static_cast<std::size_t>(gpm_rows[i]->id)] = *st.last[i];
        return true;
    }
    if (!st.spare) {
        auto s = nvml::GpmSample::alloc(session);
        if (!s) {
            if (s.error().code == Code::not_supported) supported = false;  // a driver without GPM buffers
            else {
                if (count_error("nvmlGpmSampleAlloc", s.error())) had_error = true;
            }
            return true;
        }
        st.spare.emplace(std::move(*s));
    }
    if (auto r = take(*st.spare); !r) {
        if (r.error().code == Code::gpu_lost) return false;
        if (r.error().code == Code::not_supported) supported = false;
        else {
            if (count_error(function, r.error())) had_error = true;
        }
        return true;
    }
    if (st.prev) {
        auto m = nvml::GpmSample::metrics(*st.prev, *st.spare, gpm_ids);
        if (!m) {
            if (count_error(nvml::kGpmMetricsGet, m.error())) had_error = true;
        } else {
            st.last.assign(gpm_rows.size(), std::nullopt);
            for (std::size_t i = 0; i < gpm_rows.size(); ++i)
                if ((*m)[i] && std::isfinite(*(*m)[i])) {
                    st.last[i] = *(*m)[i] * gpm_rows[i]->scale;
                    values[static_cast<std::size_t>(gpm_rows[i]->id)] = *st.last[i];
                }
        }
    }
    std::swap(st.prev, st.spare);  // this sample is the next baseline; the old one is reused
    st.prev_at = now;
    return true;
}

bool Collector::Impl::read_nvlink(Gpu& g, Values& values, bool& had_error) {
    if (g.unsupported.test(static_cast<std::size_t>(Read::nvlink_throughput))) return true;
    auto t = g.device->nvlink_throughput();
    const auto now = Clock::now();
    if (!t) {
        if (t.error().code == Code::gpu_lost) return false;
        if (t.error().code == Code::not_supported) g.unsupported.set(static_cast<std::size_t>(Read::nvlink_throughput));
        else {
            if (count_error(nvml_function(Read::nvlink_throughput), t.error())) had_error = true;
        }
        return true;
    }
    double value = 0;
    const std::uint64_t sum = t->tx_kib + t->rx_kib;
    if (g.nvlink_prev && sum != 0) {
        const std::uint64_t prev = g.nvlink_prev->tx_kib + g.nvlink_prev->rx_kib;
        const double secs = t->timestamp_us > 0 && g.nvlink_prev->timestamp_us > 0
                                ? static_cast<double>(t->timestamp_us - g.nvlink_prev->timestamp_us) / 1e6
                                : std::chrono::duration<double>(now - g.nvlink_prev_at).count();
        if (secs > 0 && sum >= prev) value = std::trunc(static_cast<double>(sum - prev) / secs / 1000.0);
    }
    values[static_cast<std::size_t>(Metric::nvlink_bandwidth_total)] = value;
    g.nvlink_prev = *t;
    g.nvlink_prev_at = now;
    return true;
}

void Collector::Impl::read_processes(const Gpu& g, const nvml::Device& dev, std::optional<unsigned> gi_id,
                                     std::vector<Process>& out, bool& unsupported, bool& had_error) {
    auto procs = dev.compute_processes();
    if (!procs) {
        if (procs.error().code == Code::not_supported) unsupported = true;
        else if (procs.error().code != Code::gpu_lost) {
            if (count_error("nvmlDeviceGetComputeRunningProcesses_v3", procs.error())) had_error = true;
        }
        return;
    }
    for (const auto& p : *procs) out.push_back(Process{g.info.index, gi_id, p.pid, p.used_bytes});
}

void Collector::Impl::read_shares(Gpu& g, std::vector<ProcessShare>& out, bool& had_error) {
    if (g.utilization_unsupported || g.mig_enabled) return;
    auto samples = g.device->process_utilization(g.utilization_seen_us);
    if (!samples) {
        if (samples.error().code == Code::not_supported) g.utilization_unsupported = true;
        else if (samples.error().code != Code::gpu_lost) {
            if (count_error("nvmlDeviceGetProcessUtilization", samples.error())) had_error = true;
        }
        return;
    }
    std::map<unsigned, std::tuple<double, double, int>> by_pid;  // sm sum, memory sum, count
    for (const auto& s : *samples) {
        auto& [sm, mem, n] = by_pid[s.pid];
        sm += s.sm;
        mem += s.memory;
        ++n;
        g.utilization_seen_us = std::max(g.utilization_seen_us, s.timestamp_us);
    }
    for (const auto& [pid, v] : by_pid) {
        const auto& [sm, mem, n] = v;
        out.push_back(ProcessShare{g.info.index, pid, sm / n, mem / n});
    }
}

void Collector::Impl::read_gpus(Pass& p) {
    p.gpu_values.resize(gpus.size());
    p.mig_values.resize(gpus.size());
    p.state.assign(gpus.size(), "ok");
    for (std::size_t i = 0; i < gpus.size(); ++i) {
        Gpu& g = gpus[i];
        bool had_error = false;
        if (!g.lost && !g.device) {
            auto d = session.device_by_index(g.info.index);
            if (d) g.device = std::move(*d);
            else if (d.error().code == Code::gpu_lost) g.lost = true;
            else {
                if (count_error("nvmlDeviceGetHandleByIndex", d.error())) had_error = true;
            }
        }
        if (!g.lost && g.device && !read_gpu(g, p.gpu_values[i], p.mig_values[i], p, had_error)) {
            log::warn("exporter: GPU {} ({}) is lost: it no longer answers NVML", g.info.index, g.info.uuid);
            g.lost = true;
            std::erase_if(p.procs, [&](const Process& x) { return x.gpu == g.info.index; });
            std::erase_if(p.shares, [&](const ProcessShare& x) { return x.gpu == g.info.index; });
        }
        p.state[i] = g.lost ? "lost" : had_error ? "error" : "ok";
    }
}

bool Collector::Impl::read_gpu(Gpu& g, Values& values, std::vector<Values>& mig_values, Pass& p, bool& had_error) {
    const auto& reads = g.mig_enabled ? parent_reads : gpu_reads;
    bool ok = read_device(*g.device, reads, g.unsupported, values, had_error);
    if (ok && want_nvlink) ok = read_nvlink(g, values, had_error);
    if (ok && g.mig_enabled) {
        mig_values.resize(g.migs.size());
        for (std::size_t j = 0; j < g.migs.size() && ok; ++j) {
            Mig& m = g.migs[j];
            if (m.device) ok = read_device(*m.device, instance_reads, g.mig_unsupported, mig_values[j], had_error);
            if (ok && g.gpm_supported) {
                const nvml::Device& parent = *g.device;
                const unsigned gi = m.info.gpu_instance_id;
                ok = read_gpm(
                    m.gpm, nvml::kGpmMigSampleGet, [&](nvml::GpmSample& s) { return parent.gpm_mig_sample(gi, s); },
                    mig_values[j], g.gpm_supported, had_error);
            }
        }
    } else if (ok && g.gpm_supported) {
        const nvml::Device& dev = *g.device;
        ok = read_gpm(
            g.gpm, nvml::kGpmSampleGet, [&](nvml::GpmSample& s) { return dev.gpm_sample(s); }, values,
            g.gpm_supported, had_error);
    }
    if (ok && !g.processes_unsupported) {
        if (g.mig_enabled) {
            for (const auto& m : g.migs)
                if (m.device)
                    read_processes(g, *m.device, m.info.gpu_instance_id, p.procs, g.processes_unsupported, had_error);
        } else {
            read_processes(g, *g.device, std::nullopt, p.procs, g.processes_unsupported, had_error);
        }
    }
    if (ok && want_shares) read_shares(g, p.shares, had_error);
    return ok;
}
}  // namespace kgpu::exporter
