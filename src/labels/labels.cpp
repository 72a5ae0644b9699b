#include "labels/labels.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/strings.h"

namespace kgpu::labels {

namespace {

bool alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// GFD's sanitise(): drop every character but [A-Za-z0-9-_. ], then join the blank-separated
// words with '-'.
std::string gfd_sanitise(std::string_view in) {
    std::string kept;
    for (char c : in)
        if (alnum(c) || c == '-' || c == '_' || c == '.' || c == ' ') kept.push_back(c);
    std::string out;
    for (auto word : strings::split(kept, ' ')) {
        if (word.empty()) continue;
        if (!out.empty()) out.push_back('-');
        out.append(word);
    }
    return out;
}

// Kubernetes' rule for label values (at most 63 characters, alphanumeric at both ends); GFD's
// values already satisfy it for every real product name.
std::string label_value(std::string s) {
    auto trim = [](std::string& v) {
        while (!v.empty() && !alnum(v.back())) v.pop_back();
        size_t start = 0;
        while (start < v.size() && !alnum(v[start])) ++start;
        v.erase(0, start);
    };
    trim(s);
    if (s.size() > 63) {
        s.resize(63);
        trim(s);
    }
    return s;
}

const std::string kGpuResource = "nvidia.com/gpu";

// GFD's resourceLabeler: the labels "<resource>.<suffix>" of one resource. `sharing` null means
// sharing does not apply (MIG-enabled GPUs listed as whole GPUs): replicas 0, no -SHARED.
class Resource {
public:
    Resource(std::string name, const Sharing* sharing) : name_(std::move(name)), sharing_(sharing) {}

    void set(Labels& out, std::string_view suffix, std::string value) const {
        out[fmt::format("{}.{}", name_, suffix)] = std::move(value);
    }
    void set(Labels& out, std::string_view suffix, std::uint64_t value) const { set(out, suffix, std::to_string(value)); }

    unsigned replicas() const {
        if (!sharing_) return 0;
        const SharedResource* r = entry();
        return r && r->replicas > 0 ? r->replicas : 1;
    }

    // "<part>-<part>…" of the sanitised parts, with "-SHARED" when the resource has replicas
    // under its own name (the pod cannot tell from the resource name that the GPU is shared).
    std::string product(std::initializer_list<std::string_view> parts) const {
        std::string p;
        for (auto part : parts) {
            std::string s = gfd_sanitise(part);
            if (s.empty()) continue;
            if (!p.empty()) p.push_back('-');
            p += s;
        }
        const SharedResource* r = entry();
        if (!p.empty() && r && r->replicas > 1 && !r->renamed) p += "-SHARED";
        return label_value(std::move(p));
    }

    // product, count, replicas and sharing-strategy.
    void base(Labels& out, std::uint64_t count, std::initializer_list<std::string_view> parts) const {
        const unsigned n = replicas();
        set(out, "product", product(parts));
        set(out, "count", count);
        set(out, "replicas", n);
        set(out, "sharing-strategy", sharing_ && n > 1 ? sharing_->strategy : "none");
    }

private:
    const SharedResource* entry() const {
        if (!sharing_) return nullptr;
        auto it = sharing_->resources.find(name_);
        return it == sharing_->resources.end() ? nullptr : &it->second;
    }

