#include "exporter/conn_table.h"

namespace kgpu::exporter {

int rank(Phase p) {
    switch (p) {
    case Phase::closing: return 0;
    case Phase::idle: return 1;
    case Phase::fresh:
    case Phase::handshake:
    case Phase::head: return 2;
    case Phase::auth:
    case Phase::writing: return 3;
    }
    return 3;
}

Conn& ConnTable::add(int fd, std::string peer, ConnClock::time_point now) {
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->id = next_id_++;
    c->peer = std::move(peer);
    c->order = {0, now, c->id};
    c->deadline = now;
    Conn& ref = *c;
    peers_[ref.peer];
    conns_.emplace(ref.id, std::move(c));
    return ref;
}

Conn* ConnTable::find(std::uint64_t id) {
    auto it = conns_.find(id);
    return it == conns_.end() ? nullptr : it->second.get();
}

std::size_t ConnTable::of_peer(const std::string& peer) const {
    auto it = peers_.find(peer);
    return it == peers_.end() ? 0 : it->second.size();
}

void ConnTable::set_phase(Conn& c, Phase p, ConnClock::time_point now, ConnClock::duration timeout) {
    order_.erase(c.order);
    auto& mine = peers_[c.peer];
    mine.erase(c.order);
    timers_.erase({c.deadline, c.id});
    c.phase = p;
    c.order = {rank(p), now, c.id};
    c.deadline = now + timeout;
    order_.insert(c.order);
    mine.insert(c.order);
    timers_.insert({c.deadline, c.id});
}

void ConnTable::take_out(Conn& c) {
    order_.erase(c.order);
    if (auto it = peers_.find(c.peer); it != peers_.end()) {
        it->second.erase(c.order);
        if (it->second.empty()) peers_.erase(it);
    }
    timers_.erase({c.deadline, c.id});
    auto it = conns_.find(c.id);
    if (it == conns_.end()) return;
    parked_.push_back(std::move(it->second));
    conns_.erase(it);
}

std::optional<std::uint64_t> ConnTable::most_expendable() const {
    if (order_.empty()) return std::nullopt;
    return std::get<2>(*order_.begin());
}

std::optional<std::uint64_t> ConnTable::most_expendable_of(const std::string& peer) const {
    auto it = peers_.find(peer);
    if (it == peers_.end() || it->second.empty()) return std::nullopt;
    return std::get<2>(*it->second.begin());
}

std::optional<ConnClock::time_point> ConnTable::next_deadline() const {
    if (timers_.empty()) return std::nullopt;
    return timers_.begin()->first;
}

std::optional<std::uint64_t> ConnTable::first_due(ConnClock::time_point t) const {
    if (timers_.empty() || timers_.begin()->first > t) return std::nullopt;
    return timers_.begin()->second;
}

}  // namespace kgpu::exporter
