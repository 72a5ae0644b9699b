// Small helpers the tests share (one copy each, so test files can be built together).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "common/error.h"

namespace kgpu::test {

// The value of `r`; a failed expectation naming the error (and T{}) when it has none.
template <class T>
T must(Result<T> r) {
    EXPECT_TRUE(r.has_value()) << r.error().message;
    return r ? std::move(*r) : T{};
}

// How often `what` occurs in `text` (overlapping occurrences counted).
inline int count(std::string_view text, std::string_view what) {
    int n = 0;
    for (size_t p = text.find(what); p != std::string_view::npos; p = text.find(what, p + 1)) ++n;
    return n;
}

// Polls `pred` every `step` until it holds or `timeout` passes, and returns its last answer:
// tests wait on a state, not on time (the deadline only bounds a failure).
inline bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout = std::chrono::seconds(20),
                       std::chrono::milliseconds step = std::chrono::milliseconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (pred()) return true;
        std::this_thread::sleep_for(step);
    }
    return pred();
}

}  // namespace kgpu::test
