#pragma once

namespace kgpu::cli {

// Parses argv, runs the chosen subcommand, returns the process exit code:
// 0 ok, 1 runtime failure, 2 usage error.
int run(int argc, char** argv);

}  // namespace kgpu::cli
