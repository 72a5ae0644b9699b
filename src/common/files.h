// Small file helpers that report failures as values naming the path.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "common/error.h"

namespace kgpu::files {

// The whole file. Errors: not_found when it does not exist, io otherwise; the message names the path.
Result<std::string> read(const std::filesystem::path& path);

// The whole file, which must be a regular file (a symlink to one is followed): for the files an
// operator names (configs), where a FIFO would block the read forever and a device or socket is
// never meant. Opened without blocking, checked with fstat, then read. Errors: not_found,
// no_permission and io as read(); invalid_argument "<path> is a FIFO (named pipe), expected a
// regular file" (likewise for directories, sockets and devices).
Result<std::string> read_regular(const std::filesystem::path& path);

// Every entry of `dir`, in the order listed, or why not: a range-for over directory_iterator
// throws out of its increment when readdir fails partway (EIO or ESTALE on a network
// filesystem), and a partial list must not pass for the whole. Errors: not_found (no such
// directory), io (it cannot be opened, or the listing failed partway); the message names `dir`.
Result<std::vector<std::filesystem::directory_entry>> entries(const std::filesystem::path& dir);

// The first line without its newline and surrounding blanks (sysfs attribute files).
Result<std::string> read_line(const std::filesystem::path& path);

// Replaces the content of `path` atomically, for every file kgpu writes (configs, CDI specs,
// labels): a temporary file ".NAME.tmp-XXXXXX" in the directory of the file being replaced is
// written, fsynced and renamed over it, then the directory is fsynced. Readers see the old
// content or the new, never half of it; the temporary file is removed on failure.
// - A symlink (or chain of them) is written through: its final target is replaced, in the
//   target's directory, and the link stays. A dangling link is an error (not_found), so is a
//   path or target that is not a regular file (invalid_argument) or a loop of links.
// - An existing file keeps its owner, group and mode (no_permission when the owner cannot be
//   kept, e.g. another user's file and not running as root); a new file gets exactly `mode`,
//   whatever the umask.
// - Temporary files of the same name that a killed writer left behind are removed first. A live
//   writer holds a lock on its temporary file, so a concurrent one never loses it.
Status write_atomic(const std::filesystem::path& path, std::string_view content, unsigned mode = 0644);

// The file write_atomic(path, ...) replaces: `path` itself, or the final target of a symlink
// (a relative link resolved against the link's directory). Errors as write_atomic's.
Result<std::filesystem::path> write_target(const std::filesystem::path& path);

// Creates `dir` and its missing parents, each with exactly `mode` (not filtered by the umask);
// directories that exist are left as they are. Errors: io naming the directory that failed.
Status create_directories(const std::filesystem::path& dir, unsigned mode = 0755);

// `root` joined with an absolute `path` ("/run/nvidia/driver" + "/usr/lib64" ->
// "/run/nvidia/driver/usr/lib64"); with root "/" or empty the path is returned unchanged.
std::filesystem::path under_root(const std::filesystem::path& root, const std::filesystem::path& path);

// under_root(root, path) with every symlink on the way resolved inside `root`, as if `root` were
// `/` (what the kernel does for a process chroot'ed there, or openat2 RESOLVE_IN_ROOT): an
// absolute link target starts again at `root`, `..` never climbs above it. For a host mounted at
// `root` whose own links are absolute (NixOS: /etc/containerd/config.toml ->
// /etc/static/containerd/config.toml -> /nix/store/...), so that the installer reads and writes the
// host's files, never its own. The components from the first missing one on are appended as they
// are (a file still to be created); the result names no symlink otherwise. With root "/" or
// empty, `path` is returned unchanged (the kernel resolves it). Errors: invalid_argument when
// `path` is not absolute or a loop has more than 40 links; io when a link cannot be read.
Result<std::filesystem::path> resolve_in_root(const std::filesystem::path& root, const std::filesystem::path& path);

// Writes all of `content` to `fd`, retrying short and interrupted writes: 0, or the errno of the
// write that failed.
int write_all(int fd, std::string_view content);

// Writes `content` as `name` in the directory open as `dir_fd`, through descriptors only: a new
// file beside the old one (O_EXCL | O_NOFOLLOW, exactly `mode`) renamed over it, so a link or a
// hard link at the name is replaced, never followed or written through. With `exclusive` the file
// is created under the name itself and an existing name is an error (EEXIST). Nothing
// half-written stays. On failure: the step that failed ("creating", "writing", "chmod",
// "replacing") and its errno, for the caller to name the file as it knows it.
struct WriteFailure {
    std::string_view step;
    int error = 0;
};
std::optional<WriteFailure> replace_at(int dir_fd, const std::string& name, std::string_view content, unsigned mode,
                                       bool exclusive = false);

// 16 random hex digits, for scratch file names.
std::string random_suffix();

}  // namespace kgpu::files
