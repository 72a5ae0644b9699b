// Typed log calls to stderr: log::warn("GPU {} lost: {}", uuid, err). Formats are checked at
// compile time by fmt. One line per call, written with a single write so lines from different
// threads never interleave.
#pragma once

#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace kgpu::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3, off = 4 };
// text: `2026-01-02T03:04:05.678Z warn message`; json: one object per line with the keys of Go's
// log/slog JSON handler ({"time":...,"level":"WARN","msg":...}), as dcgm-exporter's --log-format json.
enum class Format { text, json };

void set_level(Level level);
Level level();
void set_format(Format format);
// Parses "debug", "info", "warn", "error", "off"; returns false for anything else.
bool parse_level(std::string_view text, Level& out);
void write(Level level, std::string_view message);

template <class... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
    if (level() <= Level::debug) write(Level::debug, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
    if (level() <= Level::info) write(Level::info, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
    if (level() <= Level::warn) write(Level::warn, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
    if (level() <= Level::error) write(Level::error, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kgpu::log
