// An in-memory NVML for unit tests: an EntryPoints table whose functions are captureless lambdas
// reading one global FakeNode. Tests edit the node, or replace single table entries to force
// failures (STYLE.md #2). Not thread-safe; one test at a time uses it.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "nvml/library.h"

namespace kgpu::test {

struct FakeGpu {
    std::string uuid = "GPU-00000000-0000-0000-0000-000000000000";
    std::string name = "Fake GPU";
    std::string bus_id = "00000000:01:00.0";
    unsigned bus = 1;
    int numa = 0;
    unsigned long long memory_bytes = 16ull << 30;
    std::vector<std::string> nvlink_remote;  // one entry per active link: a bus id
    std::vector<bool> nvlink_is_switch;      // parallel to nvlink_remote
    int lost = 0;                            // every call answers GPU_IS_LOST
};

struct FakeNode {
    std::string driver = "550.54.15";
    int cuda = 12040;
    std::vector<FakeGpu> gpus;
    int init_result = NVML_SUCCESS;
    int init_calls = 0;
    int shutdown_calls = 0;
    // Level for every pair of different GPUs unless pair_level returns >= 0.
    int default_level = NVML_TOPOLOGY_SYSTEM;
};

FakeNode& fake_node();

// A table with every entry discovery uses; other entries stay null (NOT_SUPPORTED stubs).
nvml::EntryPoints fake_table();

}  // namespace kgpu::test
