// One error type for all of kgpu, and the Result alias every fallible function returns.
//
// Policy (STYLE.md #5): errors are values. A function that can fail returns Result<T>;
// exceptions are used only while parsing flags and config files and are caught in main.
// Nothing throws across a thread, gRPC or HTTP boundary.
#pragma once

#include <expected>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

namespace kgpu {

enum class Code {
    invalid_argument,   // the caller gave something malformed
    not_found,          // a named thing (file, device, symbol) does not exist
    not_supported,      // the driver or device does not offer it
    no_permission,
    io,                 // reading or writing a file or socket failed
    parse,              // a file's content is not what was expected
    unavailable,        // the driver or a peer is not there (yet)
    gpu_lost,           // the GPU fell off the bus or needs a reset
    stale,              // a handle from before a change (nvml::Device::live): look it up again
    timeout,
    internal,
};

std::string_view to_string(Code code);

struct Error {
    Code code = Code::internal;
    std::string message;
    // The NVML return code that caused this error, or 0 when it did not come from NVML.
    int nvml_return = 0;

    template <class... Args>
    static Error make(Code code, fmt::format_string<Args...> format, Args&&... args) {
        return Error{code, fmt::format(format, std::forward<Args>(args)...), 0};
    }
    // Prefixes context to the message: "reading /x: <message>".
    [[nodiscard]] Error context(std::string_view what) const;
};

// std::expected with [[nodiscard]] (libstdc++ 12's is not): a call whose Result is dropped does
// not compile (-Werror), so an error cannot be ignored by accident. One meant to be ignored is
// cast to void with a comment saying why.
template <class T>
class Result;
template <class R>
inline constexpr bool is_result_v = false;
template <class T>
inline constexpr bool is_result_v<Result<T>> = true;

template <class T>
class [[nodiscard]] Result : public std::expected<T, Error> {
    using Base = std::expected<T, Error>;

public:
    using Base::Base;
    Result(const Base& b) : Base(b) {}
    Result(Base&& b) : Base(std::move(b)) {}
    // A Result of another type does not convert, however it is passed: std::expected's value
    // constructor would take it as a value (Result<bool> from a Result<int> would hold
    // has_value(), not the error).
    template <class U>
        requires(is_result_v<std::remove_cvref_t<U>> && !std::is_same_v<std::remove_cvref_t<U>, Result>)
    Result(U&&) = delete;

    // Against a value or an unexpected: std::expected's own comparison, taken exactly (through the
    // base class it would tie with the reversed form, which clang rejects as ambiguous).
    template <class U>
        requires(!std::is_base_of_v<Base, U>)
    friend bool operator==(const Result& r, const U& v) {
        return static_cast<const Base&>(r) == v;
    }
    friend bool operator==(const Result& a, const Result& b) {
        return static_cast<const Base&>(a) == static_cast<const Base&>(b);
    }
};
using Status = Result<void>;

template <class... Args>
[[nodiscard]] std::unexpected<Error> fail(Code code, fmt::format_string<Args...> format, Args&&... args) {
    return std::unexpected(Error::make(code, format, std::forward<Args>(args)...));
}

}  // namespace kgpu
