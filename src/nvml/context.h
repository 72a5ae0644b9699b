// Internal to src/nvml: what a Session, its Devices and EventSets share. The last owner to go
// calls nvmlShutdown, balancing the nvmlInit of Session::open.
#pragma once

#include <expected>
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

// The error of a failed call, naming the entry point by its table field ("DeviceGetBrand").
inline std::unexpected<Error> failed(const Context& ctx, std::string_view field, int nvml_return) {
    return std::unexpected(make_error(*ctx.lib, ctx.lib->symbol_name(field), nvml_return));
}

}  // namespace kgpu::nvml
