#include "deviceplugin/values.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/strings.h"

namespace kgpu::deviceplugin {

std::string_view to_string(DeviceListStrategy s) {
    switch (s) {
        case DeviceListStrategy::envvar: return "envvar";
        case DeviceListStrategy::volume_mounts: return "volume-mounts";
        case DeviceListStrategy::cdi_annotations: return "cdi-annotations";
        case DeviceListStrategy::cdi_cri: return "cdi-cri";
    }
    return "envvar";
}

std::string_view to_string(DeviceIdStrategy s) {
    switch (s) {
        case DeviceIdStrategy::uuid: return "uuid";
        case DeviceIdStrategy::index: return "index";
    }
    return "uuid";
}

std::string_view to_string(SharedAllocationPolicy s) {
    return s == SharedAllocationPolicy::packed ? "packed" : "distributed";
}

Result<DeviceIdStrategy> parse_device_id_strategy(std::string_view text) {
    for (auto s : {DeviceIdStrategy::uuid, DeviceIdStrategy::index})
        if (text == to_string(s)) return s;
    return fail(Code::invalid_argument, "invalid device ID strategy '{}' (expected uuid or index)", text);
}

Result<DeviceListStrategy> parse_device_list_strategy(std::string_view text) {
    for (auto s : {DeviceListStrategy::envvar, DeviceListStrategy::volume_mounts,
                   DeviceListStrategy::cdi_annotations, DeviceListStrategy::cdi_cri})
        if (text == to_string(s)) return s;
    return fail(Code::invalid_argument,
                "invalid device list strategy '{}' (expected envvar, volume-mounts, cdi-annotations or cdi-cri)",
                text);
}

Result<SharedAllocationPolicy> parse_shared_allocation_policy(std::string_view text) {
    for (auto s : {SharedAllocationPolicy::distributed, SharedAllocationPolicy::packed})
        if (text == to_string(s)) return s;
    return fail(Code::invalid_argument, "invalid shared devices allocation policy '{}' (expected distributed or packed)",
                text);
}

std::string qualify_resource_name(std::string_view name) {
    // As NVIDIA's plugin (NewResourceName): every name is under nvidia.com/, so another domain
    // ends up with two '/' and is refused by validate_resource_name.
    if (name.starts_with("nvidia.com/")) return std::string(name);
    return "nvidia.com/" + std::string(name);
}

Status validate_resource_name(std::string_view full) {
    if (full.starts_with("nvidia.com/") && full.find('/', 11) != std::string_view::npos)
        return fail(Code::invalid_argument,
                    "resource name '{}': only nvidia.com/ resources are served (a name is put under nvidia.com/ "
                    "unless it starts with it, as NVIDIA's plugin does)",
                    full.substr(11));
    const auto slash = full.find('/');
    if (slash == std::string_view::npos || full.find('/', slash + 1) != std::string_view::npos)
        return fail(Code::invalid_argument, "resource name '{}' must look like <domain>/<name>", full);
    const std::string_view domain = full.substr(0, slash), name = full.substr(slash + 1);
    auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); };
    auto lower_alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
    if (domain.empty() || domain.size() > 253)
        return fail(Code::invalid_argument, "resource name '{}': the domain must be 1..253 characters", full);
    for (std::string_view label : strings::split(domain, '.')) {
        if (label.empty() || label.size() > 63 || !lower_alnum(label.front()) || !lower_alnum(label.back()) ||
            !std::all_of(label.begin(), label.end(), [&](char c) { return lower_alnum(c) || c == '-'; }))
            return fail(Code::invalid_argument,
                        "resource name '{}': the domain '{}' is not a DNS subdomain (lower-case letters, digits, "
                        "'-' and '.', each part starting and ending with a letter or digit)",
                        full, domain);
    }
    if (name.empty() || name.size() > 63)
        return fail(Code::invalid_argument, "resource name '{}': the part after '/' has {} characters (expected 1..63)",
                    full, name.size());
    if (!alnum(name.front()) || !alnum(name.back()) ||
        !std::all_of(name.begin(), name.end(), [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; }))
        return fail(Code::invalid_argument,
                    "resource name '{}': the part after '/' may hold only letters, digits, '-', '_' and '.', and "
                    "must start and end with a letter or digit",
                    full);
    return {};
}

Result<std::vector<DeviceListStrategy>> parse_device_list_strategies(std::string_view csv) {
    std::vector<DeviceListStrategy> out;
    for (std::string_view item : strings::split(csv, ',')) {
        item = strings::trim(item);
        if (item.empty()) continue;
        auto s = parse_device_list_strategy(item);
        if (!s) return std::unexpected(s.error());
        if (std::find(out.begin(), out.end(), *s) == out.end()) out.push_back(*s);
    }
    if (out.empty()) return fail(Code::invalid_argument, "empty device list strategy");
    return out;
}

Result<bool> parse_bool(std::string_view text) {
    for (std::string_view t : {"1", "t", "T", "TRUE", "true", "True"})
        if (text == t) return true;
    for (std::string_view f : {"0", "f", "F", "FALSE", "false", "False"})
        if (text == f) return false;
    return fail(Code::invalid_argument, "invalid boolean '{}' (expected true or false)", text);
}

namespace {

Result<unsigned> parse_xid(std::string_view token) {
    unsigned v = 0;
    auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
    if (ec != std::errc{} || ptr != token.data() + token.size() || v < 1 || v > 65535)
        return fail(Code::invalid_argument, "invalid XID '{}' (expected a number 1..65535)", token);
    return v;
}

}  // namespace

Result<std::set<unsigned>> parse_xid_list(std::string_view csv) {
    std::set<unsigned> out;
    for (std::string_view item : strings::split(csv, ',')) {
        item = strings::trim(item);
        if (item.empty()) continue;
        auto x = parse_xid(item);
        if (!x) return std::unexpected(x.error());
        out.insert(*x);
    }
    return out;
}

Status validate_imex_channel_ids(const std::vector<unsigned>& ids) {
    if (ids.empty() || (ids.size() == 1 && ids[0] == 0)) return {};
    return fail(Code::invalid_argument, "invalid IMEX channel IDs [{}] (expected [] or [0], as NVIDIA's plugin)",
                fmt::join(ids, ", "));
}

Result<std::vector<unsigned>> parse_imex_channel_ids(std::string_view csv) {
    std::vector<unsigned> out;
    for (std::string_view item : strings::split(csv, ',')) {
        item = strings::trim(item);
        if (item.empty()) continue;
        unsigned v = 0;
        auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
        if (ec != std::errc{} || ptr != item.data() + item.size())
            return fail(Code::invalid_argument, "invalid IMEX channel ID '{}' (expected a number)", item);
        out.push_back(v);
    }
    if (auto st = validate_imex_channel_ids(out); !st) return std::unexpected(st.error());
    return out;
}

Result<std::string> parse_device_discovery_strategy(std::string_view text) {
    for (std::string_view s : {"auto", "nvml", "tegra"})
        if (text == s) return std::string(text);
    return fail(Code::invalid_argument, "invalid device discovery strategy '{}' (expected auto, nvml or tegra)", text);
}

}  // namespace kgpu::deviceplugin
