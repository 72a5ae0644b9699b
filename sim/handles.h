// Handle helpers shared by the simulator's entry points (api.cpp, gpm.cpp): every entry point
// takes the global mutex through withState, checks init, and resolves device handles through
// withDevice, so the common contract of api.cpp holds for all of them.
#pragma once

#include "model.h"

#include <mutex>
#include <string_view>

namespace kgpu_sim {

template <class H>
H toHandle(Object* o) {
    return reinterpret_cast<H>(o);
}

struct DevRef {
    Gpu* gpu = nullptr;
    MigDevice* mig = nullptr;  // set when the handle is a MIG device (gpu is then its parent)
};

enum class On {
    Gpu,        // full GPUs only: a MIG device handle gets NOT_SUPPORTED
    GpuMigOff,  // full GPUs with MIG off: a MIG device handle or a MIG-enabled GPU gets NOT_SUPPORTED
                // (nvml.h: "On MIG-enabled GPUs, querying ... is not currently supported")
    Any,        // GPUs and MIG devices
};

// Runs f(State&) with the global mutex held, after the init check.
template <class F>
nvmlReturn_t withState(F&& f) {
    State& st = state();
    std::lock_guard lk(st.mutex);
    if (st.refcount == 0) return NVML_ERROR_UNINITIALIZED;
    return f(st);
}

// Resolves a device handle (no lost check).
inline nvmlReturn_t resolve(State& st, const void* h, DevRef& d) {
    if (Gpu* g = st.lookup<Gpu>(h, Kind::Gpu)) {
        d = {g, nullptr};
        return NVML_SUCCESS;
    }
    if (MigDevice* m = st.lookup<MigDevice>(h, Kind::Mig)) {
        d = {m->parent, m};
        return NVML_SUCCESS;
    }
    return NVML_ERROR_INVALID_ARGUMENT;
}

// Runs f(State&, DevRef) for a valid device handle on a GPU that is not lost.
// `entry` is the calling entry point's name (the `fail <gpu> <entry point> <error>` command).
template <class F>
nvmlReturn_t withDevice(nvmlDevice_t h, On on, F&& f, const char* entry = __builtin_FUNCTION()) {
    return withState([&](State& st) -> nvmlReturn_t {
        DevRef d;
        if (nvmlReturn_t r = resolve(st, h, d)) return r;
        if (d.gpu->lost) return NVML_ERROR_GPU_IS_LOST;
        if (!d.gpu->failing.empty())
            if (auto it = d.gpu->failing.find(std::string_view(entry)); it != d.gpu->failing.end()) return it->second;
        if (d.mig && on != On::Any) return NVML_ERROR_NOT_SUPPORTED;
        if (on == On::GpuMigOff && d.gpu->migEnabled) return NVML_ERROR_NOT_SUPPORTED;
        return f(st, d);
    });
}

}  // namespace kgpu_sim
