// The HTTP server's connections (http.cpp), without sockets: each connection is in one phase,
// and the phase decides how expendable it is when room is needed (rank) and its deadline. The
// table indexes them three ways: by id (the epoll data), by (rank, since, id) globally and per
// client address (which one goes first), and by deadline (timers). A connection taken out is
// parked until bury(), so an event later in the same epoll batch for a connection closed earlier
// finds nothing (find() == nullptr) instead of a reused descriptor. The socket work (epoll, TLS,
// close) stays with the server; tests drive the table alone (tests/exporter/conn_table_test.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "exporter/http_parse.h"
#include "exporter/tls.h"

namespace kgpu::exporter {

// fresh: accepted (or through its TLS handshake) a moment ago, nothing received yet; after
// new_connection_grace without a byte it becomes idle. idle: nothing in flight.
enum class Phase : std::uint8_t { closing, idle, fresh, handshake, head, auth, writing };

// Phases in which the connection's requests are read (fresh, idle, head).
inline bool reading(Phase p) { return p == Phase::fresh || p == Phase::idle || p == Phase::head; }

// How expendable a connection is when room is needed: lower goes first, the oldest first within a
// rank. A fresh connection ranks with the request heads in progress, so a newcomer at the limit
// closes the oldest slow head rather than the connection accepted just before it, whose request
// is on its way (a scraper's).
int rank(Phase p);

using ConnClock = std::chrono::steady_clock;
using OrderKey = std::tuple<int, ConnClock::time_point, std::uint64_t>;  // rank, since, id

struct Conn {
    int fd = -1;
    std::uint64_t id = 0;
    std::string peer;  // the client address's key (one per address)
    Phase phase = Phase::idle;
    OrderKey order{};
    ConnClock::time_point deadline{};
    std::string in;              // received, not yet a complete head
    std::size_t scanned = 0;     // in[0, scanned) holds no head end
    std::size_t lingered = 0;    // bytes drained while closing
    std::string out_head;        // the answer being written: head, then body
    std::shared_ptr<const std::string> out_body;
    std::size_t out_pos = 0;     // over head + body
    bool close_after = false;
    std::uint32_t events = 0;    // what epoll watches
    std::uint64_t turn = 0;      // the loop pass the counts below are for
    unsigned turn_requests = 0;  // requests taken in that pass
    std::size_t turn_bytes = 0;  // bytes read in that pass
    bool ready = false;          // on the ready list: more to do, left for the next pass
    std::unique_ptr<TlsStream> tls;
    bool tls_wants_write = false;  // the last TLS read needs the socket writable (and the reverse)
    bool tls_wants_read = false;
    RequestHead pending;         // a request waiting for its password check
    std::string auth_key;        // the check it waits for
};

class ConnTable {
public:
    explicit ConnTable(std::uint64_t first_id) : next_id_(first_id) {}

    // A new connection with the next id, in phase idle, least expendable of all until its first
    // set_phase, due at `now`.
    Conn& add(int fd, std::string peer, ConnClock::time_point now);
    // The live connection with this id, or null (never added, or taken out).
    Conn* find(std::uint64_t id);
    std::size_t size() const { return conns_.size(); }
    std::size_t of_peer(const std::string& peer) const;

    // `c` is in phase `p` from `now`, due at now + timeout: re-ranked and re-timed.
    void set_phase(Conn& c, Phase p, ConnClock::time_point now, ConnClock::duration timeout);
    // Out of every index; the object is parked until bury() (its descriptor is the caller's).
    void take_out(Conn& c);
    // Frees the parked connections.
    void bury() { parked_.clear(); }

    // The most expendable connection, of all or of one client address; nullopt when none.
    std::optional<std::uint64_t> most_expendable() const;
    std::optional<std::uint64_t> most_expendable_of(const std::string& peer) const;
    // The earliest deadline, and the connection due first when that is at or before `t`.
    std::optional<ConnClock::time_point> next_deadline() const;
    std::optional<std::uint64_t> first_due(ConnClock::time_point t) const;

    template <class F>
    void for_each(F&& f) {
        for (auto& [id, c] : conns_) f(*c);
    }

private:
    using TimerKey = std::pair<ConnClock::time_point, std::uint64_t>;
    std::unordered_map<std::uint64_t, std::unique_ptr<Conn>> conns_;
    std::vector<std::unique_ptr<Conn>> parked_;
    std::set<OrderKey> order_;
    std::unordered_map<std::string, std::set<OrderKey>> peers_;
    std::set<TimerKey> timers_;
    std::uint64_t next_id_;
};

}  // namespace kgpu::exporter
