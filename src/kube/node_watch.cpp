// This node's Node object, listed and watched (node_watch.h).
#include "kube/node_watch.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/log.h"
#include "kube/api_stats.h"
#include "kube/client.h"

namespace kgpu::kube {

Status WatchDecoder::feed(std::string_view bytes, std::vector<nlohmann::json>& events) {
    for (;;) {
        const auto eol = bytes.find('\n');
        if (eol == std::string_view::npos) {
            partial_.append(bytes);
            if (partial_.size() > (16u << 20)) return fail(Code::parse, "watch: an event over 16 MiB");
            return {};
        }
        partial_.append(bytes.substr(0, eol));
        bytes.remove_prefix(eol + 1);
        std::string line;
        line.swap(partial_);
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object() || !j.contains("type") || !j["type"].is_string())
            return fail(Code::parse, "watch: '{}' is not a watch event", line.substr(0, 80));
        events.push_back(std::move(j));
    }
}

namespace {

// obj[key] when obj is an object and that is a string, else "": what the API server sends is
// read without trusting its types (a wrong one must not throw out of the watch's thread).
std::string string_field(const nlohmann::json& obj, const char* key) {
    if (!obj.is_object()) return {};
    const auto it = obj.find(key);
    return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

const nlohmann::json& field(const nlohmann::json& obj, const char* key) {
    static const nlohmann::json none;
    if (!obj.is_object()) return none;
    const auto it = obj.find(key);
    return it != obj.end() ? *it : none;
}

}  // namespace

std::optional<std::string> label_of(const nlohmann::json& node, std::string_view key) {
    if (!node.is_object() || !node.contains("metadata") || !node["metadata"].is_object()) return std::nullopt;
    const auto& meta = node["metadata"];
    if (!meta.contains("labels") || !meta["labels"].is_object()) return std::string();
    const auto it = meta["labels"].find(key);
    return it != meta["labels"].end() && it->is_string() ? it->get<std::string>() : std::string();
}

Result<std::string> read_node_label(Client& client, const std::string& node, std::string_view key) {
    if (auto st = check_node_name(node); !st) return std::unexpected(st.error());
    const std::string path = "/api/v1/nodes/" + node;
    auto r = client.request("GET", path);
    if (!r) return std::unexpected(r.error());
    if (r->status != 200) return fail(Code::unavailable, "{}", describe_failure("GET", path, *r));
    auto value = label_of(nlohmann::json::parse(r->body, nullptr, false), key);
    if (!value) {
        ApiStats::global().malformed();
        return fail(Code::parse, "GET {}: not a Node", path);
    }
    return *value;
}

NodeWatch::NodeWatch(List list, Stream stream, Options options, OnNode on_node)
    : list_(std::move(list)), stream_(std::move(stream)), opts_(std::move(options)), on_node_(std::move(on_node)) {}

NodeWatch::~NodeWatch() { stop(); }

void NodeWatch::start() {
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
}

void NodeWatch::request_stop() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
}

void NodeWatch::stop() {
    request_stop();
    if (thread_.joinable()) thread_.join();
}

std::string NodeWatch::resource_version() const {
    std::lock_guard lk(mu_);
    return rv_;
}

void NodeWatch::failed_once(const std::string& kind, const std::string& message) {
    if (logged_.first(kind)) {
        log::warn("node watch: {} (logged once for this kind of failure; retrying with backoff)", message);
    } else {
        log::debug("node watch: {}", message);
    }
}

Status NodeWatch::list() {
    const std::string path = "/api/v1/nodes?fieldSelector=metadata.name%3D" + opts_.node;
    auto r = list_(path);
    if (!r) return std::unexpected(r.error());
    if (r->status != 200) return fail(Code::unavailable, "{}", describe_failure("GET", path, *r));
    auto j = nlohmann::json::parse(r->body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("items") || !j["items"].is_array()) {
        ApiStats::global().malformed();
        return fail(Code::parse, "GET {}: not a NodeList", path);
    }
    ++lists_;
    const auto& items = j["items"];
    on_node_(items.empty() ? nlohmann::json() : items[0]);
    const std::string rv = string_field(field(j, "metadata"), "resourceVersion");
    if (rv.empty()) {
        ApiStats::global().malformed();
        return fail(Code::parse, "GET {}: the NodeList has no resourceVersion", path);
    }
    std::lock_guard lk(mu_);
    rv_ = rv;
    return {};
}

