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

namespace {

// The driver file a create-symlinks --link argument ("target::link") points to. A link goes into
// the container with its target: libGLX_indirect.so.0 -> libGLX_nvidia.so.<version> is a graphics
// link whatever its own name says, gbm/nvidia-drm_gbm.so -> ../libnvidia-allocator.so.1 goes with
// the allocator (classified by its name, such links were "compute": dangling in compute
// containers, missing in graphics ones).
std::string link_target_file(const std::string& arg) {
    auto sep = arg.find("::");
    std::string target = sep == std::string::npos ? arg : arg.substr(0, sep);
    return target.substr(target.rfind('/') + 1);
}

// Driver files outside the requested capabilities stay out, and so do their symlinks.
void keep_capabilities(ojson& edits, const EditOptions& o) {
    if (auto mounts = edits.find("mounts"); mounts != edits.end()) {
        ojson kept = ojson::array();
        for (const auto& m : *mounts) {
            std::string path = m.value("containerPath", std::string());
            std::string file = path.substr(path.rfind('/') + 1);
            // Libraries and binaries; the GSP firmware and the IPC sockets always go in.
            bool driver_file = (path.starts_with("/usr/") || path.starts_with("/lib") || path.starts_with("/bin") ||
                                path.starts_with("/sbin")) &&
                               !path.starts_with("/lib/firmware/");
            if (!driver_file || wanted(o.capabilities, capability_of(file))) kept.push_back(m);
        }
        *mounts = std::move(kept);
    }
    if (auto hooks = edits.find("hooks"); hooks != edits.end()) {
        ojson kept = ojson::array();
        for (auto h : *hooks) {
            auto args = h.value("args", ojson::array());
            if (std::find(args.begin(), args.end(), "create-symlinks") != args.end()) {
                ojson narrowed = ojson::array();
                bool any_link = false;
                for (size_t i = 0; i < args.size(); ++i) {
                    if (args[i] == "--link" && i + 1 < args.size() && args[i + 1].is_string()) {
                        if (!wanted(o.capabilities, capability_of(link_target_file(args[i + 1].get<std::string>())))) {
                            ++i;
                            continue;
                        }
                        any_link = true;
                    }
                    narrowed.push_back(args[i]);
                }
                if (!any_link) continue;
                h["args"] = narrowed;
            }
            kept.push_back(std::move(h));
        }
        *hooks = std::move(kept);
    }
}

}  // namespace

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
    so.hooks.path = o.hook_path;
    if (!o.ldconfig_path.empty()) so.hooks.ldconfig_path = o.ldconfig_path;
    // Only the selected devices are generated (the spec-wide edits are the same either way).
    std::vector<std::string> names;
    so.device_ids.clear();
    if (sel.all) {
        so.device_ids = {"all"};
        names.push_back("all");
    } else if (sel.none && sel.gpus.empty() && sel.migs.empty()) {
        so.device_ids = {"none"};
    }
    for (unsigned g : sel.gpus) {
        so.device_ids.push_back(std::to_string(node.gpus[g].index));
        names.push_back(so.device_ids.back());
    }
    for (const auto& m : sel.migs) {
        so.device_ids.push_back(fmt::format("{}:{}", node.gpus[m.gpu].index, node.gpus[m.gpu].mig_devices[m.mig].index));
        names.push_back(so.device_ids.back());
    }
    so.all_device = sel.all;
    auto spec = cdi::generate(node, so);
    if (!spec) return std::unexpected(spec.error());

    ojson edits = ojson::object();
    if (auto common = spec->find("containerEdits"); common != spec->end()) merge(edits, *common);
    for (const auto& name : names) {
        auto it = std::find_if((*spec)["devices"].begin(), (*spec)["devices"].end(),
                               [&](const ojson& d) { return d.value("name", std::string()) == name; });
        if (it == (*spec)["devices"].end())
            return fail(Code::not_found, "device {}={} is not in the spec generated for this node (a lost GPU?)", o.kind, name);
        if (auto e = it->find("containerEdits"); e != it->end()) merge(edits, *e);
    }

    keep_capabilities(edits, o);
    return edits;
}

}  // namespace kgpu::toolkit
