// log::Once: each key's first sighting, a bound on what it keeps, and forgetting a key whose
// problem went away.
#include "common/log_once.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace {

using kgpu::log::Once;

TEST(LogOnce, EachKeyIsFirstOnceUntilForgotten) {
    Once once;
    EXPECT_TRUE(once.first("a"));
    EXPECT_FALSE(once.first("a"));
    EXPECT_TRUE(once.first("b"));
    once.forget("a");
    once.forget("never seen");
    EXPECT_TRUE(once.first("a"));
    EXPECT_FALSE(once.first("b"));
}

// A key with a changing part (a pid, a byte count) must not grow the set without bound: past the
// limit nothing new is first, and what was seen stays seen.
TEST(LogOnce, PastItsLimitNothingNewIsLogged) {
    Once once(3);
    for (const char* k : {"1", "2", "3"}) EXPECT_TRUE(once.first(k));
    EXPECT_FALSE(once.first("4"));
    EXPECT_FALSE(once.first("1"));
    once.forget("2");
    EXPECT_TRUE(once.first("4"));
}

// Threads asking for the same key: exactly one of them logs.
TEST(LogOnce, OneThreadOfManyGetsTheFirstSighting) {
    Once once;
    std::atomic<int> firsts{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&] {
            for (int i = 0; i < 1000; ++i)
                if (once.first("shared")) ++firsts;
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(firsts.load(), 1);
}

}  // namespace
