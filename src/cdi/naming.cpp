#include "cdi/naming.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "common/strings.h"

namespace kgpu::cdi {

std::string_view to_string(NameStrategy s) {
    switch (s) {
        case NameStrategy::index: return "index";
        case NameStrategy::uuid: return "uuid";
        case NameStrategy::type_index: return "type-index";
    }
    return "index";
}

Result<std::vector<NameStrategy>> parse_strategies(std::string_view csv) {
    std::vector<NameStrategy> out;
    for (auto token : strings::split(csv, ',')) {
        token = strings::trim(token);
        if (token.empty()) continue;
        NameStrategy s;
        if (token == "index") s = NameStrategy::index;
        else if (token == "uuid") s = NameStrategy::uuid;
        else if (token == "type-index") s = NameStrategy::type_index;
        else
            return fail(Code::invalid_argument, "device name strategy '{}': expected index, uuid or type-index", token);
        if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
    }
    if (out.empty()) return fail(Code::invalid_argument, "device name strategy: expected a list of index, uuid, type-index");
    return out;
}

std::string device_name(NameStrategy s, const inventory::Gpu& gpu) {
    switch (s) {
        case NameStrategy::uuid: return gpu.uuid;
        case NameStrategy::type_index: return fmt::format("gpu{}", gpu.index);
        case NameStrategy::index: break;
    }
    return std::to_string(gpu.index);
}

std::string device_name(NameStrategy s, const inventory::Gpu& parent, const inventory::MigDevice& mig) {
    switch (s) {
        case NameStrategy::uuid: return mig.uuid;
        case NameStrategy::type_index: return fmt::format("mig{}:{}", parent.index, mig.index);
        case NameStrategy::index: break;
    }
    return fmt::format("{}:{}", parent.index, mig.index);
}

std::string qualified_name(std::string_view kind, std::string_view name) { return fmt::format("{}={}", kind, name); }

std::string spec_file_name(std::string_view kind) {
    std::string out(kind);
    if (auto slash = out.find('/'); slash != std::string::npos) out[slash] = '-';
    return out + ".json";
}

Result<std::string> name_for_device_id(const inventory::Node& node, std::string_view device_id, NameStrategy s) {
    std::string_view id = device_id;
    if (auto pos = id.find("::"); pos != std::string_view::npos) id = id.substr(0, pos);
    for (const auto& g : node.gpus) {
        if ((!g.uuid.empty() && id == g.uuid) || id == std::to_string(g.index)) return device_name(s, g);
        for (const auto& m : g.mig_devices) {
            if ((!m.uuid.empty() && id == m.uuid) || id == fmt::format("{}:{}", g.index, m.index))
                return device_name(s, g, m);
        }
    }
    return fail(Code::not_found, "device ID '{}' names no GPU or MIG device on this node", device_id);
}

Result<std::string> make_kind(std::string_view vendor, std::string_view device_class) {
    auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
    // Vendor: letters, digits, '-', '.', starting with a letter, ending with a letter or digit.
    bool vendor_ok = !vendor.empty() && std::isalpha(static_cast<unsigned char>(vendor.front())) && alnum(vendor.back()) &&
                     std::all_of(vendor.begin(), vendor.end(), [&](char c) { return alnum(c) || c == '-' || c == '.'; });
    if (!vendor_ok)
        return fail(Code::invalid_argument,
                    "--vendor '{}': expected a name such as nvidia.com (letters, digits, '-' and '.', starting with a "
                    "letter, ending with a letter or digit)",
                    vendor);
    bool class_ok = !device_class.empty() && std::isalpha(static_cast<unsigned char>(device_class.front())) &&
                    alnum(device_class.back()) &&
                    std::all_of(device_class.begin(), device_class.end(),
                                [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
    if (!class_ok)
        return fail(Code::invalid_argument,
                    "--class '{}': expected a name such as gpu (letters, digits, '-', '_' and '.', starting with a "
                    "letter, ending with a letter or digit)",
                    device_class);
    return fmt::format("{}/{}", vendor, device_class);
}

}  // namespace kgpu::cdi
