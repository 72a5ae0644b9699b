// Watching this node's Node object (issue #27): list, then watch from the list's resourceVersion
// with bookmarks, as client-go's reflector does for one object (fieldSelector metadata.name):
//  - ADDED / MODIFIED: the node is handed to the callback, its resourceVersion kept;
//  - BOOKMARK: only the resourceVersion is kept;
//  - DELETED: the callback gets null;
//  - an ERROR event or a response with 410 Gone (the version is too old): list again;
//  - the watch ending (the server's timeoutSeconds, a cut connection): watch again from the
//    last version;
//  - a failure (transport, 401/403, 5xx, garbage): backoff with jitter, 1 s doubling to 30 s,
//    reset by a successful list or watch; each kind logged once.
// The callback runs on the watch's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/log_once.h"
#include "kube/http.h"

namespace kgpu::kube {

// A watch response's body as it arrives: one JSON object per line (the API server's framing),
// split across reads anywhere. Errors: parse, naming the line's start (a line over 16 MiB too).
class WatchDecoder {
public:
    Status feed(std::string_view bytes, std::vector<nlohmann::json>& events);

private:
    std::string partial_;
};

// The value of label `key` on `node` (a Node object): "" when the Node does not carry it; nullopt
// when `node` is not a Node object (no metadata).
std::optional<std::string> label_of(const nlohmann::json& node, std::string_view key);

class Client;
// GET /api/v1/nodes/<node> and its label `key` ("" when absent). Errors: the transport's, the API
// server's answer (describe_failure), or parse when the answer is not a Node.
Result<std::string> read_node_label(Client& client, const std::string& node, std::string_view key);

class NodeWatch {
public:
    using OnNode = std::function<void(const nlohmann::json& node)>;  // null: the node was deleted
    // GET `path` (the list).
    using List = std::function<Result<Response>(std::string_view path)>;
    // GET `path` (the watch), handing the body to on_body as it arrives (Client::stream).
    using Stream = std::function<Result<Response>(std::string_view path, const std::function<bool(std::string_view)>& on_body,
                                                  const std::atomic<bool>& stop)>;
    struct Options {
        std::string node;
        std::chrono::seconds watch_timeout{300};  // timeoutSeconds of each watch (the server ends it)
        std::chrono::milliseconds min_backoff{1000}, max_backoff{30000};
    };

    NodeWatch(List list, Stream stream, Options options, OnNode on_node);
    ~NodeWatch();
    NodeWatch(const NodeWatch&) = delete;
    NodeWatch& operator=(const NodeWatch&) = delete;

    void start();
    // Asks the thread to end (at the watch's next 500 ms wake-up, or after the request in flight)
    // without waiting; stop() then joins. Idempotent.
    void request_stop();
    void stop();

    // One round, in the caller's thread (tests; the thread loops on it): a list when there is no
    // version, then one watch until it ends. Returns the failure that calls for a backoff.
    Status step();
    // Only the list (the node handed to the callback, its version kept): a one-shot reader.
    Status list();
    std::string resource_version() const;
    unsigned long lists() const { return lists_.load(); }

private:
    void run();
    void failed_once(const std::string& kind, const std::string& message);

    List list_;
    Stream stream_;
    Options opts_;
    OnNode on_node_;
    std::atomic<bool> stop_{false};
    std::atomic<unsigned long> lists_{0};
    std::atomic<unsigned long> events_{0};  // watch events of any type received
    mutable std::mutex mu_;  // rv_ and the wait
    std::condition_variable cv_;
    std::string rv_;
    log::Once logged_;  // failure kinds logged once
    std::mt19937 jitter_{std::random_device{}()};
    std::thread thread_;
};

// A NodeWatch of `node` through `api`: the list and each watch are `api`'s requests, a watch
// ends at the server's timeoutSeconds, and one silent for a minute past that is cut. Not started.
std::unique_ptr<NodeWatch> watch_node(std::shared_ptr<Client> api, const std::string& node, NodeWatch::OnNode on_node);

}  // namespace kgpu::kube
