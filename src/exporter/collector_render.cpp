// The exposition a collection pass renders (Collector::Impl, collector_impl.h).
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

auto Collector::Impl::gpu_at(unsigned index) const -> const Gpu* {
    for (const auto& g : gpus)
        if (g.info.index == index) return &g;
    return nullptr;
}

std::string Collector::Impl::render(Pass& p) {
    Out out(options.counters);
    render_devices(out, p);
    render_gpu_state(out, p);
    render_processes(out, p);
    render_mps(out);
    for (const auto& [function, n] : nvml_errors) {
        LabelSet l;
        l.add("function", function);
        out.add(Metric::nvml_errors_total, l, double(n));
    }
    render_kube_api(out);
    render_self(out, p);
    return out.ex.render();
}

void Collector::Impl::render_devices(Out& out, Pass& p) {
    auto emit = [&](const MetricDef& m, LabelSet labels, DeviceKey key, double x) {
        if (m.id == Metric::xid_errors) {
            const unsigned code = static_cast<unsigned>(x);
            labels.add("err_code", fmt::format("{}", code)).add("err_msg", xid_error_message(code));
        }
        const auto it = p.pods.find(key);
        if (it == p.pods.end() || it->second.empty()) {
            out.add(m.id, labels, x);
            return;
        }
        const bool per_pod_value = options.kubernetes_virtual_gpus &&
                                   ((m.id == Metric::gpu_util && !key.second) || m.id == Metric::fb_used);
        if (per_pod_value) out.add(m.id, labels, x);  // the device's own series stays next to the pods'
        for (const auto& slot : it->second) {
            LabelSet l = labels;
            l.append(pod_label_set(slot, p.meta, labels.str()));
            double v = x;
            if (per_pod_value) {
                const auto& table = m.id == Metric::gpu_util ? p.pod_sm : p.pod_fb;
                auto q = table.find({key.first, key.second, slot.pod.namespace_name, slot.pod.pod});
                v = q == table.end() ? 0.0 : q->second;
            }
            out.add(m.id, l, v);
        }
    };
    for (std::size_t i = 0; i < gpus.size(); ++i) {
        const Gpu& g = gpus[i];
        if (g.lost) continue;
        Values& v = p.gpu_values[i];
        const auto it = p.xids.find(xid_key(g.info));
        v[static_cast<std::size_t>(Metric::xid_errors)] = it == p.xids.end() ? 0.0 : double(it->second.last);
        for (const auto& m : catalogue()) {
            if (m.scope != Scope::gpu && !(m.scope == Scope::instance && !g.mig_enabled)) continue;
            const auto& x = v[static_cast<std::size_t>(m.id)];
            if (x) emit(m, g.dcgm, {g.info.index, std::nullopt}, *x);
        }
        if (!g.mig_enabled) continue;
        for (std::size_t j = 0; j < g.migs.size() && j < p.mig_values[i].size(); ++j) {
            for (const auto& m : catalogue()) {
                if (m.scope != Scope::instance) continue;
                const auto& x = p.mig_values[i][j][static_cast<std::size_t>(m.id)];
                if (x) emit(m, g.migs[j].labels, {g.info.index, g.migs[j].info.gpu_instance_id}, *x);
            }
        }
    }
}

void Collector::Impl::render_gpu_state(Out& out, const Pass& p) {
    for (std::size_t i = 0; i < gpus.size(); ++i) {
        const Gpu& g = gpus[i];
        for (std::string_view s : {"ok", "error", "lost"}) {
            LabelSet l = g.kgpu;
            l.add("state", s);
            out.add(Metric::gpu_health, l, p.state[i] == s ? 1.0 : 0.0);
        }
        const auto it = p.xids.find(xid_key(g.info));
        const Xid x = it == p.xids.end() ? Xid{} : it->second;
        out.add(Metric::gpu_last_xid, g.kgpu, x.last);
        out.add(Metric::gpu_xid_events_total, g.kgpu, double(x.count));
        for (std::size_t c = 0; c < x.by_class.size(); ++c) {
            LabelSet l = g.kgpu;
            l.add("xid_class", kXidClasses[c]);
            out.add(Metric::gpu_xid_class_events_total, l, double(x.by_class[c]));
        }
    }
}

