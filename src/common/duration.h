// Durations as NVIDIA's tools and kgpu's flags spell them ("30s", "5m", "1h30m"): whole seconds,
// units s, m, h. One parser and one printer for every subcommand (device-plugin and labels
// intervals, health.recoveryPeriod, the MIG manager's process timeout).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "common/error.h"

namespace kgpu {

// "1s", "30s", "5m", "1h", or a sequence such as "1h30m" / "1m30s". Units s, m, h; whole
// numbers only; "0s" is allowed here (callers decide minimums). Errors: invalid_argument.
Result<std::chrono::seconds> parse_duration(std::string_view text);
// The shortest spelling parse_duration reads back: 300s -> "5m", 90s -> "1m30s", 0s -> "0s".
std::string format_duration(std::chrono::seconds d);
// The same for whole seconds; "{n}ms" otherwise (periods tests shorten below a second).
std::string format_duration(std::chrono::milliseconds d);

}  // namespace kgpu