    std::string name_;
    const Sharing* sharing_;
};

// GFD's labels for whole GPUs of one model: the base labels, memory (when known) and the
// architecture (when the compute capability is known).
void whole_gpu_labels(Labels& out, const inventory::Gpu& gpu, std::uint64_t count, const Sharing* sharing) {
    Resource r(kGpuResource, sharing);
    r.base(out, count, {gpu.name});
    if (gpu.memory_total_mib != 0) r.set(out, "memory", gpu.memory_total_mib);
    if (gpu.cc_major != 0) {
        r.set(out, "family", std::string(arch_family(gpu.cc_major, gpu.cc_minor)));
        r.set(out, "compute.major", static_cast<std::uint64_t>(gpu.cc_major));
        r.set(out, "compute.minor", static_cast<std::uint64_t>(gpu.cc_minor));
    }
}

// The MIG device's name as GFD spells it in resource names: the profile with '+' as '.'
// ("1g.10gb+me" -> "1g.10gb.me").
std::string mig_name(const inventory::MigDevice& m) {
    std::string n = m.profile;
    std::replace(n.begin(), n.end(), '+', '.');
    return n;
}

// GFD's labels for the MIG devices of one profile, served as `resource`.
void mig_labels(Labels& out, const std::string& resource, const Sharing& sharing, const inventory::Gpu& parent,
                const inventory::MigDevice& m, std::uint64_t count) {
    Resource r(resource, &sharing);
    r.base(out, count, {parent.name, "MIG", mig_name(m)});
    r.set(out, "memory", m.memory_mib);
    r.set(out, "multiprocessors", m.sm_count);
    r.set(out, "slices.gi", m.slices);
    r.set(out, "slices.ci", m.compute_slices);
    r.set(out, "engines.copy", m.copy_engines);
    r.set(out, "engines.decoder", m.decoders);
    r.set(out, "engines.encoder", m.encoders);
    r.set(out, "engines.jpeg", m.jpeg_decoders);
    r.set(out, "engines.ofa", m.optical_flow_accelerators);
}

// What `single` writes over the gpu.* labels when the node cannot serve it.
void invalid_single(Generated& g, const inventory::Gpu& first_mig_gpu, std::string_view reason) {
    g.warnings.push_back(fmt::format("invalid configuration for mig-strategy=single: {}", reason));
    Resource r(kGpuResource, nullptr);
    r.set(g.labels, "product", r.product({first_mig_gpu.name, "MIG", "INVALID"}));
    r.set(g.labels, "count", 0);
    r.set(g.labels, "replicas", 0);
    r.set(g.labels, "sharing-strategy", "");
    r.set(g.labels, "memory", 0);
}

bool mig_on(const inventory::Gpu* g) { return g->mig_mode == inventory::MigMode::enabled; }

// MIG devices of the node grouped by name, in discovery order: (first device, its GPU, count).
struct MigGroup {
    const inventory::MigDevice* device;
    const inventory::Gpu* parent;
    std::uint64_t count;
};
std::vector<std::pair<std::string, MigGroup>> mig_groups(const std::vector<const inventory::Gpu*>& gpus) {
    std::vector<std::pair<std::string, MigGroup>> groups;
    for (const auto* g : gpus) {
        if (!mig_on(g)) continue;
        for (const auto& m : g->mig_devices) {
            const std::string name = mig_name(m);
            auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& e) { return e.first == name; });
            if (it == groups.end()) groups.push_back({name, MigGroup{&m, g, 1}});
            else ++it->second.count;
        }
    }
    return groups;
}

// gpu.count, product, memory, family, …: GFD's newGPULabelers. Every GPU counts toward its
// model; MIG-enabled models are labelled first without sharing, whole GPUs of a model override
// them with sharing applied. Within each group the first GPU's model wins.
void resource_labels(Generated& g, const std::vector<const inventory::Gpu*>& gpus, const Sharing& sharing) {
    std::map<std::string, std::uint64_t> counts;
    std::vector<const inventory::Gpu*> mig_models, whole_models;  // first GPU of each model
    for (const auto* gpu : gpus) {
        ++counts[gpu->name];
        auto& models = mig_on(gpu) ? mig_models : whole_models;
        if (std::none_of(models.begin(), models.end(), [&](const auto* m) { return m->name == gpu->name; }))
            models.push_back(gpu);
    }
    if (counts.size() > 1) {
        std::string names;
        for (const auto& [name, n] : counts) names += (names.empty() ? "" : ", ") + name;
        g.warnings.push_back(fmt::format("multiple device types detected: {}", names));
    }
    for (auto it = mig_models.rbegin(); it != mig_models.rend(); ++it)
        whole_gpu_labels(g.labels, **it, counts[(*it)->name], nullptr);
    for (auto it = whole_models.rbegin(); it != whole_models.rend(); ++it)
        whole_gpu_labels(g.labels, **it, counts[(*it)->name], &sharing);
}

