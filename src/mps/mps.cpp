#include "mps/mps.h"

#include <unistd.h>

#include <algorithm>

#include "cdi/driver_files.h"
#include "common/files.h"
#include "common/process.h"
#include "common/strings.h"

namespace kgpu::mps {

namespace fs = std::filesystem;

std::string container_pipe_dir(std::string_view resource) {
    return (fs::path(std::string(kContainerRoot)) / resource / "pipe").string();
}

unsigned max_clients(const SharedGpu& gpu) { return gpu.cc_major >= 7 ? 48 : 16; }

Status validate(const DaemonSpec& spec) {
    if (spec.gpus.empty()) return fail(Code::invalid_argument, "MPS resource {}: no GPUs to share", spec.resource);
    for (const auto& g : spec.gpus) {
        if (g.mig)
            return fail(Code::not_supported, "MPS resource {}: MPS sharing is not supported for MIG devices ({})",
                        spec.resource, g.uuid);
        if (g.replicas < 2)
            return fail(Code::invalid_argument, "MPS resource {}: GPU {}: replicas must be at least 2, got {}",
                        spec.resource, g.index, g.replicas);
        if (g.replicas > max_clients(g))
            return fail(Code::invalid_argument,
                        "MPS resource {}: GPU {} (compute capability {}.{}): maximum allowed replicas exceeded: {} > {}",
                        spec.resource, g.index, g.cc_major, g.cc_minor, g.replicas, max_clients(g));
    }
    return {};
}

unsigned active_thread_percentage(const DaemonSpec& spec) {
    if (spec.gpus.empty()) return 100;
    unsigned devices = 0;
    for (const auto& g : spec.gpus) devices += g.replicas;
    const unsigned per_gpu = std::max(1u, devices / static_cast<unsigned>(spec.gpus.size()));
    return 100 / per_gpu;
}

std::vector<PinnedLimit> pinned_memory_limits(const DaemonSpec& spec) {
    std::vector<PinnedLimit> out;
    for (const auto& g : spec.gpus) {
        if (g.memory_mib == 0 || g.replicas == 0) continue;
        out.push_back({g.index, g.memory_mib / g.replicas, g.uuid});
    }
    std::sort(out.begin(), out.end(), [](const PinnedLimit& a, const PinnedLimit& b) { return a.index < b.index; });
    return out;
}

std::vector<std::string> setup_commands(const DaemonSpec& spec) {
    std::vector<std::string> out;
    for (const auto& l : pinned_memory_limits(spec))
        out.push_back(fmt::format("set_default_device_pinned_mem_limit {} {}", l.index, l.value()));
    out.push_back(fmt::format("set_default_active_thread_percentage {}", active_thread_percentage(spec)));
    return out;
}

Result<std::string> find_control_binary(const std::string& explicit_path, const fs::path& driver_root) {
    if (!explicit_path.empty()) {
        std::error_code ec;
        if (!fs::is_regular_file(explicit_path, ec) || ::access(explicit_path.c_str(), X_OK) != 0)
            return fail(Code::not_found, "MPS control binary {} (--mps-control-binary / KGPU_MPS_CONTROL) is not an executable file",
                        explicit_path);
        return explicit_path;
    }
    for (const auto& f : cdi::find_binaries(driver_root))
        if (fs::path(f.path).filename() == kControlBinary && ::access(f.host_path.c_str(), X_OK) == 0) return f.host_path;
    std::string tried;
    for (const char* dir : {"/usr/bin", "/usr/sbin", "/bin", "/sbin"})
        tried += (tried.empty() ? "" : ", ") + files::under_root(driver_root, fs::path(dir) / kControlBinary).string();
    return fail(Code::not_found,
                "no executable {} under the driver root {} (tried {}); install the driver's MPS binaries, give "
                "the NVIDIA container runtime the compute capability, or name it with --mps-control-binary / KGPU_MPS_CONTROL",
                kControlBinary, driver_root.string(), tried);
}

Control::Control(std::string binary, fs::path pipe_dir, fs::path log_dir, std::chrono::milliseconds timeout)
    : binary_(std::move(binary)), pipe_dir_(std::move(pipe_dir)), log_dir_(std::move(log_dir)), timeout_(timeout) {}

std::map<std::string, std::string> Control::env() const {
    return {{"CUDA_MPS_PIPE_DIRECTORY", pipe_dir_.string()}, {"CUDA_MPS_LOG_DIRECTORY", log_dir_.string()}};
}

namespace {

// The client's own words, for an error message: stderr, else stdout, on one line.
std::string said(const process::Completed& c) {
    std::string text(strings::trim(c.err.empty() ? c.out : c.err));
    std::replace(text.begin(), text.end(), '\n', ' ');
    return text.empty() ? "no output" : text;
}

}  // namespace

Result<std::string> Control::send(std::string_view command) const {
    process::RunOptions opts;
    opts.argv = {binary_};
    opts.set_env = env();
    opts.stdin_text = std::string(command) + "\n";
    opts.timeout = timeout_;
    auto done = process::run(opts);
    if (!done) {
        if (done.error().code == Code::timeout)
            return fail(Code::timeout, "MPS control daemon at {} did not answer '{}' within {} ms", pipe_dir_.string(),
                        command, timeout_.count());
        return std::unexpected(done.error());
    }
    if (done->exit_code != 0)
        return fail(Code::unavailable, "'{}' to the MPS control daemon at {} failed (exit code {}): {}", command,
                    pipe_dir_.string(), done->exit_code, said(*done));
    return std::string(strings::trim(done->out));
}

Status Control::start_daemon() const {
    process::RunOptions opts;
    opts.argv = {binary_, "-d"};
    opts.set_env = env();
    opts.timeout = timeout_;
    auto done = process::run(opts);
    if (!done) return std::unexpected(done.error().context(fmt::format("starting the MPS control daemon ({} -d)", binary_)));
    if (done->exit_code != 0)
        return fail(Code::unavailable, "starting the MPS control daemon ({} -d, pipe directory {}) failed (exit code {}): {}",
                    binary_, pipe_dir_.string(), done->exit_code, said(*done));
    return {};
}

}  // namespace kgpu::mps
