#include "nvml/events.h"

#include "nvml/context.h"
#include "nvml/error.h"

namespace kgpu::nvml {

Result<EventSet> EventSet::create(const Session& session) {
    const auto& ctx = session.ctx_;
    nvmlEventSet_t set = nullptr;
    nvmlReturn_t r = ctx->api().EventSetCreate(&set);
    if (r != NVML_SUCCESS) return std::unexpected(make_error(*ctx->lib, ctx->lib->symbol_name("EventSetCreate"), r));
    return EventSet(ctx, set);
}

EventSet::EventSet(EventSet&& o) noexcept : ctx_(std::move(o.ctx_)), set_(o.set_), keys_(std::move(o.keys_)) {
    o.set_ = nullptr;
}

EventSet& EventSet::operator=(EventSet&& o) noexcept {
    if (this != &o) {
        if (set_ != nullptr) ctx_->api().EventSetFree(set_);
        ctx_ = std::move(o.ctx_);
        set_ = o.set_;
        keys_ = std::move(o.keys_);
        o.set_ = nullptr;
    }
    return *this;
}

EventSet::~EventSet() {
    if (set_ != nullptr) ctx_->api().EventSetFree(set_);
}

Result<unsigned long long> EventSet::add(const Device& device, unsigned long long mask, int key) {
    unsigned long long supported = 0;
    auto r = device.call(ctx_->api().DeviceGetSupportedEventTypes, &supported);
    if (!r) return std::unexpected(r.error());
    if (*r != NVML_SUCCESS && *r != NVML_ERROR_NOT_SUPPORTED) return failed(*ctx_, "DeviceGetSupportedEventTypes", *r);
    // An old driver without the query: try the whole mask and let the registration decide.
    const unsigned long long want = *r == NVML_SUCCESS ? (mask & supported) : mask;
    if (want == 0) return 0ull;
    r = device.call(ctx_->api().DeviceRegisterEvents, want, set_);
    if (!r) return std::unexpected(r.error());
    if (*r != NVML_SUCCESS) return failed(*ctx_, "DeviceRegisterEvents", *r);
    keys_.emplace_back(device.handle_, key);
    return want;
}

Result<std::optional<Event>> EventSet::wait(unsigned timeout_ms) const {
    nvmlEventData_t data{};
    nvmlReturn_t r = ctx_->api().EventSetWait(set_, &data, timeout_ms);
    if (r == NVML_ERROR_TIMEOUT) return std::optional<Event>{};
    if (r == NVML_ERROR_NOT_SUPPORTED) {
        // A driver without the _v2 wait: the older record has no instance ids.
        nvmlEventData_v1_t old{};
        r = ctx_->api().EventSetWaitV1(set_, &old, timeout_ms);
        if (r == NVML_ERROR_TIMEOUT) return std::optional<Event>{};
        data = {old.device, old.eventType, old.eventData, kNoInstance, kNoInstance};
    }
    if (r != NVML_SUCCESS) return std::unexpected(make_error(*ctx_->lib, ctx_->lib->symbol_name("EventSetWait"), r));

    Event e;
    e.type = data.eventType;
    e.data = data.eventData;
    e.gpu_instance_id = data.gpuInstanceId;
    e.compute_instance_id = data.computeInstanceId;
    auto find = [&](nvmlDevice_t h) {
        for (const auto& [handle, key] : keys_)
            if (handle == h) return key;
        return -1;
    };
    e.key = find(data.device);
    nvmlDevice_t gpu = data.device;
    if (e.key < 0 && data.device != nullptr) {
        // An event on a MIG device: attribute it to its parent GPU.
        nvmlDevice_t parent = nullptr;
        if (ctx_->api().DeviceGetDeviceHandleFromMigDeviceHandle(data.device, &parent) == NVML_SUCCESS) {
            e.key = find(parent);
            gpu = parent;
        }
    }
    // The GPU's MIG devices are other instances now: the handles taken before are refused.
    if ((e.type & kEventMigConfigChange) && gpu != nullptr) ++epoch_of(gpu).mig;
    return std::optional<Event>(e);
}

}  // namespace kgpu::nvml
