// The HTTP server's connection table (exporter/conn_table.h) without sockets: which connection
// goes first when room is needed, per client address and overall; deadlines; a connection taken
// out stays parked (its id finds nothing) until bury().
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "exporter/conn_table.h"

using namespace kgpu::exporter;
using namespace std::chrono_literals;

namespace {

const ConnClock::time_point t0{};

TEST(ConnTable, TheLeastUsefulConnectionGoesFirstThenTheOldest) {
    ConnTable t(16);
    Conn& writing = t.add(10, "a", t0);
    Conn& idle_old = t.add(11, "b", t0);
    Conn& head = t.add(12, "a", t0);
    Conn& idle_new = t.add(13, "a", t0);
    EXPECT_EQ(writing.id, 16u);
    EXPECT_EQ(idle_new.id, 19u);
    t.set_phase(writing, Phase::writing, t0, 10s);
    t.set_phase(idle_old, Phase::idle, t0 + 1s, 10s);
    t.set_phase(head, Phase::head, t0, 10s);
    t.set_phase(idle_new, Phase::idle, t0 + 2s, 10s);
    ASSERT_EQ(t.size(), 4u);
    // Idle before a request in progress before an answer being written; the oldest idle first.
    EXPECT_EQ(t.most_expendable(), idle_old.id);
    // One client address's own: its idle one, though the other client's is older.
    EXPECT_EQ(t.most_expendable_of("a"), idle_new.id);
    EXPECT_EQ(t.of_peer("a"), 3u);
    EXPECT_EQ(t.of_peer("c"), 0u);
    EXPECT_EQ(t.most_expendable_of("c"), std::nullopt);
    // A closing connection goes before anything.
    t.set_phase(writing, Phase::closing, t0 + 5s, 2s);
    EXPECT_EQ(t.most_expendable(), writing.id);
    EXPECT_EQ(t.most_expendable_of("a"), writing.id);
}

TEST(ConnTable, ANewcomerRanksWithRequestsInProgressSoTheOldestSlowHeadGoes) {
    EXPECT_EQ(rank(Phase::fresh), rank(Phase::head));
    EXPECT_EQ(rank(Phase::handshake), rank(Phase::head));
    EXPECT_LT(rank(Phase::idle), rank(Phase::fresh));
    EXPECT_LT(rank(Phase::head), rank(Phase::auth));
    ConnTable t(1);
    Conn& slow = t.add(3, "x", t0);
    t.set_phase(slow, Phase::head, t0, 10s);
    Conn& fresh = t.add(4, "y", t0 + 1s);
    t.set_phase(fresh, Phase::fresh, t0 + 1s, 1s);
    EXPECT_EQ(t.most_expendable(), slow.id);
}

TEST(ConnTable, DeadlinesComeInOrderAndMoveWithThePhase) {
    ConnTable t(1);
    EXPECT_EQ(t.next_deadline(), std::nullopt);
    Conn& a = t.add(3, "x", t0);
    Conn& b = t.add(4, "x", t0);
    t.set_phase(a, Phase::fresh, t0, 5s);
    t.set_phase(b, Phase::head, t0, 3s);
    EXPECT_EQ(t.next_deadline(), t0 + 3s);
    EXPECT_EQ(t.first_due(t0 + 2s), std::nullopt);
    EXPECT_EQ(t.first_due(t0 + 3s), b.id);
    // b's request arrived: it writes now, with a new deadline after a's.
    t.set_phase(b, Phase::writing, t0 + 3s, 10s);
    EXPECT_EQ(t.first_due(t0 + 4s), std::nullopt);
    EXPECT_EQ(t.first_due(t0 + 5s), a.id);
    EXPECT_EQ(t.next_deadline(), t0 + 5s);
}

TEST(ConnTable, ATakenOutConnectionIsFoundNowhereButLivesUntilBuried) {
    ConnTable t(1);
    Conn& a = t.add(3, "x", t0);
    Conn& b = t.add(4, "x", t0);
    t.set_phase(a, Phase::idle, t0, 5s);
    t.set_phase(b, Phase::idle, t0 + 1s, 5s);
    const auto id = a.id;
    t.take_out(a);
    EXPECT_EQ(t.find(id), nullptr);
    EXPECT_EQ(t.size(), 1u);
    EXPECT_EQ(t.of_peer("x"), 1u);
    EXPECT_EQ(t.most_expendable(), b.id);
    EXPECT_EQ(t.first_due(t0 + 100s), b.id);
    EXPECT_EQ(a.fd, 3);  // parked, still readable by a caller in the same batch
    t.bury();
    t.take_out(b);
    EXPECT_EQ(t.size(), 0u);
    EXPECT_EQ(t.of_peer("x"), 0u);
    EXPECT_EQ(t.most_expendable(), std::nullopt);
    EXPECT_EQ(t.next_deadline(), std::nullopt);
    int n = 0;
    t.for_each([&](Conn&) { ++n; });
    EXPECT_EQ(n, 0);
}

}  // namespace