void Collector::Impl::render_processes(Out& out, Pass& p) {
    for (const auto& proc : p.procs) {
        const Gpu* g = gpu_at(proc.gpu);
        if (!g) continue;
        LabelSet l = g->kgpu;
        if (proc.gi_id) l.add("GPU_I_ID", fmt::format("{}", *proc.gi_id));
        l.add("pid", fmt::format("{}", proc.pid));
        if (const auto& n = p.names[proc.pid]; !n.empty()) l.add("process", n);
        if (auto it = p.proc_pods.find(proc.pid); it != p.proc_pods.end())
            l.add("pod", it->second.pod).add("namespace", it->second.namespace_name).add("container", it->second.container);
        out.add(Metric::process_fb_used_bytes, l, double(proc.bytes));
    }
    if (!processes) return;
    std::map<std::pair<unsigned, PodRef>, std::pair<double, double>> per_pod;
    for (const auto& g : gpus) {
        if (g.lost || g.mig_enabled || g.utilization_unsupported) continue;
        if (auto it = p.all_pods.find({g.info.index, std::nullopt}); it != p.all_pods.end())
            for (const auto& s : it->second) per_pod[{g.info.index, s.pod}];
    }
    for (const auto& s : p.shares) {
        auto it = p.proc_pods.find(s.pid);
        if (it == p.proc_pods.end()) continue;
        auto& [sm, mem] = per_pod[{s.gpu, it->second}];
        sm += s.sm;
        mem += s.memory;
    }
    for (const auto& [k, v] : per_pod) {
        const Gpu* g = gpu_at(k.first);
        if (!g) continue;
        LabelSet l = g->kgpu;
        l.add("pod", k.second.pod).add("namespace", k.second.namespace_name).add("container", k.second.container);
        out.add(Metric::pod_sm_util_ratio, l, v.first * def(Metric::pod_sm_util_ratio).scale);
        out.add(Metric::pod_mem_util_ratio, l, v.second * def(Metric::pod_mem_util_ratio).scale);
    }
}

void Collector::Impl::render_mps(Out& out) {
    if (options.mps_root.empty()) return;
    std::vector<std::string> problems;
    const auto statuses = mps::read_statuses(mps::Root{options.mps_root}, &problems);
    for (const auto& p : problems)
        if (mps_problems.first(p)) log::warn("exporter: MPS: {} (logged once; the file is left out)", p);
    for (const auto& st : statuses) {
        LabelSet l;
        l.add("resource", st.resource);
        out.add(Metric::mps_daemon_up, l, st.state == mps::DaemonState::running ? 1.0 : 0.0);
        out.add(Metric::mps_daemon_restarts_total, l, double(st.restarts));
        out.add(Metric::mps_active_thread_percentage, l, double(st.active_thread_percentage));
        for (const auto& lim : st.pinned_limits) {
            LabelSet g = l;
            g.add("gpu", fmt::format("{}", lim.index)).add("UUID", lim.uuid);
            out.add(Metric::mps_pinned_memory_limit_bytes, g, double(lim.mib << 20));
        }
    }
}

void Collector::Impl::render_kube_api(Out& out) {
    if (options.kube_api_status_dir.empty()) return;
    std::vector<std::string> problems;
    for (const auto& st : read_kube_api_statuses(options.kube_api_status_dir, &problems)) {
        LabelSet c;
        c.add("component", st.component);
        for (const auto& q : st.requests) {
            LabelSet l = c;
            l.add("method", q.method).add("code", q.code);
            out.add(Metric::kube_api_requests_total, l, q.count);
        }
        for (const auto& [kind, n] : st.errors) {
            LabelSet l = c;
            l.add("kind", kind);
            out.add(Metric::kube_api_errors_total, l, n);
        }
        if (st.last_success) out.add(Metric::kube_api_last_success_timestamp_seconds, c, *st.last_success);
        for (const auto& [result, n] : st.events) {
            LabelSet l = c;
            l.add("result", result);
            out.add(Metric::node_events_total, l, n);
        }
    }
    for (const auto& p : problems)
        if (status_problems.first(p)) log::warn("exporter: kube API status: {} (logged once; the file is left out)", p);
}

void Collector::Impl::render_self(Out& out, const Pass& p) {
    if (p.podres_up) {
        out.add(Metric::pod_attribution_up, LabelSet{}, *p.podres_up ? 1.0 : 0.0);
        for (const auto& g : gpus) {
            if (!*p.podres_up) break;  // unknown while the kubelet does not answer
            auto it = p.pods_over_limit.find(g.info.index);
            out.add(Metric::pods_over_limit, g.kgpu, it == p.pods_over_limit.end() ? 0.0 : double(it->second));
        }
    }
    if (http_stats) {
        const HttpServerStats h = http_stats();
        out.add(Metric::http_connections, LabelSet{}, double(h.open));
        for (auto [reason, n] : {std::pair<std::string_view, std::uint64_t>{"evicted", h.evicted},
                                 {"peer_limit", h.peer_limit},
                                 {"timeout", h.timeout},
                                 {"oversize", h.oversize},
                                 {"malformed", h.malformed},
                                 {"tls", h.tls}}) {
            LabelSet l;
            l.add("reason", reason);
            out.add(Metric::http_connections_closed_total, l, double(n));
        }
    }
    out.add(Metric::collection_duration_seconds, LabelSet{}, std::chrono::duration<double>(p.t1 - p.t0).count());
    out.add(Metric::collections_total, LabelSet{}, double(passes));
    out.add(Metric::last_collection_timestamp_seconds, LabelSet{},
            std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
}
}  // namespace kgpu::exporter
