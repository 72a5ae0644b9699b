// Small file helpers that report failures as values naming the path.
#pragma once

#include <filesystem>
#include <string>

#include "common/error.h"

namespace kgpu::files {

// The whole file. Errors: not_found when it does not exist, io otherwise; the message names the path.
Result<std::string> read(const std::filesystem::path& path);

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

}  // namespace kgpu::files
