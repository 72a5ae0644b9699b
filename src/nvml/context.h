// Internal to src/nvml: what a Session, its Devices and EventSets share. The last owner to go
// calls nvmlShutdown, balancing the nvmlInit of Session::open.
#pragma once

#include <atomic>
#include <cstdint>
#include <expected>
#include <memory>
#include <string_view>

#include "nvml/device.h"
#include "nvml/error.h"
#include "nvml/library.h"

namespace kgpu::nvml {

struct Context {
    std::shared_ptr<const Library> lib;
    ~Context() {
        if (lib) lib->api().Shutdown();
    }
    const EntryPoints& api() const { return lib->api(); }
};

// Handle generations (DCGM's idea). NVML hands out handles by slot: after a GPU's MIG
// configuration changes the same slot, even the same handle, may name another instance, and after
// a GPU stops answering (GPU_IS_LOST: fallen off the bus, reset) and comes back nothing says its
// old handles still name what they did. So every GPU has one epoch for the life of the process
// (keyed by its handle, process-wide like NVML's handles), and every Device remembers the epoch it
// was taken in; Device::call refuses (Code::stale) a handle taken before
//  - a MIG configuration change of its GPU that an EventSet of this process saw (MIG devices only:
//    a GPU's own handle stays valid across MIG changes), or
//  - its GPU answering again after a call answered GPU_IS_LOST (GPUs and their MIG devices).
// Whoever holds a Device looks it up again on Code::stale.
struct GpuEpoch {
    std::atomic<std::uint64_t> mig{0};  // MIG configuration changes seen
    // Times the GPU came back, times two, plus one while it is lost (a call answered GPU_IS_LOST
    // and none has succeeded since). One word, so a handle taken meanwhile reads both at once.
    std::atomic<std::uint64_t> resets{0};
    // The reset generation a handle taken now belongs to: while the GPU is lost, the one after
    // it comes back (a handle taken then is as new as one taken after).
    std::uint64_t reset_now() const {
        const std::uint64_t w = resets.load();
        return (w >> 1) + (w & 1);
    }
    // A call through a handle of reset generation `taken` answered GPU_IS_LOST / succeeded: the
    // latter, on a lost GPU, starts the next generation. A call through a handle from before the
    // current generation (one in flight while another thread saw the GPU come back) moves nothing.
    void saw_lost(std::uint64_t taken) {
        std::uint64_t w = resets.load(std::memory_order_relaxed);
        while (!(w & 1) && (w >> 1) <= taken && !resets.compare_exchange_weak(w, w | 1)) {
        }
    }
    void saw_answer(std::uint64_t taken) {
        std::uint64_t w = resets.load(std::memory_order_relaxed);
        while ((w & 1) && (w >> 1) <= taken && !resets.compare_exchange_weak(w, w + 1)) {
        }
    }
};
// The epoch of the GPU whose handle this is; the same object for as long as the process lives.
GpuEpoch& epoch_of(const nvmlDevice_st* gpu);

// Every call on a device: a stale handle is refused before the call (Device::live) and after it,
// when this very call saw its GPU come back; otherwise NVML's return code, for the caller to judge.
template <class Fn, class... Args>
Result<int> Device::call(Fn fn, Args... args) const {
    if (auto st = live(); !st) return std::unexpected(st.error());
    const int r = fn(handle_, args...);
    if (r == NVML_ERROR_GPU_IS_LOST) epoch_->saw_lost(reset_generation_);
    else if (r == NVML_SUCCESS) {
        epoch_->saw_answer(reset_generation_);
        if (auto st = live(); !st) return std::unexpected(st.error());
    }
    return r;
}

// One call on this device, in a Device member returning a Result or Status: a stale handle or a
// failed call returns its error (the entry point named by its table field).
#define KGPU_DEVICE_CALL(field, ...)                                                               \
    do {                                                                                           \
        auto r_ = call(ctx_->api().field, __VA_ARGS__);                                            \
        if (!r_) return std::unexpected(r_.error());                                               \
        if (*r_ != NVML_SUCCESS) return failed(*ctx_, #field, *r_);                                \
    } while (0)

// The error of a failed call, naming the entry point by its table field ("DeviceGetBrand").
inline std::unexpected<Error> failed(const Context& ctx, std::string_view field, int nvml_return) {
    return std::unexpected(make_error(*ctx.lib, ctx.lib->symbol_name(field), nvml_return));
}

}  // namespace kgpu::nvml
