#include "cli/runtime.h"

#include <sys/stat.h>

#include <iostream>
#include <optional>

#include "common/files.h"
#include "runtime/containerd.h"
#include "runtime/diff.h"

namespace kgpu::cli {

CLI::App* add_runtime_command(CLI::App& app, RuntimeOptions& opts) {
    auto* rt = app.add_subcommand("runtime", "Container runtime configuration");
    rt->require_subcommand(1);
    auto* c = rt->add_subcommand("configure", "Add the NVIDIA runtime (and CDI) to containerd's config");
    c->add_option("--runtime", opts.runtime, "The container runtime to configure")
        ->check(CLI::IsMember({"containerd"}))
        ->capture_default_str();
    c->add_option("--config", opts.config, "The runtime's config file, edited in place")->capture_default_str();
    c->add_option("--nvidia-runtime-name", opts.runtime_name, "Name of the runtime to add")->capture_default_str();
    c->add_option("--runtime-path,--nvidia-runtime-path", opts.runtime_path, "The runtime binary (BinaryName)")
        ->capture_default_str();
    c->add_flag("--set-as-default", opts.set_as_default, "Make it containerd's default runtime");
    c->add_flag("--enable-cdi,--cdi.enabled", opts.enable_cdi, "Enable CDI in containerd's CRI plugin");
    c->add_option("--drop-in", opts.drop_in,
                  "Write the runtime to this file instead and add it to the config's imports");
    c->add_flag("--dry-run", opts.dry_run, "Print the changes as a diff; write nothing");
    return rt;
}

namespace {

struct Original {
    std::string text;
    bool exists = false;
    unsigned mode = 0644;
};

Result<Original> read_original(const std::string& path) {
    auto text = files::read(path);
    if (text) {
        struct stat st {};
        unsigned mode = ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0644;
        return Original{*text, true, mode};
    }
    if (text.error().code == Code::not_found) return Original{};
    return std::unexpected(text.error());
}

// Backup (when the file existed) then the atomic replacement.
Status replace(const std::string& path, const Original& before, const std::string& after) {
    if (before.exists) {
        if (auto st = files::write_atomic(path + ".bak", before.text, before.mode); !st) return st;
    }
    return files::write_atomic(path, after, before.mode);
}

}  // namespace

int run_runtime_configure(const RuntimeOptions& opts) {
    runtime::ContainerdOptions co;
    co.runtime_name = opts.runtime_name;
    co.runtime_path = opts.runtime_path;
    co.set_as_default = opts.set_as_default;
    co.enable_cdi = opts.enable_cdi;

    auto main = read_original(opts.config);
    if (!main) {
        std::cerr << "kgpu runtime configure: " << main.error().message << "\n";
        return 1;
    }
    auto report = [](const Error& e) {
        std::cerr << "kgpu runtime configure: " << e.message << "\n";
        return e.code == Code::invalid_argument && e.message.find("--") != std::string::npos ? 2 : 1;
    };

    std::string new_main;
    std::optional<std::pair<Original, std::string>> drop_in;
    if (opts.drop_in.empty()) {
        auto edited = runtime::configure(main->text, opts.config, co);
        if (!edited) return report(edited.error());
        new_main = edited->text;
    } else {
        auto edited = runtime::configure_drop_in(main->text, opts.config, opts.drop_in, co);
        if (!edited) return report(edited.error());
        new_main = edited->main.text;
        auto old_drop_in = read_original(opts.drop_in);
        if (!old_drop_in) return report(old_drop_in.error());
        drop_in.emplace(*old_drop_in, edited->drop_in);
    }

    const bool main_changed = new_main != main->text;
    const bool drop_in_changed = drop_in && drop_in->second != drop_in->first.text;
    if (opts.dry_run) {
        std::cout << runtime::unified_diff(main->exists ? main->text : "", new_main, opts.config, opts.config + " (kgpu)");
        if (drop_in)
            std::cout << runtime::unified_diff(drop_in->first.text, drop_in->second, opts.drop_in, opts.drop_in + " (kgpu)");
        if (!main_changed && !drop_in_changed) std::cerr << "kgpu runtime configure: already configured; nothing to change\n";
        return 0;
    }
    if (!main_changed && !drop_in_changed) {
        std::cerr << "kgpu runtime configure: " << opts.config << " is already configured; nothing changed\n";
        return 0;
    }
    if (drop_in_changed) {
        if (auto st = files::create_directories(std::filesystem::path(opts.drop_in).parent_path(), 0755); !st)
            return report(st.error());
        if (auto st = replace(opts.drop_in, drop_in->first, drop_in->second); !st) return report(st.error());
    }
    if (main_changed) {
        if (auto st = replace(opts.config, *main, new_main); !st) return report(st.error());
    }
    std::cerr << "kgpu runtime configure: updated " << (drop_in_changed ? opts.drop_in + " and " : "") << opts.config
              << (main->exists ? " (previous version in " + opts.config + ".bak)" : "")
              << ". Restart containerd to apply it: systemctl restart containerd\n";
    return 0;
}

}  // namespace kgpu::cli
