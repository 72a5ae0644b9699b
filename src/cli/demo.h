// `kgpu demo`: the whole chain on a simulated node (src/demo/demo.h, docs/demo.md).
#pragma once

#include <CLI/CLI.hpp>

#include "demo/demo.h"

namespace kgpu::cli {

struct DemoCliOptions {
    demo::Options demo;
    int recovery_period_s = 3;
};

CLI::App* add_demo_command(CLI::App& app, DemoCliOptions& opts);

// Exit code: 0 every step passed, 1 a step failed, 2 usage/setup error, 130/143 interrupted.
int run_demo(const DemoCliOptions& opts);

}  // namespace kgpu::cli
