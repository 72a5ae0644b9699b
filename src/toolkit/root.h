// File operations confined to a container's root file system. A createContainer hook runs as root
// on the host side of the container, and the root is the image's: any path in it may be a symlink
// pointing anywhere. Every path here is resolved with openat2(RESOLVE_IN_ROOT), so "/", ".." and
// absolute symlinks stay inside the root (Linux >= 5.6; older kernels get an error naming it).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "common/files.h"

namespace kgpu::toolkit {

class RootDir {
public:
    // Errors: not_found / io naming `path`; invalid_argument when `path` is empty or names the
    // caller's root directory however it is spelled ("/", "//", "/.", "/tmp/..", a bind mount of
    // "/"): the opened directory's device and inode are compared with those of "/", because a
    // hook must never work on the host's root.
    static Result<RootDir> open(const std::string& path);

    const std::string& path() const { return path_; }
    // The O_PATH descriptor of the root directory (owned by this object).
    int fd() const { return fd_.get(); }

    // openat2 of `rel` (absolute or relative, interpreted inside the root). Errors keep errno's
    // meaning: not_found for ENOENT.
    Result<Fd> open_at(std::string_view rel, int flags, mode_t mode = 0) const;
    bool exists(std::string_view rel) const;
    // Creates the directory `rel` and its missing parents (each `mode`); returns it (O_PATH).
    Result<Fd> mkdir_all(std::string_view rel, mode_t mode) const;
    // Writes the file `rel` with `content` and `mode`, creating parent directories (`dir_mode`).
    // `exclusive`: fail when it exists (O_EXCL); else whatever is at `rel` (a file, a symlink, a
    // hard link to a file elsewhere) is replaced by renaming a new file over it, so nothing it
    // pointed to or shared an inode with is written.
    Status write_file(std::string_view rel, std::string_view content, mode_t mode, bool exclusive = true,
                      mode_t dir_mode = 0755) const;
    // Replaces `rel` with a symlink to `target` (a temporary link renamed over it).
    Status symlink(std::string_view target, std::string_view rel) const;
    // The target of the symlink `rel`; not_found when it is not there, invalid_argument when it
    // is not a symlink.
    Result<std::string> readlink(std::string_view rel) const;
    // Names in directory `rel` (not . and ..).
    Result<std::vector<std::string>> list(std::string_view rel) const;

private:
    std::string path_;
    Fd fd_;
};

// "/proc/self/fd/<fd>": a path the kernel resolves to exactly that file (mount, chmod, exec).
std::string fd_path(int fd);

// A random suffix for scratch names ("00-kgpu-<suffix>.conf").
using files::random_suffix;

}  // namespace kgpu::toolkit
