// Kubernetes Events about this node (events.h).
#include "kube/events.h"

#include <time.h>

#include <algorithm>

#include <fmt/format.h>

#include "common/json.h"
#include "common/log.h"
#include "kube/api_stats.h"

namespace kgpu::kube {
namespace {

// Events' messages are capped as the events.k8s.io API caps its note (1 KiB): a message is for
// people, and an XID flood must not make big objects.
constexpr std::size_t kMaxMessage = 1024;

std::string capped(std::string message) {
    if (message.size() > kMaxMessage) {
        message.resize(kMaxMessage - 3);
        // Do not end inside a UTF-8 sequence: the API server refuses invalid UTF-8.
        while (!message.empty() && (static_cast<unsigned char>(message.back()) & 0xC0) == 0x80) message.pop_back();
        if (!message.empty() && (static_cast<unsigned char>(message.back()) & 0x80)) message.pop_back();
        message += "...";
    }
    return message;
}

bool retryable(const Result<Response>& r) { return !r || r->status == 429 || r->status >= 500; }

}  // namespace

std::string rfc3339(std::chrono::system_clock::time_point t) {
    const std::time_t secs = std::chrono::system_clock::to_time_t(t);
    std::tm tm{};
    ::gmtime_r(&secs, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

EventRecorder::EventRecorder(Requester request, EventRecorderOptions options)
    : request_(std::move(request)), opts_(std::move(options)), tokens_(opts_.burst) {}

EventRecorder::~EventRecorder() { stop(); }

void EventRecorder::start() {
    if (thread_.joinable()) return;
    thread_ = std::thread([this] { run(); });
}

void EventRecorder::request_stop() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
}

void EventRecorder::stop() {
    request_stop();
    if (thread_.joinable()) thread_.join();
}

// One event (or annotation) counted here and in the process's ApiStats (kgpu_node_events_total).
void EventRecorder::count(unsigned long Stats::*field, std::string_view result) {
    {
        std::lock_guard lk(mu_);
        ++(stats_.*field);
    }
    ApiStats::global().event(result);
}

void EventRecorder::record(std::string type, std::string reason, std::string message) {
    {
        std::lock_guard lk(mu_);
        if (queue_.size() < opts_.queue_limit) {
            queue_.push_back({std::move(type), std::move(reason), capped(std::move(message)), opts_.now()});
            cv_.notify_all();
            return;
        }
    }
    count(&Stats::queue_full, "queue_full");
}

void EventRecorder::annotate(std::string key, std::string value) {
    {
        std::lock_guard lk(mu_);
        annotations_["annotations\n" + key] = std::move(value);
    }
    cv_.notify_all();
}

void EventRecorder::label(std::string key, std::string value) {
    {
        std::lock_guard lk(mu_);
        annotations_["labels\n" + key] = std::move(value);
    }
    cv_.notify_all();
}

EventRecorder::Stats EventRecorder::stats() const {
    std::lock_guard lk(mu_);
    return stats_;
}

void EventRecorder::run() {
    for (;;) {
        {
            std::unique_lock lk(mu_);
            auto ready = [this] { return stop_ || !queue_.empty() || !annotations_.empty(); };
            // An annotation whose PATCH failed is tried again at retry_at_ even with nothing new.
            if (unwritten_.empty()) {
                cv_.wait(lk, ready);
            } else {
                (void)cv_.wait_until(lk, retry_at_, ready);
            }
            if (stop_) return;
        }
        flush();
    }
}

void EventRecorder::flush() {
    std::deque<Pending> events;
    std::map<std::string, std::string> notes;
    {
        std::lock_guard lk(mu_);
        events.swap(queue_);
        notes.swap(annotations_);
    }
    // What failed before goes again, unless a newer value replaced it.
    for (auto& [k, v] : unwritten_) notes.try_emplace(k, std::move(v));
    unwritten_.clear();
    for (auto& e : events) {
        bool stopping_now = false;
        {
            std::lock_guard lk(mu_);
            stopping_now = stop_;
        }
        if (stopping_now) {  // stopping: no new request (each may take the client's timeout)
            count(&Stats::failed, "failed");
            continue;
        }
        write_event(std::move(e));
    }
    bool stopping = false;
    {
        std::lock_guard lk(mu_);
        stopping = stop_;
    }
    if (!notes.empty() && !stopping) write_annotations(std::move(notes));
}

nlohmann::json EventRecorder::event_object(const std::string& name, std::string_view type, std::string_view reason,
                                           std::string_view message, std::chrono::system_clock::time_point when) const {
    const std::string ts = rfc3339(when);
    return {
        {"apiVersion", "v1"},
        {"kind", "Event"},
        {"metadata", {{"name", name}, {"namespace", opts_.event_namespace}}},
        // As the kubelet's node events: the UID is the node's name, which `kubectl describe node`
        // searches for.
        {"involvedObject", {{"kind", "Node"}, {"name", opts_.node}, {"uid", opts_.node}}},
        {"type", type},
        {"reason", reason},
        {"message", message},
        {"source", {{"component", opts_.component}, {"host", opts_.node}}},
        {"reportingComponent", opts_.component},
        {"reportingInstance", opts_.node},
        {"firstTimestamp", ts},
        {"lastTimestamp", ts},
        {"count", 1},
    };
}

std::string EventRecorder::unique_name(std::chrono::system_clock::time_point when) {
    long long ns = std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch()).count();
    if (ns <= last_name_ns_) ns = last_name_ns_ + 1;
    last_name_ns_ = ns;
    return fmt::format("{}.{:x}", opts_.node, ns);
}

bool EventRecorder::take_token(std::chrono::system_clock::time_point now) {
    if (tokens_at_ && now > *tokens_at_ && opts_.refill.count() > 0)
        tokens_ = std::min<double>(opts_.burst, tokens_ + std::chrono::duration<double>(now - *tokens_at_).count() /
                                                              static_cast<double>(opts_.refill.count()));
    if (!tokens_at_ || now > *tokens_at_) tokens_at_ = now;
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
}

void EventRecorder::failed_once(const std::string& kind, const std::string& message) {
    if (logged_.first(kind)) {
        log::warn("node events: {} (logged once for this kind of failure; kgpu keeps serving)", message);
    } else {
        log::debug("node events: {}", message);
    }
}

std::optional<Response> EventRecorder::send(std::string_view method, const std::string& path, const std::string& body,
                                            std::string_view content_type) {
    for (unsigned attempt = 1;; ++attempt) {
        if (attempt > 1) {
            std::lock_guard lk(mu_);
            if (stop_) return std::nullopt;
        }
        auto r = request_(method, path, body, content_type);
        if (!retryable(r) || attempt >= std::max(1u, opts_.attempts)) {
            if (!r) {
                failed_once(fmt::format("{} transport", method), r.error().message);
                return std::nullopt;
            }
            return std::move(*r);
        }
        std::unique_lock lk(mu_);
        if (cv_.wait_for(lk, opts_.retry_delay, [this] { return stop_; })) {
            if (!r) return std::nullopt;
            return std::move(*r);
        }
    }
}

void EventRecorder::write_event(Pending p) {
    // 1. Aggregation by type and reason.
    auto& similar = similar_[p.type + "\n" + p.reason];
    // client-go's window: similar events more than aggregate_window after the previous one start
    // a new group (a steady flood stays combined).
    if (similar.messages.empty() || p.when - similar.last > opts_.aggregate_window) similar.messages.clear();
    similar.last = p.when;
    if (similar.messages.size() < opts_.aggregate_after) similar.messages[p.message] = true;  // bounded
    std::string key = p.type + "\n" + p.reason + "\n" + p.message;
    if (similar.messages.size() >= opts_.aggregate_after) {
        // One combined Event for the rest of the window: its count grows, its message is the latest.
        p.message = capped("(combined from similar events): " + p.message);
        key = p.type + "\n" + p.reason + "\n(combined)";
    }

    // 2. The spam filter, before any request.
    if (!take_token(p.when)) {
        count(&Stats::rate_limited, "rate_limited");
        log::debug("node events: {} {} dropped by the rate limit: {}", p.type, p.reason, p.message);
        return;
    }

    // 3. Deduplication: the same Event again, or a new one.
    const std::string ts = rfc3339(p.when);
    const std::string events = fmt::format("/api/v1/namespaces/{}/events", opts_.event_namespace);
    Seen next;
    bool written = false;
    if (auto it = seen_.find(key); it != seen_.end()) {
        next = it->second;
        next.count += 1;
        const nlohmann::json patch = {{"count", next.count}, {"lastTimestamp", ts}, {"message", p.message}};
        auto r = send("PATCH", events + "/" + next.name, kgpu::json::dump_text(patch), "application/merge-patch+json");
        if (r && r->status == 200) {
            written = true;
            count(&Stats::updated, "updated");
        } else if (r && r->status != 404) {
            failed_once(fmt::format("PATCH {}", r->status), describe_failure("PATCH", events + "/" + next.name, *r));
        }
        // 404: the Event expired (the API server's event TTL, 1 h by default): written anew below,
        // with its count, as client-go does.
        if (!written && !(r && r->status == 404)) {
            count(&Stats::failed, "failed");
            return;
        }
    } else {
        next.name = unique_name(p.when);
        next.count = 1;
        next.first_timestamp = ts;
    }
    if (!written) {
        auto obj = event_object(next.name, p.type, p.reason, p.message, p.when);
        obj["count"] = next.count;
        obj["firstTimestamp"] = next.first_timestamp;
        auto r = send("POST", events, kgpu::json::dump_text(obj), "application/json");
        if (!r || (r->status != 201 && r->status != 200)) {
            if (r) failed_once(fmt::format("POST {}", r->status), describe_failure("POST", events, *r));
            count(&Stats::failed, "failed");
            return;
        }
        count(&Stats::created, "created");
    }
    // Remembered only once written, so a failed write is not counted as posted.
    if (!seen_.contains(key)) {
        seen_order_.push_back(key);
        while (seen_order_.size() > opts_.cache_limit) {
            seen_.erase(seen_order_.front());
            seen_order_.pop_front();
        }
    } else {
        seen_order_.remove(key);
        seen_order_.push_back(key);
    }
    seen_[key] = std::move(next);
}

void EventRecorder::write_annotations(std::map<std::string, std::string> values) {
    nlohmann::json patch;
    for (const auto& [k, v] : values) {
        const auto nl = k.find('\n');  // "<labels|annotations>\n<key>"
        patch["metadata"][k.substr(0, nl)][k.substr(nl + 1)] = v;
    }
    const std::string path = "/api/v1/nodes/" + opts_.node;
    auto r = send("PATCH", path, kgpu::json::dump_text(patch), "application/merge-patch+json");
    if (r && r->status == 200) {
        retry_backoff_ = {};
        count(&Stats::annotated, "annotated");
        return;
    }
    if (r) failed_once(fmt::format("PATCH node {}", r->status), describe_failure("PATCH", path, *r));
    count(&Stats::failed, "failed");
    // Not lost: written again after a backoff (10 s doubling to 5 min), or with the next change.
    retry_backoff_ = std::clamp<std::chrono::milliseconds>(retry_backoff_ * 2, std::chrono::seconds(10), std::chrono::minutes(5));
    retry_at_ = std::chrono::steady_clock::now() + retry_backoff_;
    unwritten_ = std::move(values);
}

}  // namespace kgpu::kube
