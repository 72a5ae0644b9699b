// The driver's files on the host that a container needs, found under a driver root and a device
// root (the GPU Operator installs the driver under /run/nvidia/driver; device nodes may live
// under another root), where nvidia-ctk v1.20 looks for them (pkg/nvcdi, internal/discover,
// pkg/lookup). Paths are kept twice: as the container sees them (the path relative to the
// root) and where they are on the host.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace kgpu::cdi {

struct HostFile {
    std::string path;       // in the container, e.g. /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
    std::string host_path;  // on the host, e.g. /run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
};

struct DeviceNode {
    std::string path;       // /dev/nvidia0
    std::string host_path;
    // Set when host_path is a character device (from stat): CDI then carries type "c", the
    // numbers, the file mode, permissions "rwm" and a non-root group; otherwise the runtime
    // reads them from host_path when the container starts.
    std::optional<unsigned> major, minor;
    std::optional<unsigned> file_mode;  // permission bits
    std::optional<unsigned> gid;        // when not 0
};

// Whether `root` is the host's own root ("" or "/").
bool is_root(const std::filesystem::path& root);
// `host` as the container sees it: without the prefix `root` (unchanged when it is not under it).
std::string relative_to_root(const std::filesystem::path& root, const std::string& host);

// The directories under the driver root searched for the driver's libraries, in order
// (nvidia-ctk's library locator; merged-/usr spellings are read once).
const std::vector<std::string>& library_dirs();

// nvidia-ctk v1.20's driver library locator (root.Driver.Libraries()): files matching a name
// pattern, symlinks resolved (kept inside the root), each once. With explicit search paths
// (absolute host directories, --library-search-path) only those are searched. Otherwise the
// library_dirs() under the root, and, for a pattern they do not match, the 64-bit libraries of
// the root's own /etc/ld.so.cache (a driver in a directory only ld.so.conf.d names): each cache
// entry's path under the root and the links it leads through (absolute link targets taken under
// the root), matched by file name. The cache is read once, when first needed; a missing one is
// skipped, an unreadable or malformed one is skipped with a warning.
class LibraryLocator {
public:
    explicit LibraryLocator(std::filesystem::path root, std::vector<std::string> search_paths = {});
    std::vector<HostFile> locate(const std::string& pattern);
    const std::filesystem::path& root() const { return root_; }
    // The host directories searched, then the cache when it was read ("<path>" or "<path> (why
    // not used)"), for the error when nothing is found.
    std::vector<std::string> searched() const;
    // The names in the host directory `host_dir`, sorted: read once for the locator's life (one
    // spec's generation looks into the same library directories for several patterns).
    const std::vector<std::string>& names_in(const std::filesystem::path& host_dir);

private:
    const std::vector<std::string>& cache_files();
    std::filesystem::path root_;
    std::vector<std::string> search_paths_;
    bool explicit_paths_ = false;
    std::optional<std::vector<std::string>> cache_files_;  // host paths, once read
    std::string cache_note_;                                // why the cache gave nothing
    std::map<std::string, std::vector<std::string>> listings_;  // names_in's, by host directory
};

// What find_driver_libraries found, and where it looked.
struct DriverLibraries {
    // The container directories holding lib*.so.<version>, in search order: the spec's
    // NVIDIA_CTK_LIBCUDA_DIR and the folders searched for the rest.
    std::vector<std::string> dirs;
    // Every *.so.<version> in those directories, then in their vdpau/ subdirectories, then the
    // legacy libnvidia-nvvm70.so.*; symlinks resolved, each file once, in discovery order.
    std::vector<HostFile> libraries;
    // The host directories searched (for the error when nothing is found).
    std::vector<std::string> searched;
};

// The driver's libraries under `root` for `driver_version`: the directories of the
// lib*.so.<version> that LibraryLocator(root, search_paths) finds, then every *.so.<version> in
// them (and their vdpau/) and the legacy libnvidia-nvvm70.so.*.
DriverLibraries find_driver_libraries(const std::filesystem::path& root, const std::string& driver_version,
                                      const std::vector<std::string>& search_paths = {});