Status NodeWatch::step() {
    if (resource_version().empty())
        if (auto st = list(); !st) return st;
    const std::string path = fmt::format(
        "/api/v1/nodes?fieldSelector=metadata.name%3D{}&watch=true&allowWatchBookmarks=true&timeoutSeconds={}&resourceVersion={}",
        opts_.node, opts_.watch_timeout.count(), resource_version());
    WatchDecoder decoder;
    Status problem;
    bool gone = false;
    auto on_body = [&](std::string_view bytes) {
        std::vector<nlohmann::json> events;
        if (auto st = decoder.feed(bytes, events); !st) {
            ApiStats::global().malformed();
            problem = st;
            return false;
        }
        for (const auto& e : events) {
            const std::string type = string_field(e, "type");  // WatchDecoder checked it is a string
            const nlohmann::json& obj = field(e, "object");
            if (type == "ERROR") {
                // A Status: 410 (Expired, Gone) asks for a new list; anything else is a failure.
                const auto& code = field(obj, "code");
                if (code.is_number_integer() && code.get<long long>() == 410) {
                    gone = true;
                } else {
                    // The answer was counted as a WATCH 200 when it began; the failure by its code.
                    ApiStats::global().error(code.is_number_integer() ? status_kind(static_cast<int>(code.get<long long>()))
                                                                      : std::string_view("malformed"));
                    const std::string message = string_field(obj, "message");
                    problem = fail(Code::unavailable, "watch: ERROR event: {}", message.empty() ? e.dump() : message);
                }
                return false;
            }
            const std::string rv = string_field(field(obj, "metadata"), "resourceVersion");
            if (!rv.empty()) {
                std::lock_guard lk(mu_);
                rv_ = rv;
            }
            ++events_;
            if (type == "ADDED" || type == "MODIFIED") on_node_(obj);
            else if (type == "DELETED") on_node_(nlohmann::json());
        }
        return true;
    };
    auto r = stream_(path, on_body, stop_);
    if (gone || (r && r->status == 410)) {
        log::debug("node watch: resourceVersion {} expired: listing again", resource_version());
        std::lock_guard lk(mu_);
        rv_.clear();
        return {};
    }
    if (!problem) return problem;
    if (!r) return std::unexpected(r.error());
    if (r->status != 200) return fail(Code::unavailable, "{}", describe_failure("GET", path, *r));
    return {};
}

void NodeWatch::run() {
    std::chrono::milliseconds backoff{0};
    while (!stop_) {
        const auto t0 = std::chrono::steady_clock::now();
        const unsigned long seen = events_.load();
        auto st = step();
        if (st) {
            backoff = std::chrono::milliseconds(0);
            // A round that ended at once with nothing in it (410 Gone, a proxy closing the
            // stream): the next one waits, as client-go's reflector does, instead of spinning.
            if (events_.load() == seen && std::chrono::steady_clock::now() - t0 < opts_.min_backoff) {
                std::unique_lock lk(mu_);
                cv_.wait_for(lk, opts_.min_backoff, [this] { return stop_.load(); });
            }
            continue;
        }
        const std::string& m = st.error().message;
        // The kind: the status code when there is one, else the error code.
        std::string kind = fmt::format("{}", static_cast<int>(st.error().code));
        for (const char* c : {": 401", ": 403", ": 404", ": 500", ": 503", ": 429"})
            if (m.find(c) != std::string::npos) kind = c;
        failed_once(kind, m);
        backoff = std::clamp(backoff * 2, opts_.min_backoff, opts_.max_backoff);
        // Jitter: 50-100 % of the backoff, so nodes do not come back in step.
        std::uniform_int_distribution<long> d(backoff.count() / 2, backoff.count());
        std::unique_lock lk(mu_);
        cv_.wait_for(lk, std::chrono::milliseconds(d(jitter_)), [this] { return stop_.load(); });
    }
}

std::unique_ptr<NodeWatch> watch_node(std::shared_ptr<Client> api, const std::string& node, NodeWatch::OnNode on_node) {
    NodeWatch::Options wo;
    wo.node = node;
    const auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(wo.watch_timeout) + std::chrono::seconds(60);
    return std::make_unique<NodeWatch>(
        [api](std::string_view path) { return api->request("GET", path); },
        [api, idle](std::string_view path, const std::function<bool(std::string_view)>& on_body, const std::atomic<bool>& stop) {
            return api->stream(path, on_body, stop, idle);
        },
        wo, std::move(on_node));
}

}  // namespace kgpu::kube
