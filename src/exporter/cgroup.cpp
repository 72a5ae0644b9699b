// parse_cgroup (attribution.h): pod UID and container ID from the text of /proc/<pid>/cgroup.
//
// Shapes (facts/cri-and-process-attribution.md), for cgroup v1 lines "<id>:<controllers>:<path>"
// and the v2 line "0::<path>":
//   cgroupfs driver: .../kubepods[/<qos>]/pod<uid>/<64-hex id>      (CRI-O: crio-<id>)
//   systemd driver:  .../kubepods-<qos>-pod<uid with _>.slice/cri-containerd-<id>.scope
//                    (crio-<id>.scope, docker-<id>.scope; guaranteed pods: kubepods-pod<uid>.slice)
// The path may be relative to the reader's cgroup namespace ("/../../kubepods-...") and may go on
// below the container (a process that made its own sub-cgroup); neither changes the answer.
#include <algorithm>

#include "common/strings.h"
#include "exporter/attribution.h"

namespace kgpu::exporter {
namespace {

bool is_lower_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

bool is_container_id(std::string_view s) { return s.size() == 64 && std::ranges::all_of(s, is_lower_hex); }

// A pod UID with `sep` between its groups: the 8-4-4-4-12 UUID form, or the 32-hex hash the
// kubelet gives static pods (no separators). Returned in the dashed form.
std::optional<std::string> pod_uid(std::string_view s, char sep) {
    std::string out(s);
    if (s.size() == 32) {
        if (!std::ranges::all_of(s, is_lower_hex)) return std::nullopt;
        return out;
    }
    if (s.size() != 36) return std::nullopt;
    for (size_t i = 0; i < s.size(); ++i) {
        const bool group_end = i == 8 || i == 13 || i == 18 || i == 23;
        if (group_end ? s[i] != sep : !is_lower_hex(s[i])) return std::nullopt;
        if (group_end) out[i] = '-';
    }
    return out;
}

// "<...kubepods...>-pod<uid with _>.slice", the systemd driver's pod slice (the slice name itself
// says it is under kubepods).
std::optional<std::string> systemd_pod_slice(std::string_view c) {
    if (!c.ends_with(".slice")) return std::nullopt;
    c.remove_suffix(6);
    auto p = c.rfind("-pod");
    if (p == std::string_view::npos) return std::nullopt;
    if (c.substr(0, p).find("kubepods") == std::string_view::npos) return std::nullopt;
    return pod_uid(c.substr(p + 4), '_');
}

// The container component right below the pod: a bare ID (cgroupfs with containerd or docker),
// or "<runtime>-<id>" with ".scope" (systemd) or without (CRI-O on cgroupfs). CRI-O's
// "crio-conmon-<id>" is the container's monitor, not the container.
std::optional<std::string> container_component(std::string_view c) {
    if (is_container_id(c)) return std::string(c);
    if (c.ends_with(".scope")) c.remove_suffix(6);
    for (std::string_view prefix : {"cri-containerd-", "crio-", "docker-"}) {
        if (c.starts_with(prefix)) {
            auto id = c.substr(prefix.size());
            if (is_container_id(id)) return std::string(id);
            return std::nullopt;
        }
    }
    return std::nullopt;
}

std::optional<CgroupRef> parse_path(std::string_view path) {
    auto parts = strings::split(path, '/');
    // cgroupfs names the pod "pod<uid>" under a "kubepods" component. A path relative to the
    // reader's cgroup namespace ("/../../pod<uid>/<id>", the exporter in its own pod reading the
    // host's /proc) may not show kubepods at all; the pod/container pair is specific enough there.
    bool under_kubepods = false;
    for (size_t i = 0; i < parts.size(); ++i) {
        auto c = parts[i];
        if (c.empty() || c == ".") continue;
        if (c == "..") {
            under_kubepods = true;
            continue;
        }
        std::optional<std::string> uid;
        if (c.starts_with("pod")) {
            if (under_kubepods) uid = pod_uid(c.substr(3), '-');
        } else {
            uid = systemd_pod_slice(c);
        }
        if (!uid) {
            if (c.find("kubepods") != std::string_view::npos) under_kubepods = true;
            continue;
        }
        if (i + 1 >= parts.size()) return std::nullopt;  // the pod's own cgroup: no container
        auto id = container_component(parts[i + 1]);
        if (!id) return std::nullopt;
        return CgroupRef{std::move(*uid), std::move(*id)};
    }
    return std::nullopt;
}

}  // namespace

std::optional<CgroupRef> parse_cgroup(std::string_view cgroup_text) {
    // Any line will do: v2 has one, v1 one per hierarchy (some may sit outside the pod, e.g. a
    // hybrid host's "0::/" line), so take the first that names a pod container.
    for (auto line : strings::split(cgroup_text, '\n')) {
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        auto c1 = line.find(':');
        if (c1 == std::string_view::npos || c1 == 0) continue;
        auto c2 = line.find(':', c1 + 1);
        if (c2 == std::string_view::npos) continue;
        if (!std::ranges::all_of(line.substr(0, c1), [](char c) { return c >= '0' && c <= '9'; })) continue;
        auto path = line.substr(c2 + 1);
        if (!path.starts_with('/')) continue;
        if (auto ref = parse_path(path)) return ref;
    }
    return std::nullopt;
}

}  // namespace kgpu::exporter
