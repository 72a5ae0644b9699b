// Small helpers the tests share (one copy each, so test files can be built together).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
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

}  // namespace kgpu::test