void single_labels(Generated& g, const std::vector<const inventory::Gpu*>& gpus, const Sharing& sharing) {
    std::vector<const inventory::Gpu*> enabled;
    for (const auto* gpu : gpus)
        if (mig_on(gpu)) enabled.push_back(gpu);
    if (enabled.empty()) return;  // no MIG: the same as `none`
    if (std::any_of(enabled.begin(), enabled.end(), [](const auto* gpu) { return gpu->mig_devices.empty(); }))
        return invalid_single(g, *enabled.front(), "at least one MIG device is enabled but empty");
    if (enabled.size() != gpus.size())
        return invalid_single(g, *enabled.front(), "devices with MIG enabled and disabled detected");
    auto groups = mig_groups(gpus);
    if (groups.size() != 1)
        return invalid_single(g, *enabled.front(), "more than one MIG device type present on node");
    const MigGroup& m = groups.front().second;
    mig_labels(g.labels, kGpuResource, sharing, *m.parent, *m.device, m.count);
}

// gpu.mode from the GPUs' PCI class: all 3D controllers "compute", all VGA "graphics", anything
// else (unreadable, mixed, other) "unknown".
std::string gpu_mode(const std::vector<const inventory::Gpu*>& gpus) {
    constexpr std::uint32_t kVga = 0x030000, k3d = 0x030200;
    std::optional<std::uint32_t> cls;
    for (const auto* g : gpus) {
        if (!g->pci_class || (cls && *cls != *g->pci_class)) return "unknown";
        cls = g->pci_class;
    }
    if (cls == k3d) return "compute";
    if (cls == kVga) return "graphics";
    return "unknown";
}

Status version_labels(Labels& out, const inventory::Node& node, std::vector<std::string>& warnings) {
    auto parts = strings::split(node.driver_version, '.');
    if (parts.size() < 2 || parts.size() > 3)
        return fail(Code::invalid_argument, "driver version '{}' does not match X.Y[.Z]", node.driver_version);
    const std::string major(parts[0]), minor(parts[1]), rev = parts.size() > 2 ? std::string(parts[2]) : "";
    // GFD writes both spellings: cuda.driver.* is its deprecated one.
    out["nvidia.com/cuda.driver.major"] = major;
    out["nvidia.com/cuda.driver.minor"] = minor;
    out["nvidia.com/cuda.driver.rev"] = rev;
    out["nvidia.com/cuda.driver-version.major"] = major;
    out["nvidia.com/cuda.driver-version.minor"] = minor;
    out["nvidia.com/cuda.driver-version.revision"] = rev;
    out["nvidia.com/cuda.driver-version.full"] = node.driver_version;
    if (node.cuda_driver_version <= 0) {
        warnings.push_back("the driver does not report its CUDA version: no cuda.runtime labels");
        return {};
    }
    const std::string cmajor = std::to_string(node.cuda_driver_version / 1000);
    const std::string cminor = std::to_string(node.cuda_driver_version % 1000 / 10);
    out["nvidia.com/cuda.runtime.major"] = cmajor;
    out["nvidia.com/cuda.runtime.minor"] = cminor;
    out["nvidia.com/cuda.runtime-version.major"] = cmajor;
    out["nvidia.com/cuda.runtime-version.minor"] = cminor;
    out["nvidia.com/cuda.runtime-version.full"] = cmajor + "." + cminor;
    return {};
}

// GFD's vgpuLabeler. The values are sanitised like every other (GFD writes the capability's
// bytes as they are; NFD would drop a value Kubernetes rejects).
Status vgpu_labels(Labels& out, const std::vector<inventory::VgpuDevice>& devices) {
    out["nvidia.com/vgpu.present"] = devices.empty() ? "false" : "true";
    for (const auto& d : devices) {
        if (!d.host_driver)
            return fail(Code::parse,
                        "vGPU {}: its vendor-specific capability (\"VF\") has no host driver version record", d.address);
        out["nvidia.com/vgpu.host-driver-version"] = label_value(gfd_sanitise(d.host_driver->version));
        out["nvidia.com/vgpu.host-driver-branch"] = label_value(gfd_sanitise(d.host_driver->branch));
    }
    return {};
}

}  // namespace

