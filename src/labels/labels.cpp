#include "labels/labels.h"

#include <cctype>

#include <fmt/format.h>

#include "common/strings.h"

namespace kgpu::labels {

std::string_view to_string(MigStrategy s) {
    switch (s) {
        case MigStrategy::single: return "single";
        case MigStrategy::mixed: return "mixed";
        case MigStrategy::none: break;
    }
    return "none";
}

Result<MigStrategy> parse_mig_strategy(std::string_view text) {
    if (text == "none") return MigStrategy::none;
    if (text == "single") return MigStrategy::single;
    if (text == "mixed") return MigStrategy::mixed;
    return fail(Code::invalid_argument, "MIG strategy '{}': expected none, single or mixed", text);
}

std::string sanitize_value(std::string_view value) {
    std::string out;
    for (char c : value) {
        const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
        out.push_back(ok ? c : '-');
    }
    auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
    auto trim = [&](std::string& s) {
        while (!s.empty() && !alnum(s.back())) s.pop_back();
        size_t start = 0;
        while (start < s.size() && !alnum(s[start])) ++start;
        s.erase(0, start);
    };
    // Runs of '-' made from spaces and brackets read better as one.
    std::string squeezed;
    for (char c : out)
        if (!(c == '-' && !squeezed.empty() && squeezed.back() == '-')) squeezed.push_back(c);
    trim(squeezed);
    if (squeezed.size() > 63) squeezed.resize(63);
    trim(squeezed);
    return squeezed;
}

namespace {

unsigned replicas_of(const Sharing& s, const std::string& resource) {
    auto it = s.replicas.find(resource);
    return it == s.replicas.end() ? 1 : it->second;
}

std::string sharing_of(const Sharing& s, const std::string& resource) {
    return replicas_of(s, resource) > 1 ? s.strategy : "none";
}

// A product name with "-SHARED" when the resource is shared under its own name (the pod cannot
// tell from the resource name that the GPU is shared).
std::string product(const Sharing& s, const std::string& resource, const std::string& name) {
    std::string p = name;
    if (replicas_of(s, resource) > 1 && !s.rename_by_default) p += "-SHARED";
    return sanitize_value(p);
}

void mig_labels(Labels& out, const std::string& prefix, const Sharing& s, const std::string& resource,
                const inventory::Gpu& gpu, const inventory::MigDevice& m, size_t count) {
    out[prefix + ".count"] = std::to_string(count);
    out[prefix + ".product"] = product(s, resource, gpu.name + "-MIG-" + m.profile);
    out[prefix + ".memory"] = std::to_string(m.memory_mib);
    out[prefix + ".multiprocessors"] = std::to_string(m.sm_count);
    out[prefix + ".slices.gi"] = std::to_string(m.slices);
    out[prefix + ".slices.ci"] = std::to_string(m.slices);  // one compute instance spanning the GI
    out[prefix + ".replicas"] = std::to_string(replicas_of(s, resource));
    out[prefix + ".sharing-strategy"] = sharing_of(s, resource);
}

}  // namespace

Result<Labels> generate(const inventory::Node& node, const Options& o) {
    Labels out;
    std::vector<const inventory::Gpu*> gpus;
    for (const auto& g : node.gpus)
        if (!g.lost && !g.uuid.empty()) gpus.push_back(&g);

    const std::string gpu_resource = "nvidia.com/gpu";
    out["nvidia.com/gpu.present"] = gpus.empty() ? "false" : "true";
    out["nvidia.com/mig.strategy"] = std::string(to_string(o.mig_strategy));
    if (!o.machine.empty()) out["nvidia.com/gpu.machine"] = sanitize_value(o.machine);

    // Driver and CUDA versions ("cuda.driver-version" is the kernel driver's, as in GFD).
    auto parts = strings::split(node.driver_version, '.');
    if (parts.size() >= 2) {
        out["nvidia.com/cuda.driver-version.major"] = std::string(parts[0]);
        out["nvidia.com/cuda.driver-version.minor"] = std::string(parts[1]);
        out["nvidia.com/cuda.driver-version.revision"] = parts.size() > 2 ? std::string(parts[2]) : "0";
        out["nvidia.com/cuda.driver-version.full"] = sanitize_value(node.driver_version);
    }
    if (node.cuda_driver_version > 0) {
        const int major = node.cuda_driver_version / 1000, minor = (node.cuda_driver_version % 1000) / 10;
        out["nvidia.com/cuda.runtime-version.major"] = std::to_string(major);
        out["nvidia.com/cuda.runtime-version.minor"] = std::to_string(minor);
        out["nvidia.com/cuda.runtime-version.full"] = fmt::format("{}.{}", major, minor);
    }
    if (gpus.empty()) {
        out["nvidia.com/gpu.count"] = "0";
        return out;
    }

    bool mig_capable = false;
    for (const auto* g : gpus) mig_capable = mig_capable || g->mig_mode != inventory::MigMode::unsupported;
    out["nvidia.com/mig.capable"] = mig_capable ? "true" : "false";

    const inventory::Gpu& first = *gpus.front();
    auto full_gpu_labels = [&](size_t count) {
        out["nvidia.com/gpu.count"] = std::to_string(count);
        out["nvidia.com/gpu.product"] = product(o.sharing, gpu_resource, first.name);
        out["nvidia.com/gpu.memory"] = std::to_string(first.memory_total_mib);
        out["nvidia.com/gpu.replicas"] = std::to_string(replicas_of(o.sharing, gpu_resource));
        out["nvidia.com/gpu.sharing-strategy"] = sharing_of(o.sharing, gpu_resource);
    };
    out["nvidia.com/gpu.family"] = sanitize_value(first.architecture);
    out["nvidia.com/gpu.compute.major"] = std::to_string(first.cc_major);
    out["nvidia.com/gpu.compute.minor"] = std::to_string(first.cc_minor);

    auto mig_on = [](const inventory::Gpu* g) { return g->mig_mode == inventory::MigMode::enabled; };
    switch (o.mig_strategy) {
        case MigStrategy::none:
            full_gpu_labels(gpus.size());
            break;
        case MigStrategy::single: {
            size_t on = 0;
            for (const auto* g : gpus) on += mig_on(g) ? 1 : 0;
            if (on == 0) {
                full_gpu_labels(gpus.size());
                break;
            }
            if (on != gpus.size())
                return fail(Code::invalid_argument,
                            "MIG strategy single: {} of {} GPUs have MIG enabled; single needs all or none (use mixed)",
                            on, gpus.size());
            const inventory::MigDevice* model = nullptr;
            size_t count = 0;
            for (const auto* g : gpus) {
                for (const auto& m : g->mig_devices) {
                    if (model && m.profile != model->profile)
                        return fail(Code::invalid_argument,
                                    "MIG strategy single: GPU {} has MIG profile {} next to {}; single needs one profile (use mixed)",
                                    g->index, m.profile, model->profile);
                    if (!model) model = &m;
                    ++count;
                }
            }
            if (!model) {
                out["nvidia.com/gpu.count"] = "0";
                break;
            }
            mig_labels(out, "nvidia.com/gpu", o.sharing, gpu_resource, first, *model, count);
            break;
        }
        case MigStrategy::mixed: {
            size_t full = 0;
            std::map<std::string, std::pair<const inventory::MigDevice*, size_t>> profiles;
            const inventory::Gpu* parent_for_name = &first;
            for (const auto* g : gpus) {
                if (!mig_on(g)) {
                    ++full;
                    continue;
                }
                for (const auto& m : g->mig_devices) {
                    auto& p = profiles[m.profile];
                    if (!p.first) {
                        p.first = &m;
                        parent_for_name = g;
                    }
                    ++p.second;
                }
            }
            full_gpu_labels(full);
            for (const auto& [profile, entry] : profiles) {
                const std::string resource = "nvidia.com/mig-" + profile;
                mig_labels(out, resource, o.sharing, resource, *parent_for_name, *entry.first, entry.second);
            }
            break;
        }
    }
    return out;
}

std::string to_feature_file(const Labels& labels) {
    std::string out;
    for (const auto& [k, v] : labels) out += fmt::format("{}={}\n", k, v);
    return out;
}

}  // namespace kgpu::labels
