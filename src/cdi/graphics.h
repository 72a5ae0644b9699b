// The graphics files of nvidia-ctk v1.20's default spec (internal/discover/graphics.go,
// NewGraphicsMountsDiscoverer): the EGL/GBM/Wayland libraries, the X.Org driver modules, the
// GLVND/EGL/X11/OpenCL configuration files and the Vulkan ICD files, all read-only bind mounts,
// and the links the GBM backend, the Vulkan producer and the GLX server module need.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "cdi/driver_files.h"

namespace kgpu::cdi {

struct GraphicsFiles {
    // In nvidia-ctk's order: libraries, X.Org modules, configuration files, Vulkan files.
    std::vector<HostFile> mounts;
    // create-symlinks "target::link" arguments, for the spec-wide create-symlinks hook that
    // comes before the driver libraries' one:
    //   ../libnvidia-allocator.so.1::<dir>/gbm/nvidia-drm_gbm.so (the GBM backend),
    //   libnvidia-vulkan-producer.so.<version>::<dir>/libnvidia-vulkan-producer.so,
    //   libglxserver_nvidia.so.<version>::<dir>/libglxserver_nvidia.so.
    std::vector<std::string> links;
};

// Where the files are looked for (nvidia-ctk's, for the driver root `libraries.root()`):
//  - libraries through `libraries` (the driver library locator, ld.so.cache included):
//    libnvidia-egl-gbm.so.*.*, libnvidia-egl-wayland.so.*.*, libnvidia-egl-wayland2.so.*.*,
//    libnvidia-allocator.so.<version> (linked, not mounted: the driver's own mounts have it),
//    libnvidia-vulkan-producer.so.<version>;
//  - nvidia_drv.so and libglxserver_nvidia.so.<version>: the first of each in <dir>/nvidia/xorg,
//    <dir>/xorg/modules{,/updates}/{drivers,extensions} for each of `lib_dirs` (the driver
//    library directories, as the container sees them), then /usr/lib/xorg, /usr/lib64/xorg,
//    /usr/X11R6/lib, /usr/X11R6/lib64 + modules{,/updates}/{drivers,extensions}, under the root;
//  - configuration files in `config_search_paths` (host directories) when given, else in /etc
//    and $XDG_DATA_DIRS (default /usr/local/share:/usr/share) under the root, each where found:
//    glvnd/egl_vendor.d/10_nvidia.json, egl/egl_external_platform.d/{15_nvidia_gbm,
//    10_nvidia_wayland,09_nvidia_wayland2}.json, nvidia/nvoptix.bin,
//    X11/xorg.conf.d/{10-nvidia,nvidia-drm-outputclass}.conf, OpenCL/vendors/nvidia.icd;
//  - vulkan/icd.d/nvidia_icd.json, vulkan/icd.d/nvidia_layers.json,
//    vulkan/implicit_layer.d/nvidia_layers.json and vulkan/icd.d/nvidia_icd.<arch>.json: the
//    first found in the configuration directories, else at the root itself (GKE's
//    <root>/vulkan), mounted at /etc/<that name> in the container.
GraphicsFiles find_graphics_files(LibraryLocator& libraries, const std::string& driver_version,
                                  const std::vector<std::string>& lib_dirs,
                                  const std::vector<std::string>& config_search_paths = {});

}  // namespace kgpu::cdi