std::string sanitize_value(std::string_view value) { return label_value(gfd_sanitise(value)); }

std::string_view arch_family(int major, int minor) {
    switch (major) {
        case 1: return "tesla";
        case 2: return "fermi";
        case 3: return "kepler";
        case 5: return "maxwell";
        case 6: return "pascal";
        case 7: return minor < 5 ? "volta" : "turing";
        case 8: return minor < 9 ? "ampere" : "ada-lovelace";
        case 9: return "hopper";
        case 10:
        case 12: return "blackwell";
        case 13: return "rubin";
        default: return "undefined";
    }
}

Result<Generated> generate(const inventory::Node& node, const Options& o) {
    Generated g;
    Labels& out = g.labels;
    if (o.timestamp) out["nvidia.com/gfd.timestamp"] = std::to_string(*o.timestamp);
    std::vector<const inventory::Gpu*> gpus;
    for (const auto& gpu : node.gpus)
        if (!gpu.lost && !gpu.uuid.empty()) gpus.push_back(&gpu);
    // kgpu's addition (docs/labels.md), derived as the GPU Operator derives its label of that name:
    // from the PCI bus, so a failing driver does not take the node's GPU stack away.
    const std::size_t on_bus = o.pci_gpus ? o.pci_gpus->size() : 0;
    out["nvidia.com/gpu.present"] = gpus.empty() && on_bus == 0 ? "false" : "true";
    if (gpus.empty() && on_bus > 0)
        g.warnings.push_back(fmt::format(
            "NVML reports no GPU but the PCI bus has {} NVIDIA GPU(s) ({}): nvidia.com/gpu.present=true as the GPU "
            "Operator sets it, so the node keeps its GPU stack; no device labels until the driver reports them (run "
            "`kgpu doctor` on this node)",
            on_bus, fmt::join(*o.pci_gpus, ", ")));
    if (o.vgpu)
        if (auto st = vgpu_labels(out, *o.vgpu); !st) return std::unexpected(st.error());
    if (gpus.empty()) return g;  // GFD: no devices, no device labels

    out["nvidia.com/gpu.machine"] = sanitize_value(o.machine);
    if (auto st = version_labels(out, node, g.warnings); !st) return std::unexpected(st.error());

    const bool capable = std::any_of(gpus.begin(), gpus.end(),
                                     [](const auto* gpu) { return gpu->mig_mode != inventory::MigMode::unsupported; });
    out["nvidia.com/mig.capable"] = capable ? "true" : "false";

    bool mps = false;
    if (o.sharing.strategy == "mps") {
        for (const auto* gpu : gpus)
            if (mig_on(gpu))
                return fail(Code::invalid_argument,
                            "MPS sharing is not supported for MIG devices: GPU {} has MIG enabled", gpu->index);
        mps = true;
    }
    out["nvidia.com/mps.capable"] = mps ? "true" : "false";

    resource_labels(g, gpus, o.sharing);
    if (o.mig_strategy != MigStrategy::none) out["nvidia.com/mig.strategy"] = std::string(to_string(o.mig_strategy));
    if (o.mig_strategy == MigStrategy::single) single_labels(g, gpus, o.sharing);
    if (o.mig_strategy == MigStrategy::mixed)
        for (const auto& [name, m] : mig_groups(gpus))
            mig_labels(out, "nvidia.com/mig-" + name, o.sharing, *m.parent, *m.device, m.count);

    out["nvidia.com/gpu.mode"] = gpu_mode(gpus);
    return g;
}

std::string to_feature_file(const Labels& labels) {
    std::string out;
    for (const auto& [k, v] : labels) out += fmt::format("{}={}\n", k, v);
    return out;
}

}  // namespace kgpu::labels
