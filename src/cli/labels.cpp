#include "cli/labels.h"

#include <charconv>
#include <chrono>
#include <iostream>
#include <thread>

#include "common/files.h"
#include "common/log.h"
#include "inventory/discovery.h"
#include "labels/config.h"
#include "labels/labels.h"

namespace kgpu::cli {

void add_labels_command(CLI::App& app, LabelsOptions& opts) {
    auto* cmd = app.add_subcommand("labels", "Write gpu-feature-discovery compatible node labels as an NFD feature file");
    add_nvml_options(*cmd, opts.nvml);
    cmd->add_option("--output-file,-o", opts.output_file, "The NFD feature file to write atomically ('-': stdout)")
        ->envname("GFD_OUTPUT_FILE")
        ->capture_default_str();
    cmd->add_flag("--oneshot", opts.oneshot, "Write the labels once and exit")->envname("GFD_ONESHOT");
    cmd->add_option("--sleep-interval", opts.sleep_interval, "Time between two label refreshes (e.g. 60s, 5m)")
        ->envname("GFD_SLEEP_INTERVAL")
        ->capture_default_str();
    cmd->add_option("--mig-strategy", opts.mig_strategy, "none, single or mixed (default: the config file's, else none)")
        ->envname("MIG_STRATEGY");
    cmd->add_option("--config-file", opts.config_file, "The device plugin's config file (sharing and MIG strategy)")
        ->envname("CONFIG_FILE");
    cmd->add_option("--sysfs-root", opts.sysfs_root, "Where the host's /sys is (DMI product name)")->capture_default_str();
}

Result<unsigned> parse_interval(std::string_view text) {
    unsigned value = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    std::string_view unit(ptr, static_cast<size_t>(text.data() + text.size() - ptr));
    unsigned scale = 0;
    if (unit.empty() || unit == "s") scale = 1;
    else if (unit == "m") scale = 60;
    else if (unit == "h") scale = 3600;
    if (ec != std::errc{} || ptr == text.data() || scale == 0 || value == 0)
        return fail(Code::invalid_argument, "--sleep-interval '{}': expected a positive duration such as 60s, 5m or 1h", text);
    return value * scale;
}

namespace {

Status write_labels_once(const LabelsOptions& opts, const labels::Options& lopts) {
    auto session = open_nvml(opts.nvml);
    if (!session) return std::unexpected(session.error());
    inventory::DiscoveryOptions dopts;
    dopts.sysfs_root = opts.sysfs_root;
    dopts.topology = false;
    auto node = inventory::discover(*session, dopts);
    if (!node) return std::unexpected(node.error());
    auto labels = labels::generate(*node, lopts);
    if (!labels) return std::unexpected(labels.error());
    const std::string text = labels::to_feature_file(*labels);
    if (opts.output_file == "-") {
        std::cout << text << std::flush;
        return {};
    }
    if (auto st = files::write_atomic(opts.output_file, text, 0644); !st) return st;
    log::info("labels: wrote {} labels to {}", labels->size(), opts.output_file);
    return {};
}

}  // namespace

int run_labels(const LabelsOptions& opts) {
    labels::Options lopts;
    if (!opts.config_file.empty()) {
        auto cfg = labels::read_plugin_config(opts.config_file);
        if (!cfg) {
            std::cerr << "kgpu labels: " << cfg.error().message << "\n";
            return 2;
        }
        lopts.sharing = cfg->sharing;
        if (cfg->mig_strategy) lopts.mig_strategy = *cfg->mig_strategy;
    }
    if (!opts.mig_strategy.empty()) {
        auto s = labels::parse_mig_strategy(opts.mig_strategy);
        if (!s) {
            std::cerr << "kgpu labels: --mig-strategy: " << s.error().message << "\n";
            return 2;
        }
        lopts.mig_strategy = *s;
    }
    auto interval = parse_interval(opts.sleep_interval);
    if (!interval) {
        std::cerr << "kgpu labels: " << interval.error().message << "\n";
        return 2;
    }
    if (auto machine = files::read_line(std::filesystem::path(opts.sysfs_root) / "class/dmi/id/product_name"); machine)
        lopts.machine = *machine;

    for (;;) {
        auto st = write_labels_once(opts, lopts);
        if (!st) {
            if (opts.oneshot) {
                std::cerr << "kgpu labels: " << st.error().message << "\n";
                return 1;
            }
            log::error("labels: {} (the previous labels stay; retrying in {} s)", st.error().message, *interval);
        }
        if (opts.oneshot) return 0;
        std::this_thread::sleep_for(std::chrono::seconds(*interval));
    }
}

}  // namespace kgpu::cli
