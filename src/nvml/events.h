// NVML events as an RAII set. Waiting blocks (up to the timeout): keep it on its own thread.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "common/error.h"
#include "nvml/device.h"

struct nvmlEventSet_st;

namespace kgpu::nvml {

// Event type bits (nvmlEventType*).
inline constexpr unsigned long long kEventXid = 0x8;
inline constexpr unsigned long long kEventMigConfigChange = 0x100;
inline constexpr unsigned long long kEventGpuRecoveryAction = 0x8000;
inline constexpr unsigned kNoInstance = 0xFFFFFFFFu;

struct Event {
    // The key the device was registered with (e.g. the GPU index); for an event on a MIG device,
    // the key of its parent GPU. -1 when the device is not one we registered.
    int key = -1;
    unsigned long long type = 0;
    unsigned long long data = 0;  // the XID for XID events
    unsigned gpu_instance_id = kNoInstance;
    unsigned compute_instance_id = kNoInstance;
};

class EventSet {
public:
    // nvmlEventSetCreate. The set keeps NVML initialised while it lives.
    static Result<EventSet> create(const Session& session);
    EventSet(EventSet&&) noexcept;
    EventSet& operator=(EventSet&&) noexcept;
    EventSet(const EventSet&) = delete;
    EventSet& operator=(const EventSet&) = delete;
    ~EventSet();

    // Registers `device` for the event types in `mask` that it supports; returns the registered
    // mask (0 when it supports none of them). Errors: the registration call failed (e.g. GPU_IS_LOST).
    Result<unsigned long long> add(const Device& device, unsigned long long mask, int key);

    // The next event, or nullopt after `timeout_ms` without one. Errors other than TIMEOUT are
    // returned (the caller decides whether to re-create the set).
    Result<std::optional<Event>> wait(unsigned timeout_ms) const;

private:
    EventSet(std::shared_ptr<const Context> ctx, nvmlEventSet_st* set) : ctx_(std::move(ctx)), set_(set) {}
    std::shared_ptr<const Context> ctx_;
    nvmlEventSet_st* set_ = nullptr;
    std::vector<std::pair<nvmlDevice_st*, int>> keys_;
};

}  // namespace kgpu::nvml
