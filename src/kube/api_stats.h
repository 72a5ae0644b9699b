// What a process's Kubernetes API requests came to (issue #27: "count it in a metric"). Every
// request the Client makes is counted by method and status code (client-go's
// rest_client_requests_total, code "<error>" when no answer came), every failure by kind, and the
// node Events by what became of them. A process given a status file (--kube-api-status-file)
// rewrites it, atomically, at most once a second after a change; the exporter reads the directory of such files
// (--kube-api-status-dir) and serves them as kgpu_kube_api_* and kgpu_node_events_total, so the
// device plugin and kgpu labels need no HTTP server of their own.
//
// Failure kinds: unreachable (no name resolution or no connection), tls (the handshake or the
// server's certificate), timeout (no complete answer in time), cut (the connection ended early),
// malformed (not HTTP, or not the JSON expected), token (the token file cannot be read);
// unauthorized (401), forbidden (403), not_found (404), conflict (409), invalid (422), throttled
// (429), client_error (another 4xx), server_error (5xx), unexpected (1xx, 3xx).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

namespace kgpu::kube {

// The failure kind of an answer's status: "" for 2xx, unexpected for 1xx and 3xx (a proxy's
// redirect is no success), else the kinds above.
std::string_view status_kind(int status);

class ApiStats {
public:
    // The process's one instance (what the Client counts into).
    static ApiStats& global();

    // An answer to `method` with `status`.
    void answer(std::string_view method, int status);
    // A request to `method` that got no usable answer, of `kind` (transport kinds above).
    void failure(std::string_view method, std::string_view kind);
    // A failure of a request already counted by its code: kind `kind` only (a watch cut after
    // its answer began). malformed(): an answer whose body was not what the caller expected.
    void error(std::string_view kind);
    void malformed() { error("malformed"); }
    // What became of one node Event or annotation: created, updated, annotated, rate_limited,
    // queue_full, failed (EventRecorder::Stats).
    void event(std::string_view result);

    // From now on the status file `path` is kept, labelled `component` (lower-case letters,
    // digits, '-'): written at once, then by a thread of its own after each change, at most
    // once a second, so counting never waits for the disk (a request, or an Event recorded
    // under the plugin's lock). "" stops it.
    void publish(std::string path, std::string component);
    // Writes the file now when something changed since the last write (tests; and at exit).
    void flush();
    // The status file's content.
    nlohmann::json to_json() const;
    void reset();  // tests
    ~ApiStats();

    // Distinct (method, code) pairs, kinds and results kept: the exporter reads at most this many
    // of each (a newer one beyond is not counted).
    static constexpr std::size_t kMaxEntries = 256;

private:
    void changed(std::unique_lock<std::mutex>& lk);
    void write_loop();
    nlohmann::json to_json_locked() const;

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::map<std::pair<std::string, std::string>, std::uint64_t> requests_;  // (method, code)
    std::map<std::string, std::uint64_t> errors_;                              // kind
    std::map<std::string, std::uint64_t> events_;                              // result
    std::optional<std::chrono::system_clock::time_point> last_success_, last_failure_;
    std::string path_, component_;
    bool dirty_ = false, stop_ = false;
    std::thread writer_;
    std::mutex write_mu_;  // one write at a time (the thread's, flush()'s)
    bool write_failed_logged_ = false;
};

// The flag every API-using subcommand has (--kube-api-status-file) and its variable.
inline constexpr const char* kStatusFileEnv = "KGPU_KUBE_API_STATUS_FILE";
inline constexpr const char* kStatusFileHelp =
    "Keep this process's Kubernetes API request, failure and node Event counts in this JSON file (named "
    "*.json; rewritten at most once a second after a change) for kgpu exporter --kube-api-status-dir; its "
    "directory must exist [env KGPU_KUBE_API_STATUS_FILE]";
// The flag, else $KGPU_KUBE_API_STATUS_FILE: when one is set, ApiStats::global() publishes to it.
void publish_status_file(const std::optional<std::string>& flag, std::string component);

}  // namespace kgpu::kube
