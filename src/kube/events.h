// Kubernetes Events about this node (issue #27 part 2): GPU health changes reach `kubectl describe
// node` and `kubectl get events` as the kubelet's own node events do, so an operator sees why
// allocatable dropped. Posted from a thread of its own: an API server that is slow, down,
// refusing or answering garbage never blocks the caller (the device plugin's health thread).
//
// The rules are client-go's event recorder's (tools/record), for the one object it reports on:
//  - aggregation: from the 10th event with the same type and reason but a different message,
//    each within 10 minutes of the previous one, the message becomes "(combined from similar
//    events): <message>" (one Event counts them);
//  - deduplication: an event identical to one posted before (type, reason, message) is that
//    Event again: PATCH count+1, lastTimestamp (a new Event when the old one expired: 404);
//  - spam filter: a token bucket per source and object (25, refilled one per 5 minutes) drops
//    what exceeds it.
// Events are core/v1 Events in namespace `default` with involvedObject {kind: Node, name, uid:
// the node name}, as the kubelet writes them and as `kubectl describe node` searches for them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/log_once.h"
#include "kube/http.h"

namespace kgpu::kube {

// One API request: Client::request in production, a recording fake in tests.
using Requester = std::function<Result<Response>(std::string_view method, std::string_view path,
                                                 std::string_view body, std::string_view content_type)>;

struct EventRecorderOptions {
    std::string node;                            // the involved Node and the source host
    std::string component = "kgpu-device-plugin";  // source.component, reportingComponent
    std::string event_namespace = "default";
    // Spam filter (client-go's defaults).
    unsigned burst = 25;
    std::chrono::seconds refill{300};
    // Aggregation (client-go's defaults).
    std::size_t aggregate_after = 10;
    std::chrono::seconds aggregate_window{600};
    std::size_t cache_limit = 4096;   // identical events remembered for deduplication (LRU)
    std::size_t queue_limit = 256;    // queued events beyond this are dropped (counted)
    // A request that fails in transport, or with 429 or 5xx, is tried `attempts` times in all,
    // `retry_delay` apart (stop() interrupts the wait): client-go's 12 tries 10 s apart, so an
    // event survives an API server that is away for two minutes.
    unsigned attempts = 12;
    std::chrono::milliseconds retry_delay{10000};
    std::function<std::chrono::system_clock::time_point()> now = [] { return std::chrono::system_clock::now(); };
};

class EventRecorder {
public:
    struct Stats {
        unsigned long created = 0, updated = 0;  // Events POSTed, PATCHed (count+1)
        unsigned long annotated = 0;             // node annotation/label PATCHes
        unsigned long rate_limited = 0, queue_full = 0, failed = 0;  // events (or annotations) not written
    };

    EventRecorder(Requester request, EventRecorderOptions options);
    ~EventRecorder();
    EventRecorder(const EventRecorder&) = delete;
    EventRecorder& operator=(const EventRecorder&) = delete;

    // The thread that writes what is queued. Without it, flush() does (tests).
    void start();
    // Asks the thread to end without waiting: the request in flight is the last (no retry, and
    // what is still queued is dropped and counted as not written). stop() then joins. Idempotent.
    void request_stop();
    void stop();

    // Queues an Event ("Normal" or "Warning"); never waits for the API server.
    void record(std::string type, std::string reason, std::string message);
    // Queues `value` for the node annotation `key` (the latest value wins); never waits.
    void annotate(std::string key, std::string value);
    // The same for the node label `key` (one PATCH carries both when both are queued).
    void label(std::string key, std::string value);

    // Writes everything queued now, in this thread (what the thread runs).
    void flush();
    Stats stats() const;

    // The Event object a first occurrence is POSTed as (exposed for tests).
    nlohmann::json event_object(const std::string& name, std::string_view type, std::string_view reason,
                                std::string_view message, std::chrono::system_clock::time_point when) const;

private:
    struct Pending {
        std::string type, reason, message;
        std::chrono::system_clock::time_point when;
    };
    struct Seen {  // an Event written before, for deduplication
        std::string name;
        unsigned long count = 0;
        std::string first_timestamp;
    };
    struct Similar {  // aggregation by type and reason
        std::chrono::system_clock::time_point last;  // the latest similar event
        std::map<std::string, bool> messages;
    };

    void write_event(Pending p);
    void write_annotations(std::map<std::string, std::string> values);
    // The request with retries. nullopt when the transport failed every time (logged).
    std::optional<Response> send(std::string_view method, const std::string& path, const std::string& body,
                                 std::string_view content_type);
    bool take_token(std::chrono::system_clock::time_point now);
    void failed_once(const std::string& kind, const std::string& message);
    void count(unsigned long Stats::*field, std::string_view result);
    std::string unique_name(std::chrono::system_clock::time_point when);
    void run();

    Requester request_;
    EventRecorderOptions opts_;

    mutable std::mutex mu_;  // the queue, the stats and stop_
    std::condition_variable cv_;
    std::deque<Pending> queue_;
    std::map<std::string, std::string> annotations_;  // waiting to be written
    Stats stats_;
    bool stop_ = false;
    std::thread thread_;

    // Only the writing thread (or flush()'s caller) touches these.
    std::map<std::string, Seen> seen_;  // key: type \n reason \n message
    std::list<std::string> seen_order_;  // LRU, most recent last
    std::map<std::string, Similar> similar_;
    double tokens_ = 0;
    std::optional<std::chrono::system_clock::time_point> tokens_at_;
    long long last_name_ns_ = 0;
    log::Once logged_;  // failure kinds logged once
    std::map<std::string, std::string> unwritten_;  // annotations whose PATCH failed
    std::chrono::steady_clock::time_point retry_at_{};
    std::chrono::milliseconds retry_backoff_{0};
};

// RFC 3339 UTC with seconds, as metav1.Time: 2026-12-02T14:50:00Z.
std::string rfc3339(std::chrono::system_clock::time_point t);

}  // namespace kgpu::kube
