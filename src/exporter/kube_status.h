// The Kubernetes API counts of kgpu's other processes (kube/api_stats.h): the device plugin,
// kgpu labels and config-manager each keep a JSON status file (--kube-api-status-file) in a
// directory the exporter reads at every pass (--kube-api-status-dir), for kgpu_kube_api_* and
// kgpu_node_events_total. The files come from the exporter's own pod, but are checked as any input:
// a file that is not such a status is left out, named, with what is wrong.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace kgpu::exporter {

struct KubeApiStatus {
    struct Request {
        std::string method, code;  // code: an HTTP status or "<error>"
        double count = 0;
    };
    std::string component;                              // lower-case letters, digits, '-'
    std::vector<Request> requests;
    std::vector<std::pair<std::string, double>> errors;  // kind, count
    std::vector<std::pair<std::string, double>> events;  // result, count
    std::optional<double> last_success;                 // Unix seconds
};

// One file's text. Errors: parse, naming the field and what is expected.
Result<KubeApiStatus> parse_kube_api_status(std::string_view text);

// Every "*.json" regular file of `dir` (at most 64, 64 KiB each; symlinks not followed), in name
// order; one status per component (a second file with the same component is left out).
// `problems` (when given) gets one line per file left out, as mps::read_statuses. A missing
// directory is no problem (nothing yet).
std::vector<KubeApiStatus> read_kube_api_statuses(const std::string& dir, std::vector<std::string>* problems = nullptr);

}  // namespace kgpu::exporter
