#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>

#include <fmt/chrono.h>

#include "common/log_once.h"

namespace kgpu::log {
namespace {
std::atomic<Level> g_level{Level::info};
std::atomic<Format> g_format{Format::text};

// `s` as the body of a JSON string: quotes, backslashes and control characters escaped; other
// bytes as they are (log messages are UTF-8 or plain bytes; JSON readers take UTF-8).
void append_json_escaped(std::string& out, std::string_view s) {
    for (const char c : s) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
            if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
            else out += c;
        }
    }
}
}  // namespace

void set_level(Level l) { g_level.store(l, std::memory_order_relaxed); }
Level level() { return g_level.load(std::memory_order_relaxed); }
void set_format(Format f) { g_format.store(f, std::memory_order_relaxed); }

bool parse_level(std::string_view text, Level& out) {
    static constexpr std::pair<std::string_view, Level> names[] = {
        {"debug", Level::debug}, {"info", Level::info}, {"warn", Level::warn},
        {"warning", Level::warn}, {"error", Level::error}, {"off", Level::off}};
    for (const auto& [name, l] : names) {
        if (text == name) {
            out = l;
            return true;
        }
    }
    return false;
}

void write(Level l, std::string_view message) {
    static constexpr std::string_view tags[] = {"debug", "info", "warn", "error", "off"};
    using namespace std::chrono;
    const auto now = time_point_cast<milliseconds>(system_clock::now());
    std::string line;
    if (g_format.load(std::memory_order_relaxed) == Format::json) {
        static constexpr std::string_view slog_levels[] = {"DEBUG", "INFO", "WARN", "ERROR", "ERROR"};
        line = fmt::format(R"({{"time":"{:%Y-%m-%dT%H:%M:%S}Z","level":"{}","msg":")", now,
                           slog_levels[static_cast<int>(l)]);
        append_json_escaped(line, message);
        line += "\"}\n";
    } else {
        line = fmt::format("{:%Y-%m-%dT%H:%M:%S}Z {} {}\n", now, tags[static_cast<int>(l)], message);
    }
    // One write(2) per line: atomic for pipes up to PIPE_BUF, and never interleaved mid-line
    // by stdio buffering.
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
        ssize_t n = ::write(STDERR_FILENO, p, left);
        if (n <= 0) break;
        p += n;
        left -= static_cast<size_t>(n);
    }
}

bool Once::first(std::string_view key) {
    std::lock_guard lk(mu_);
    if (seen_.size() >= limit_ || seen_.contains(key)) return false;
    seen_.emplace(key);
    return true;
}

void Once::forget(std::string_view key) {
    std::lock_guard lk(mu_);
    if (auto it = seen_.find(key); it != seen_.end()) seen_.erase(it);
}

}  // namespace kgpu::log
