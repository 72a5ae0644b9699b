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

// Writes via a temporary file in the same directory, fsync, then rename: readers see the old
// content or the new, never half of it. The temporary file is removed on failure.
Status write_atomic(const std::filesystem::path& path, std::string_view content, unsigned mode = 0644);

// Creates `dir` and its missing parents, each with exactly `mode` (not filtered by the umask:
// issue #14, nothing kgpu creates is world-writable); directories that exist are left as they
// are. Errors: io naming the directory that failed.
Status create_directories(const std::filesystem::path& dir, unsigned mode = 0755);

// `root` joined with an absolute `path` ("/run/nvidia/driver" + "/usr/lib64" ->
// "/run/nvidia/driver/usr/lib64"); with root "/" or empty the path is returned unchanged.
std::filesystem::path under_root(const std::filesystem::path& root, const std::filesystem::path& path);

}  // namespace kgpu::files
