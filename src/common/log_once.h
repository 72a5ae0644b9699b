// Logging a recurring problem once (common/log.h's calls, keyed by the caller).
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

#include "common/log.h"

namespace kgpu::log {

// What a long-running loop logs once: a problem it meets on every pass (a file it cannot use, an
// unknown config key, a failing API request) is logged when first met, not on each pass. Keys are
// the caller's (often the message itself). At most `limit` keys are kept: input nobody checked
// (a message with a changing part) must not grow it for good; past that nothing new is logged, so
// an owner whose keys include free text sets a limit well above what it expects.
// Thread-safe.
class Once {
public:
    explicit Once(std::size_t limit = 256) : limit_(limit) {}
    // True the first time `key` is seen (the caller logs then), false after, and false for every
    // new key once `limit` keys are kept.
    bool first(std::string_view key);
    // `key` is logged again when next seen (its problem went away).
    void forget(std::string_view key);

private:
    std::mutex mu_;
    std::set<std::string, std::less<>> seen_;
    std::size_t limit_;
};

}  // namespace kgpu::log