// The same through `libraries` (to share one ld.so.cache read with the graphics files).
DriverLibraries find_driver_libraries(LibraryLocator& libraries, const std::string& driver_version);

// Every `*.so.<driver_version>` in the library dirs under `root` (find_driver_libraries'
// libraries, for callers that want only the files).
std::vector<HostFile> find_libraries(const std::filesystem::path& root, const std::string& driver_version);

// The driver binaries (nvidia-smi, nvidia-debugdump, nvidia-persistenced,
// nvidia-cuda-mps-control, nvidia-cuda-mps-server, nvidia-imex, nvidia-imex-ctl): for each,
// the first executable file in the PATH directories (and /usr/local/sbin, /usr/local/bin,
// /usr/sbin, /usr/bin, /sbin, /bin) under `root`.
std::vector<HostFile> find_binaries(const std::filesystem::path& root);

// GSP firmware nvidia/<version>/gsp*.bin under `root` in the kernel's firmware search path:
// the custom path (`custom_path`, from /sys/module/firmware_class/parameters/path),
// /lib/firmware/updates/<kernel release>, /lib/firmware/updates, /lib/firmware/<kernel
// release>, /lib/firmware.
std::vector<HostFile> find_firmware(const std::filesystem::path& root, const std::string& driver_version,
                                    const std::string& kernel_release = {}, const std::string& custom_path = {});

// The IPC endpoints a container may talk to: the first of /run and /var/run holding
// nvidia-persistenced/socket, likewise nvidia-fabricmanager/socket, and /tmp/nvidia-mps when it
// is not a directory (nvidia-ctk v1.20's file locator skips directories, so the MPS pipe
// directory a running MPS daemon creates is never listed).
std::vector<HostFile> find_ipc_sockets(const std::filesystem::path& root);

// /run/nvidia-persistenced/socket under `root`, when present.
std::optional<HostFile> find_persistenced_socket(const std::filesystem::path& root);

// The device node `path` (absolute, e.g. /dev/nvidiactl) under `dev_root`; nullopt when absent.
std::optional<DeviceNode> find_device_node(const std::filesystem::path& dev_root, const std::string& path);

// /dev/nvidia-caps-imex-channels/channel<N> under `dev_root`, by channel number.
std::vector<DeviceNode> find_imex_channels(const std::filesystem::path& dev_root);

// The DRM nodes of the GPU at `bus_id` (/dev/dri/card1, /dev/dri/renderD128), from
// <sysfs_root>/bus/pci/devices/<bus_id>/drm/.
std::vector<std::string> drm_nodes(const std::filesystem::path& sysfs_root, const std::string& bus_id);

// The DT_SONAME of an ELF shared object; "" when it has none. Errors: not_found / io when it
// cannot be read; parse when it is not an ELF file (little-endian, 32 or 64 bit).
Result<std::string> read_soname(const std::filesystem::path& path);

// The symlinks a container needs for one driver library `lib` (nvidia-ctk's
// WithDriverDotSoSymlinks), as "target::link": libcuda.so.1::<dir>/libcuda.so for libcuda
// (and the GLX/opticalflow equivalents), <file>::<dir>/<SONAME> when the host has that SONAME
// link, <SONAME>::<dir>/<name>.so when the host has the .so link.
std::vector<std::string> library_links(const HostFile& lib);

// /proc/driver/nvidia-caps/mig-minors under `proc_root` (the parent of driver/): "gpu0/gi7/access"
// -> 66. Errors: the file is missing or a line is not "<name> <minor>" (message names file:line).
Result<std::map<std::string, unsigned>> read_mig_minors(const std::filesystem::path& proc_root);

// The loaded kernel module's version from /proc/driver/nvidia/version's text ("NVRM version:
// NVIDIA UNIX x86_64 Kernel Module  550.54.15  ..."); "" when the text has none.
std::string parse_proc_driver_version(std::string_view text);

}  // namespace kgpu::cdi
