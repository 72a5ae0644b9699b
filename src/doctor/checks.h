// The doctor's checks, one file per layer (checks_node, checks_nvml, checks_runtime,
// checks_kubelet); doctor.cpp holds their registry (ids, layers, titles, what each needs) and
// runs them in order. Internal to src/doctor.
#pragma once

#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "doctor/doctor.h"
#include "doctor/host.h"
#include "common/files.h"
#include "inventory/node.h"
#include "nvml/device.h"
#include "nvml/library.h"
#include "runtime/containerd_settings.h"

namespace kgpu::doctor::checks {

namespace fs = std::filesystem;

// Which check is running and what it declared; Facts report each use to it.
struct Tracker {
    std::string current;                // the running check's id
    std::vector<std::string> declared;  // what it needs or reads, with what those need, transitively
    std::vector<std::string> undeclared;  // "<check> reads|writes <producer>'s result": bugs, tests keep it empty

    void use(std::string_view producer, bool write) {
        if (producer == current) return;
        if (!write && std::find(declared.begin(), declared.end(), producer) != declared.end()) return;
        undeclared.push_back(fmt::format("{} {} {}'s result", current, write ? "writes" : "reads", producer));
    }
};

// A result one check (its producer) stores for later ones. Only the producer writes it; a check
// reads it only when it declares the producer in its needs or reads (registry in doctor.cpp), so
// the registry's order cannot silently change what a check sees: the registry test checks that
// every producer runs before the checks that declare it, and every doctor test that no check
// uses a result it did not declare (Report::undeclared_uses).
template <class T>
class Fact {
public:
    Fact(Tracker& tracker, const char* producer) : tracker_(tracker), producer_(producer) {}
    const T& get() const {
        tracker_.use(producer_, false);
        return value_;
    }
    T& set() {
        tracker_.use(producer_, true);
        return value_;
    }

private:
    Tracker& tracker_;
    const char* producer_;
    T value_{};
};

// What the checks found so far.
struct State {
    State(const Options& o, fs::path r) : opt(o), root(std::move(r)) {}
    State(const State&) = delete;
    State& operator=(const State&) = delete;

    const Options& opt;
    fs::path root;
    Tracker tracker;
    // Read from the host on first use by whichever check asks first (read_modules).
    std::vector<std::string> modules;
    bool modules_read = false;
    std::string kernel_release;

    Fact<std::vector<std::string>> pci_gpus{tracker, "hardware.pci"};  // sysfs bus ids of NVIDIA display/3D functions
    Fact<std::shared_ptr<const nvml::Library>> lib{tracker, "nvml.load"};
    Fact<std::optional<nvml::Session>> session{tracker, "nvml.init"};
    Fact<std::optional<inventory::Node>> node{tracker, "nvml.devices"};
    Fact<std::vector<std::optional<nvml::Device>>> devices{tracker, "nvml.devices"};  // by GPU index; empty: unreachable
    Fact<std::optional<runtime::ContainerdSettings>> containerd{tracker, "runtime.containerd"};

    fs::path host(const fs::path& p) const { return files::under_root(root, p); }
    bool module_loaded(std::string_view m) const {
        return std::find(modules.begin(), modules.end(), m) != modules.end();
    }
};

inline void set(CheckResult& r, Status s, std::string fix = {}) {
    if (s == Status::skipped) {
        r.status = Status::skipped;
        return;
    }
    // Never downgrade: fail > warn > ok.
    auto rank = [](Status x) { return x == Status::fail ? 3 : x == Status::warn ? 2 : x == Status::skipped ? 0 : 1; };
    if (rank(s) >= rank(r.status)) r.status = s;
    if (!fix.empty()) r.fix += (r.fix.empty() ? "" : "\n") + fix;
}

// The entries of `dir`, for a check that looks through it. A folder that is missing or cannot be
// listed is said so in the evidence (files::entries' message names it and why), never read as an
// empty one without a word: the cause a check then reports would be the wrong one.
inline std::vector<fs::directory_entry> entries_noted(const fs::path& dir, CheckResult& r) {
    auto listed = files::entries(dir);
    if (listed) return std::move(*listed);
    note(r, "{}", listed.error().message);
    return {};
}

struct Check {
    std::string id;
    Layer layer;
    std::string title;
    std::vector<std::string> needs;  // checks that must have passed (else this one is skipped)
    std::function<void(State&, CheckResult&)> run;
    std::vector<std::string> reads = {};  // checks whose results it reads whether or not they passed
};

// checks_node.cpp: the node: PCI functions, the kernel log, the driver's modules, version and device nodes.
void check_pci(State& s, CheckResult& r);
void check_xid(State& s, CheckResult& r);
void check_modules(State& s, CheckResult& r);
void check_nouveau(State& s, CheckResult& r);
void check_version(State& s, CheckResult& r);
void check_kernel_module(State& s, CheckResult& r);
void check_build_tools(State& s, CheckResult& r);
void check_device_nodes(State& s, CheckResult& r);
void check_dev_char(State& s, CheckResult& r);

// checks_nvml.cpp: NVML: the library, its devices and their state.
void check_nvml_load(State& s, CheckResult& r);
void check_nvml_init(State& s, CheckResult& r);
void check_nvml_version_match(State& s, CheckResult& r);
void check_nvml_devices(State& s, CheckResult& r);
void check_gpu_reachable(State& s, CheckResult& r);
void check_persistence(State& s, CheckResult& r);
void check_ecc(State& s, CheckResult& r);
void check_remapped_rows(State& s, CheckResult& r);
void check_retired_pages(State& s, CheckResult& r);
void check_recovery_action(State& s, CheckResult& r);
void check_mig_pending(State& s, CheckResult& r);
void check_cuda_compat(State& s, CheckResult& r);
void check_gpu_memory(State& s, CheckResult& r);

// checks_runtime.cpp: the container runtime: containerd, CDI specs, the container toolkit.
void check_containerd(State& s, CheckResult& r);
void check_cdi_spec(State& s, CheckResult& r);
void check_cdi_names(State& s, CheckResult& r);
void check_toolkit(State& s, CheckResult& r);

// checks_kubelet.cpp: the device plugin, the kubelet and the API server.
void check_dp_config(State& s, CheckResult& r);
void check_dp_dir(State& s, CheckResult& r);
void check_kubelet_socket(State& s, CheckResult& r);
void check_plugin_socket(State& s, CheckResult& r);
void check_one_plugin_per_resource(State& s, CheckResult& r);
void check_allocatable(State& s, CheckResult& r);
void check_pod_resources(State& s, CheckResult& r);
void check_api(State& s, CheckResult& r);

}  // namespace kgpu::doctor::checks
