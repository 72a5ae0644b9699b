#include "cli/demo.h"

#include <iostream>

namespace kgpu::cli {

CLI::App* add_demo_command(CLI::App& app, DemoCliOptions& o) {
    auto* cmd = app.add_subcommand(
        "demo", "Run the whole chain on a simulated 8-GPU node: device plugin, kubelet emulator, allocation, an XID, "
                "metrics with pod labels, doctor (no GPU or root needed)");
    cmd->add_option("--node", o.demo.node,
                    "Simulated node: a fixture file, or a fixture name such as dgx-h100 or pcie-nvlink-pairs "
                    "(default: dgx-h100.yaml next to the binary)");
    cmd->add_option("--nvml-library", o.demo.nvml_library,
                    "The simulated libnvidia-ml.so.1 (default: <dir of kgpu>/sim/ or <prefix>/lib/kgpu/)");
    cmd->add_flag("--keep", o.demo.keep, "Keep the work dir (logs, fake host, scraped metrics) for inspection");
    cmd->add_flag("--mps", o.demo.mps,
                  "Walk MPS sharing instead: the MPS control daemon, two pods sharing one GPU with their limits, "
                  "the daemon killed and restarted, kgpu_mps_* metrics");
    cmd->add_option("--recovery-period", o.recovery_period_s,
                    "Seconds a GPU stays Unhealthy after the recoverable XID (device plugin --health-recovery-period)")
        ->capture_default_str()
        ->check(CLI::Range(1, 30));
    return cmd;
}

int run_demo(const DemoCliOptions& o) {
    demo::Options opts = o.demo;
    opts.recovery_period = std::chrono::seconds(o.recovery_period_s);
    return demo::run(opts, std::cout);
}

}  // namespace kgpu::cli
