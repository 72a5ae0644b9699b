// Basic auth's bookkeeping (exporter/basic_auth.h) without sockets or bcrypt: the header, who
// waits for which check, the per-client limit, what is remembered, and the rate limit's bucket.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "exporter/basic_auth.h"

using namespace kgpu::exporter;
using namespace std::chrono_literals;
using ::testing::ElementsAre;

namespace {

TEST(BasicAuth, CredentialsFromTheHeader) {
    auto c = basic_credentials("Basic dXNlcjpwYTpzcw==");  // user:pa:ss
    ASSERT_TRUE(c);
    EXPECT_EQ(c->user, "user");
    EXPECT_EQ(c->password, "pa:ss");
    EXPECT_TRUE(basic_credentials("bAsIc   dXNlcjpwYTpzcw==  "));
    EXPECT_FALSE(basic_credentials("Bearer dXNlcjpwYTpzcw=="));
    EXPECT_FALSE(basic_credentials("Basic dXNlcg=="));  // "user": no colon
    EXPECT_FALSE(basic_credentials("Basic !!!"));
    EXPECT_FALSE(basic_credentials(""));
}

TEST(BasicAuth, OneCheckPerKeyTheOthersWaitForIt) {
    PasswordChecks p(100, 2);
    EXPECT_EQ(p.wait_for("k", "a", 1), PasswordChecks::Wait::start);
    p.started("k", "a", 1);
    EXPECT_EQ(p.wait_for("k", "b", 2), PasswordChecks::Wait::joined);
    EXPECT_EQ(p.wait_for("k", "a", 3), PasswordChecks::Wait::joined);
    EXPECT_EQ(p.waiting_of("a"), 1u);  // joining costs a client nothing
    EXPECT_EQ(p.waiting_of("b"), 0u);
    EXPECT_THAT(p.finished("k", true), ElementsAre(1u, 2u, 3u));
    EXPECT_TRUE(p.known_right("k"));
    EXPECT_EQ(p.waiting_checks(), 0u);
    EXPECT_EQ(p.waiting_of("a"), 0u);
}

TEST(BasicAuth, AClientHasAtMostItsShareOfChecksWaiting) {
    PasswordChecks p(100, 2);
    for (std::uint64_t i = 1; i <= 2; ++i) {
        const std::string key = "wrong" + std::to_string(i);
        ASSERT_EQ(p.wait_for(key, "a", i), PasswordChecks::Wait::start);
        p.started(key, "a", i);
    }
    EXPECT_EQ(p.wait_for("wrong3", "a", 3), PasswordChecks::Wait::peer_full);
    EXPECT_EQ(p.wait_for("right", "b", 4), PasswordChecks::Wait::start);  // another client is not held up
    EXPECT_THAT(p.finished("wrong1", false), ElementsAre(1u));
    EXPECT_FALSE(p.known_right("wrong1"));  // wrong keys are never remembered
    EXPECT_EQ(p.wait_for("wrong3", "a", 5), PasswordChecks::Wait::start);
}

TEST(BasicAuth, ACheckNobodyWaitsForAnyMoreCanBeDropped) {
    PasswordChecks p(100, 1);
    p.started("k", "a", 1);
    EXPECT_EQ(p.wait_for("k", "a", 2), PasswordChecks::Wait::joined);
    EXPECT_FALSE(p.leave("k", 1));  // 2 still waits
    EXPECT_TRUE(p.leave("k", 2));
    p.dropped("k");
    EXPECT_EQ(p.waiting_checks(), 0u);
    EXPECT_EQ(p.wait_for("other", "a", 3), PasswordChecks::Wait::start);  // its share is back
    EXPECT_FALSE(p.leave("unknown", 9));
    EXPECT_TRUE(p.finished("k", false).empty());  // a result for a dropped check finds nobody
}

TEST(BasicAuth, RememberedRightKeysAreBoundedOldestFirstAndForgottenOnANewConfig) {
    PasswordChecks p(2, 2);
    p.finished("r1", true);
    p.finished("r2", true);
    p.finished("r3", true);
    EXPECT_FALSE(p.known_right("r1"));
    EXPECT_TRUE(p.known_right("r2"));
    EXPECT_TRUE(p.known_right("r3"));
    p.forget_right();
    EXPECT_FALSE(p.known_right("r3"));
}

TEST(BasicAuth, TheBucketLetsABurstThroughThenOnePerInterval) {
    TokenBucket b;
    const TokenBucket::Clock::time_point t0{};
    b.reset(2, t0);
    EXPECT_TRUE(b.take(100ms, 2, t0));
    EXPECT_TRUE(b.take(100ms, 2, t0));
    EXPECT_FALSE(b.take(100ms, 2, t0 + 50ms));
    EXPECT_TRUE(b.take(100ms, 2, t0 + 150ms));
    EXPECT_FALSE(b.take(100ms, 2, t0 + 160ms));
    // Never more than the burst, however long it was quiet.
    EXPECT_TRUE(b.take(100ms, 2, t0 + 10s));
    EXPECT_TRUE(b.take(100ms, 2, t0 + 10s));
    EXPECT_FALSE(b.take(100ms, 2, t0 + 10s));
    EXPECT_TRUE(b.take(0ns, 0, t0));  // no limit
}

}  // namespace
