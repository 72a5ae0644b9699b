// `kgpu mps-control-daemon mount-shm`: the tmpfs every MPS daemon and its clients share as
// /dev/shm, mounted at <mps root>/shm (NVIDIA's `mps-control-daemon mount-shm`, which runs
// `mount`; kgpu's image has no shell or mount binary, so this calls mount(2) itself).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "common/error.h"

namespace kgpu::mps {

// The tmpfs size option: half of MemTotal in /proc/meminfo's unit ("131921164k" for
// "MemTotal: 263842328 kB"), or "65536k" when the text has no usable MemTotal line (NVIDIA's
// fallback).
std::string shm_size(std::string_view meminfo);

// Unmounts whatever is mounted at `dir` (stacked mounts included), creates it (0755) and mounts a
// tmpfs "shm" there with rw,nosuid,nodev,noexec,relatime,size=<shm_size>. Needs CAP_SYS_ADMIN.
// `meminfo` is the path of /proc/meminfo. Errors: io naming the directory and the failing call
// (no_permission when not allowed to mount, with a hint that the container must be privileged).
Status mount_shm(const std::filesystem::path& dir, const std::filesystem::path& meminfo = "/proc/meminfo");

}  // namespace kgpu::mps
