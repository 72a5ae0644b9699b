// Basic auth's bookkeeping on the HTTP server's event loop (http.cpp), without sockets or bcrypt
// (the checks themselves run on AuthWorker's thread): the right (user, hash, password) keys
// remembered, the checks under way with the connections waiting for each, and how many checks
// each client address has waiting; and the token bucket of the web config's rate limit.
// Unit-tested alone: tests/exporter/basic_auth_test.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace kgpu::exporter {

struct Credentials {
    std::string user, password;
};
// An Authorization header "Basic <base64 of user:password>" (the scheme in any case); nullopt
// when it is not one.
std::optional<Credentials> basic_credentials(std::string_view authorization);

class PasswordChecks {
public:
    // `remembered`: right keys kept (the oldest forgotten first); `per_peer`: checks one client
    // address may have waiting, however many connections it opens.
    PasswordChecks(std::size_t remembered, unsigned per_peer) : remembered_(remembered), per_peer_(per_peer) {}

    // A right key needs no new check. Wrong ones are never remembered, so a flood of wrong
    // passwords cannot push a right one out.
    bool known_right(const std::string& key) const { return right_.contains(key); }

    // For a key not known right, what connection `conn` of `peer` does: join the check of that key
    // under way (it is counted as waiting for it), start one (then started() once it is queued),
    // or be refused unchecked because its client already has `per_peer` checks waiting.
    enum class Wait { joined, start, peer_full };
    Wait wait_for(const std::string& key, const std::string& peer, std::uint64_t conn);
    void started(const std::string& key, const std::string& peer, std::uint64_t conn);

    // `conn` no longer waits (it closed). True when nobody waits for the key any more: the caller
    // may cancel a check that has not started, and then calls dropped(key).
    bool leave(const std::string& key, std::uint64_t conn);
    void dropped(const std::string& key);

    // The check of `key` ended: the connections that waited for it (in the order they came); a
    // right key is remembered.
    std::vector<std::uint64_t> finished(const std::string& key, bool right);

    // A new web config: no key is known right any more.
    void forget_right() {
        right_.clear();
        right_order_.clear();
    }

    std::size_t waiting_checks() const { return waiting_.size(); }
    unsigned waiting_of(const std::string& peer) const {
        auto it = per_peer_count_.find(peer);
        return it == per_peer_count_.end() ? 0 : it->second;
    }

private:
    struct Waiting {
        std::string peer;                 // the client that started the check
        std::vector<std::uint64_t> conns;
    };
    void release(std::unordered_map<std::string, Waiting>::iterator it);

    std::size_t remembered_;
    unsigned per_peer_;
    std::unordered_set<std::string> right_;
    std::deque<std::string> right_order_;
    std::unordered_map<std::string, Waiting> waiting_;
    std::unordered_map<std::string, unsigned> per_peer_count_;
};

// The web config's rate limit: `burst` requests at once, then one per `interval`.
class TokenBucket {
public:
    using Clock = std::chrono::steady_clock;
    void reset(double burst, Clock::time_point now) {
        tokens_ = burst;
        at_ = now;
    }
    // Whether a request at `now` may go (a token is taken) under `interval` and `burst`.
    bool take(std::chrono::nanoseconds interval, double burst, Clock::time_point now);

private:
    double tokens_ = 0;
    Clock::time_point at_{};
};

}  // namespace kgpu::exporter
