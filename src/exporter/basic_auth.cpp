#include "exporter/basic_auth.h"

#include <algorithm>

#include "common/strings.h"

namespace kgpu::exporter {

std::optional<Credentials> basic_credentials(std::string_view a) {
    if (!strings::starts_with_ci(a, "basic ")) return std::nullopt;
    bool ok = false;
    const std::string creds = strings::base64_decode(strings::trim(a.substr(6)), ok);
    const auto colon = creds.find(':');
    if (!ok || colon == std::string::npos) return std::nullopt;
    return Credentials{creds.substr(0, colon), creds.substr(colon + 1)};
}

PasswordChecks::Wait PasswordChecks::wait_for(const std::string& key, const std::string& peer, std::uint64_t conn) {
    if (auto w = waiting_.find(key); w != waiting_.end()) {
        w->second.conns.push_back(conn);
        return Wait::joined;
    }
    return waiting_of(peer) >= per_peer_ ? Wait::peer_full : Wait::start;
}

void PasswordChecks::started(const std::string& key, const std::string& peer, std::uint64_t conn) {
    ++per_peer_count_[peer];
    waiting_.emplace(key, Waiting{peer, {conn}});
}

void PasswordChecks::release(std::unordered_map<std::string, Waiting>::iterator it) {
    if (auto n = per_peer_count_.find(it->second.peer); n != per_peer_count_.end() && --n->second == 0)
        per_peer_count_.erase(n);
    waiting_.erase(it);
}

bool PasswordChecks::leave(const std::string& key, std::uint64_t conn) {
    auto w = waiting_.find(key);
    if (w == waiting_.end()) return false;
    auto& ids = w->second.conns;
    ids.erase(std::remove(ids.begin(), ids.end(), conn), ids.end());
    return ids.empty();
}

void PasswordChecks::dropped(const std::string& key) {
    if (auto w = waiting_.find(key); w != waiting_.end()) release(w);
}

std::vector<std::uint64_t> PasswordChecks::finished(const std::string& key, bool right) {
    std::vector<std::uint64_t> out;
    if (auto w = waiting_.find(key); w != waiting_.end()) {
        out = std::move(w->second.conns);
        release(w);
    }
    if (right && !right_.contains(key)) {
        if (right_.size() >= remembered_ && !right_order_.empty()) {
            right_.erase(right_order_.front());
            right_order_.pop_front();
        }
        right_.insert(key);
        right_order_.push_back(key);
    }
    return out;
}

bool TokenBucket::take(std::chrono::nanoseconds interval, double burst, Clock::time_point now) {
    if (interval.count() == 0) return true;
    const double per_second = 1e9 / static_cast<double>(interval.count());
    tokens_ = std::min<double>(burst, tokens_ + std::chrono::duration<double>(now - at_).count() * per_second);
    at_ = now;
    if (tokens_ < 1) return false;
    tokens_ -= 1;
    return true;
}

}  // namespace kgpu::exporter
