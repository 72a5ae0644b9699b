#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>

#include <fmt/chrono.h>

namespace kgpu::log {
namespace {
std::atomic<Level> g_level{Level::info};
}

void set_level(Level l) { g_level.store(l, std::memory_order_relaxed); }
Level level() { return g_level.load(std::memory_order_relaxed); }

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
    std::string line = fmt::format("{:%Y-%m-%dT%H:%M:%S}Z {} {}\n", now, tags[static_cast<int>(l)], message);
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

}  // namespace kgpu::log
