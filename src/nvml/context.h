// Internal to src/nvml: what a Session, its Devices and EventSets share. The last owner to go
// calls nvmlShutdown, balancing the nvmlInit of Session::open.
#pragma once

#include <cstdint>
#include <expected>
#include <mutex>
#include <unordered_map>
#include <memory>
#include <string_view>

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

// Handle generations (DCGM's idea): NVML hands out a MIG device's handle by slot, and after the
// GPU's MIG configuration changes the same slot, even the same handle, may name another
// instance. Every Device remembers the generation of its GPU's MIG configuration it was taken in;
// an EventSet that sees the GPU's MigConfigChange event moves the generation on, and from then
// on every call through an older MIG device handle is refused (Device::live) instead of reading
// whatever instance sits there now. Process-wide, like NVML's handles; keyed by the GPU's handle.
class MigGenerations {
public:
    static MigGenerations& instance() {
        static MigGenerations g;
        return g;
    }
    std::uint64_t now(const void* gpu) const {
        std::lock_guard lk(mu_);
        auto it = gens_.find(gpu);
        return it == gens_.end() ? 0 : it->second;
    }
    std::uint64_t advance(const void* gpu) {
        std::lock_guard lk(mu_);
        return ++gens_[gpu];
    }

private:
    mutable std::mutex mu_;
    std::unordered_map<const void*, std::uint64_t> gens_;
};

// The first statement of every Device getter: a stale MIG handle is refused (Device::live).
#define KGPU_NVML_LIVE()                                                                           \
    do {                                                                                           \
        if (auto live_ = live(); !live_) return std::unexpected(live_.error());                    \
    } while (0)

// The error of a failed call, naming the entry point by its table field ("DeviceGetBrand").
inline std::unexpected<Error> failed(const Context& ctx, std::string_view field, int nvml_return) {
    return std::unexpected(make_error(*ctx.lib, ctx.lib->symbol_name(field), nvml_return));
}

}  // namespace kgpu::nvml
