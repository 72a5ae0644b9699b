#include "common/duration.h"

#include <charconv>
#include <cstdint>

#include <fmt/format.h>

namespace kgpu {

Result<std::chrono::seconds> parse_duration(std::string_view text) {
    const std::string_view original = text;
    auto bad = [&] {
        return fail(Code::invalid_argument, "invalid duration '{}' (expected e.g. 1s, 30s, 5m, 1h)", original);
    };
    if (text.empty()) return bad();
    std::int64_t total = 0;
    while (!text.empty()) {
        std::int64_t n = 0;
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
        if (ec != std::errc{} || ptr == text.data() || n < 0) return bad();
        text.remove_prefix(static_cast<size_t>(ptr - text.data()));
        if (text.empty()) return bad();  // a unit is required
        std::int64_t unit = 0;
        switch (text.front()) {
            case 's': unit = 1; break;
            case 'm': unit = 60; break;
            case 'h': unit = 3600; break;
            default: return bad();
        }
        text.remove_prefix(1);
        if (n > (std::int64_t{1} << 40) / unit) return bad();
        total += n * unit;
        if (total > (std::int64_t{1} << 40)) return bad();
    }
    return std::chrono::seconds(total);
}

std::string format_duration(std::chrono::seconds d) {
    std::int64_t s = d.count();
    if (s <= 0) return "0s";
    std::string out;
    if (s >= 3600) out += fmt::format("{}h", s / 3600), s %= 3600;
    if (s >= 60) out += fmt::format("{}m", s / 60), s %= 60;
    if (s > 0) out += fmt::format("{}s", s);
    return out;
}

std::string format_duration(std::chrono::milliseconds d) {
    if (d.count() % 1000 == 0) return format_duration(std::chrono::duration_cast<std::chrono::seconds>(d));
    return fmt::format("{}ms", d.count());
}

}  // namespace kgpu
