// Private to kgpu_attribution: "log once per distinct failure" for a peer the collector asks at
// every interval (the kubelet's PodResources socket, the CRI runtime socket). A socket that stays
// down must not write a line per interval, but a new kind of failure, and the recovery, should
// each show once.
#pragma once

#include <chrono>
#include <iterator>
#include <string>
#include <string_view>

#include "common/log.h"

namespace kgpu::exporter::detail {

// A container ID or pod the runtime did not list (a container not made by the kubelet, one deleted
// while its process lingers, a pod not started yet) is asked about again only after this long, so
// one such process does not cost a CRI call at every collection.
inline constexpr std::chrono::seconds kUnlistedRetry{60};

class FailureLog {
public:
    // Logs `message` as a warning unless it is the failure logged last.
    void failed(std::string_view message) {
        if (failing_ && message == last_) return;
        failing_ = true;
        last_ = message;
        log::warn("{}", message);
    }
    // After a failure, logs `message` once as info (the peer answers again).
    void ok(std::string_view message) {
        if (!failing_) return;
        failing_ = false;
        last_.clear();
        log::info("{}", message);
    }
    bool failing() const { return failing_; }

private:
    bool failing_ = false;
    std::string last_;
};

}  // namespace kgpu::exporter::detail
