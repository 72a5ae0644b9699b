#include "toolkit/edits.h"

#include <algorithm>
#include <span>

#include <fmt/format.h>

#include "cdi/spec.h"

namespace kgpu::toolkit {

using ojson = nlohmann::ordered_json;

namespace {

// Libraries by name prefix (the part before ".so"), from libnvidia-container's lists.
struct Class {
    std::string_view prefix;
    std::string_view capability;
};
constexpr Class kLibraries[] = {
    {"libnvidia-ml", "utility"},        {"libnvidia-cfg", "utility"},      {"libnvidia-nscq", "utility"},
    {"libcuda", "compute"},             {"libcudadebugger", "compute"},    {"libnvidia-opencl", "compute"},
    {"libnvidia-ptxjitcompiler", "compute"}, {"libnvidia-fatbinaryloader", "compute"}, {"libnvidia-allocator", "compute"},
    {"libnvidia-compiler", "compute"},  {"libnvidia-nvvm", "compute"},     {"libnvidia-pkcs11", "compute"},
    {"libnvidia-gpucomp", "compute"},   {"libnvidia-sandboxutils", "compute"},
    {"libvdpau_nvidia", "video"},       {"libnvidia-encode", "video"},     {"libnvidia-opticalflow", "video"},
    {"libnvcuvid", "video"},
    {"libnvidia-eglcore", "graphics"},  {"libnvidia-glcore", "graphics"},  {"libnvidia-tls", "graphics"},
    {"libnvidia-glsi", "graphics"},     {"libnvidia-fbc", "graphics"},     {"libnvidia-ifr", "graphics"},
    {"libnvidia-rtcore", "graphics"},   {"libnvoptix", "graphics"},        {"libGLX_nvidia", "graphics"},
    {"libEGL_nvidia", "graphics"},      {"libGLESv2_nvidia", "graphics"},  {"libGLESv1_CM_nvidia", "graphics"},
    {"libnvidia-glvkspirv", "graphics"}, {"libnvidia-cbl", "graphics"},    {"libnvidia-vulkan-producer", "graphics"},
    {"libnvidia-egl-gbm", "graphics"},  {"libnvidia-egl-wayland", "graphics"}, {"libnvidia-wayland-client", "graphics"},
    {"libnvidia-ngx", "ngx"},
};
constexpr Class kBinaries[] = {
    {"nvidia-smi", "utility"},          {"nvidia-debugdump", "utility"},   {"nvidia-persistenced", "utility"},
    {"nvidia-cuda-mps-control", "compute"}, {"nvidia-cuda-mps-server", "compute"},
};

bool wanted(const std::set<std::string>& caps, std::string_view cap) {
    return caps.contains("all") || caps.contains(std::string(cap));
}

// Appends the arrays of `from` to `into`, skipping exact duplicates.
void merge(ojson& into, const ojson& from) {
    for (const auto& [key, value] : from.items()) {
        if (!value.is_array()) continue;
        ojson& list = into[key];
        if (list.is_null()) list = ojson::array();
        for (const auto& v : value)
            if (std::find(list.begin(), list.end(), v) == list.end()) list.push_back(v);
    }
}

}  // namespace

std::string capability_of(std::string_view file) {
    const bool library = file.find(".so") != std::string_view::npos;
    std::string_view stem = library ? file.substr(0, file.find(".so")) : file;
    for (const auto& c : library ? std::span<const Class>(kLibraries) : std::span<const Class>(kBinaries))
        if (stem == c.prefix) return std::string(c.capability);
    return "compute";
}

Result<ojson> container_edits(const inventory::Node& node, const Selection& sel, const EditOptions& o) {
    cdi::SpecOptions so;
    auto slash = o.kind.find('/');
    if (slash == std::string::npos) return fail(Code::invalid_argument, "CDI kind '{}': expected <vendor>/<class>", o.kind);
    so.vendor = o.kind.substr(0, slash);
    so.device_class = o.kind.substr(slash + 1);
    so.strategies = {cdi::NameStrategy::index};
    so.driver_root = o.driver_root;
    so.dev_root = o.dev_root;
    so.proc_root = o.proc_root;
    so.hook_path = o.hook_path;
    auto spec = cdi::generate(node, so);
    if (!spec) return std::unexpected(spec.error());

    std::vector<std::string> names;
    if (sel.all) names.push_back("all");
    for (unsigned g : sel.gpus) names.push_back(std::to_string(node.gpus[g].index));
    for (const auto& m : sel.migs)
        names.push_back(fmt::format("{}:{}", node.gpus[m.gpu].index, node.gpus[m.gpu].mig_devices[m.mig].index));

    ojson edits = ojson::object();
    if (auto common = spec->find("containerEdits"); common != spec->end()) merge(edits, *common);
    for (const auto& name : names) {
        auto it = std::find_if((*spec)["devices"].begin(), (*spec)["devices"].end(),
                               [&](const ojson& d) { return d.value("name", std::string()) == name; });
        if (it == (*spec)["devices"].end())
            return fail(Code::not_found, "device {}={} is not in the spec generated for this node (a lost GPU?)", o.kind, name);
        if (auto e = it->find("containerEdits"); e != it->end()) merge(edits, *e);
    }

    // Driver files outside the requested capabilities stay out; so do the hooks for them.
    if (auto mounts = edits.find("mounts"); mounts != edits.end()) {
        ojson kept = ojson::array();
        for (const auto& m : *mounts) {
            std::string path = m.value("containerPath", std::string());
            std::string file = path.substr(path.rfind('/') + 1);
            // Libraries and binaries; the GSP firmware and the persistenced socket always go in.
            bool driver_file = (path.starts_with("/usr/") || path.starts_with("/lib") || path.starts_with("/bin") ||
                                path.starts_with("/sbin")) &&
                               !path.starts_with("/lib/firmware/");
            if (!driver_file || wanted(o.capabilities, capability_of(file))) kept.push_back(m);
        }
        *mounts = std::move(kept);
    }
    const bool libcuda = wanted(o.capabilities, "compute");
    if (auto hooks = edits.find("hooks"); hooks != edits.end()) {
        ojson kept = ojson::array();
        for (auto h : *hooks) {
            auto args = h.value("args", ojson::array());
            bool symlinks_for_libcuda = false;
            for (const auto& a : args)
                if (a.is_string() && a.get_ref<const std::string&>().find("libcuda.so") != std::string::npos) symlinks_for_libcuda = true;
            if (symlinks_for_libcuda && !libcuda) continue;
            // The hook binary is kgpu itself: its hooks are a subcommand (`kgpu hook <name>`).
            const std::string path = h.value("path", std::string());
            if (path.substr(path.rfind('/') + 1) == "kgpu" && args.size() >= 2 && args[1] != "hook") {
                args.insert(args.begin() + 1, "hook");
                h["args"] = args;
            }
            kept.push_back(std::move(h));
        }
        *hooks = std::move(kept);
    }
    return edits;
}

}  // namespace kgpu::toolkit
