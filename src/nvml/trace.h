// Tracing every NVML call (as DCGM's loader can hook every call): with the environment variable
// KGPU_NVML_TRACE set (not "0") when the library is loaded, each entry point of the table is
// wrapped so that a call is logged at debug level (`--log-level debug`) with its arguments and
// result: `nvml: nvmlDeviceGetUUID(0x5611…, "GPU-2fbe…", 96) = SUCCESS`. Out-parameters are shown
// after the call: a number, enum or handle behind a pointer as `&42` (`&0x5611…`), a string
// buffer as its text, only when the call succeeded. Without the variable nothing is wrapped and a call costs what it did. Internal
// to src/nvml (library.cpp binds the table).
//
// One library's table per process is traced (the wrappers are per entry point): a second library
// loaded while the first is traced is not.
#pragma once

#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "nvml/error.h"

namespace kgpu::nvml::trace {

// KGPU_NVML_TRACE is set and not "0" (read at each library load).
bool enabled();
// Whether a trace line would be written now (the log level is debug).
bool logging();
// Writes one trace line.
void line(std::string_view name, const std::vector<std::string>& args, std::string_view result);

template <class T>
std::string arg(T a, bool succeeded) {
    if constexpr (std::is_pointer_v<T>) {
        using Pointee = std::remove_pointer_t<T>;
        using P = std::remove_cv_t<Pointee>;
        if (a == nullptr) return "null";
        if constexpr (std::is_same_v<P, char>) {
            if (succeeded || std::is_const_v<Pointee>) return fmt::format("\"{}\"", std::string_view(a, ::strnlen(a, 96)));
        } else if constexpr (std::is_arithmetic_v<P>) {
            if (succeeded) return fmt::format("&{}", *a);
        } else if constexpr (std::is_enum_v<P>) {
            if (succeeded) return fmt::format("&{}", static_cast<long long>(*a));
        } else if constexpr (std::is_pointer_v<P>) {  // a handle written by the call
            if (succeeded) return fmt::format("&{}", static_cast<const void*>(*a));
        }
        return fmt::format("{}", static_cast<const void*>(a));
    } else if constexpr (std::is_enum_v<T>) {
        return fmt::format("{}", static_cast<long long>(a));
    } else if constexpr (std::is_arithmetic_v<T>) {
        return fmt::format("{}", a);
    } else {
        return "{…}";  // a structure passed by value
    }
}

template <class Tag, class F>
struct Traced;
template <class Tag, class R, class... A>
struct Traced<Tag, R (*)(A...)> {
    static inline R (*real)(A...) = nullptr;
    static R call(A... a) {
        R r = real(a...);
        if (!logging()) return r;  // traced but not logged: do not format the arguments
        if constexpr (std::is_pointer_v<R>) {
            line(Tag::name, {arg(a, true)...}, r ? std::string_view(r) : std::string_view("null"));
        } else {
            line(Tag::name, {arg(a, r == 0)...}, return_name(r));  // nvmlReturn_t; 0 is NVML_SUCCESS
        }
        return r;
    }
};

// Puts the tracing wrapper in `field`; false when another library's entry point is traced already.
template <class Tag, class F>
bool wrap(F& field) {
    using T = Traced<Tag, F>;
    if (T::real != nullptr && T::real != field) return false;
    T::real = field;
    field = &T::call;
    return true;
}

}  // namespace kgpu::nvml::trace
