#include "cli/app.h"

#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/info.h"
#include "common/log.h"

#ifndef KGPU_VERSION
#define KGPU_VERSION "0.0.0"
#endif

namespace kgpu::cli {

int run(int argc, char** argv) {
    CLI::App app{"kgpu: the node side of NVIDIA GPUs in Kubernetes"};
    app.require_subcommand(1);
    app.set_version_flag("--version", KGPU_VERSION);
    std::string log_level = "info";
    app.add_option("--log-level", log_level, "debug, info, warn, error or off")->envname("KGPU_LOG_LEVEL");

    InfoOptions info;
    add_info_command(app, info);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        int code = app.exit(e);  // prints help / version / the error
        return code == 0 ? 0 : 2;
    }
    log::Level level;
    if (!log::parse_level(log_level, level)) {
        std::cerr << "kgpu: --log-level: expected debug, info, warn, error or off, got '" << log_level << "'\n";
        return 2;
    }
    log::set_level(level);

    if (app.got_subcommand("info")) return run_info(info);
    return 2;
}

}  // namespace kgpu::cli
