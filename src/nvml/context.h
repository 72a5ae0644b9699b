// Internal to src/nvml: what a Session, its Devices and EventSets share. The last owner to go
// calls nvmlShutdown, balancing the nvmlInit of Session::open.
#pragma once

#include <memory>

#include "nvml/library.h"

namespace kgpu::nvml {

struct Context {
    std::shared_ptr<const Library> lib;
    ~Context() {
        if (lib) lib->api().Shutdown();
    }
    const EntryPoints& api() const { return lib->api(); }
};

}  // namespace kgpu::nvml
