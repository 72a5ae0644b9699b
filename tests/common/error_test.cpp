#include "common/error.h"

#include <type_traits>

#include <gtest/gtest.h>

namespace kgpu {
namespace {

// A Result of another type does not convert (error.h): through std::expected's value constructor
// a Result<bool> made from a failed Result<int> would hold `false`, and the error would be lost.
static_assert(!std::is_constructible_v<Result<bool>, Result<int>>);
static_assert(!std::is_constructible_v<Result<bool>, const Result<int>&>);
static_assert(!std::is_constructible_v<Result<bool>, Result<int>&>);
static_assert(!std::is_convertible_v<Result<int>, Result<bool>>);
static_assert(std::is_constructible_v<Result<int>, int>);
static_assert(std::is_constructible_v<Result<int>, std::unexpected<Error>>);
static_assert(std::is_copy_constructible_v<Result<int>> && std::is_move_constructible_v<Result<int>>);
static_assert(std::is_constructible_v<Status, std::unexpected<Error>>);

Result<int> parse_digit(char c) {
    if (c < '0' || c > '9') return fail(Code::invalid_argument, "'{}' is not a digit", c);
    return c - '0';
}

TEST(Result, AnErrorTravelsUpUnchangedAndContextPrefixesIt) {
    EXPECT_EQ(parse_digit('7'), 7);
    auto bad = parse_digit('x');
    ASSERT_FALSE(bad.has_value());
    EXPECT_EQ(bad.error().code, Code::invalid_argument);
    auto passed = [&]() -> Result<bool> {
        auto d = parse_digit('x');
        if (!d) return std::unexpected(d.error().context("reading the count"));
        return *d > 5;
    }();
    ASSERT_FALSE(passed.has_value());
    EXPECT_EQ(passed.error().message, "reading the count: 'x' is not a digit");
    EXPECT_EQ(passed.error().code, Code::invalid_argument);
}

}  // namespace
}  // namespace kgpu
