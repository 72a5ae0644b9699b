// The settings table's codecs, describe()'s derived defaults, and the flag text and help the CLI
// takes from the table (options.h).
#include <algorithm>
#include <functional>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cdi/spec.h"
#include "common/strings.h"
#include "deviceplugin/config.h"

namespace kgpu::deviceplugin {

namespace option {

Result<std::string> AbsolutePath::parse(std::string_view text) {
    if (!text.empty() && text.front() != '/')
        return fail(Code::invalid_argument, "expected an absolute path, got '{}'", text);
    return std::string(text);
}

Result<std::optional<bool>> MaybeBool::parse(std::string_view text) {
    auto v = parse_bool(text);
    if (!v) return std::unexpected(v.error());
    return std::optional<bool>(*v);
}

Result<std::vector<std::string>> Words::parse(std::string_view csv) {
    std::vector<std::string> out;
    for (std::string_view item : strings::split(csv, ','))
        if (item = strings::trim(item); !item.empty()) out.emplace_back(item);
    return out;
}

std::string shown(bool v) { return v ? "true" : "false"; }
std::string shown(const std::string& v) { return v.empty() ? "(none)" : v; }
std::string shown(const std::optional<bool>& v) { return v ? shown(*v) : "(not set)"; }
std::string shown(const std::vector<std::string>& v) { return fmt::format("[{}]", fmt::join(v, ",")); }
std::string shown(const std::vector<DeviceListStrategy>& v) {
    std::vector<std::string_view> names;
    for (auto s : v) names.push_back(to_string(s));
    return fmt::format("{}", fmt::join(names, ","));
}

std::string shown_dev_root(const Config& c) { return c.dev_root(); }
std::string shown_kubelet_socket(const Config& c) { return c.kubelet_socket_path(); }
std::string shown_nvml_library(const Config& c) {
    return c.nvml_library.empty() ? "(libnvidia-ml.so.1 under the driver root)" : c.nvml_library;
}
std::string shown_cdi_hook_path(const Config& c) {
    return c.nvidia_ctk_path.empty() ? fmt::format("({})", cdi::SpecOptions{}.hooks.path) : c.nvidia_ctk_path;
}
std::string shown_mps_root(const Config& c) { return c.mps_root.empty() ? "(none)" : c.mps_root; }

}  // namespace option

bool OptionNames::taken_by(std::string_view subcommand) const {
    for (std::string_view t : strings::split(takers, ','))
        if (t == subcommand) return true;
    return false;
}

std::string option_help(const OptionNames& names, std::string_view shown_default, bool boolean, std::string_view taker) {
    std::string help(names.help);
    if (help.find("(default") != std::string::npos) {
    } else if (boolean) {
        help += fmt::format(" (default {}; the bare flag means true)", shown_default);
    } else if (!shown_default.empty() && shown_default != "(none)" && shown_default != "[]") {
        help += fmt::format(" (default {})", shown_default);
    }
    if (const std::string_view vars = taker == "gfd" ? names.gfd_env : names.env; !vars.empty()) {
        std::vector<std::string_view> env;
        for (std::string_view v : strings::split(vars, ',')) env.push_back(v);
        help += fmt::format(" [env {}]", fmt::join(env, ", "));
    }
    return help;
}

std::vector<std::string> option_variables() {
    std::vector<std::string> out;
    for_each_option([&](const OptionNames& names, auto...) {
        for (std::string_view list : {names.env, names.gfd_env})
            for (std::string_view v : strings::split(list, ','))
                if (!v.empty() && std::find(out.begin(), out.end(), v) == out.end()) out.emplace_back(v);
    });
    return out;
}

namespace {

// One setting's flag text (the last value, or every value of a list flag joined by commas) parsed
// into `out`; nothing when the flag was not given. Errors name the flag.
template <class Codec, class Value>
Status parse_flag(const OptionNames& names, const option::text_t<Codec>& given, std::optional<Value>& out) {
    std::string value;
    if constexpr (Codec::list) {
        if (given.empty()) return {};
        value = fmt::format("{}", fmt::join(given, ","));
    } else {
        if (!given) return {};
        value = *given;
    }
    auto parsed = Codec::parse(value);
    if (!parsed) {
        const std::string_view flag = names.flags.substr(0, names.flags.find(','));
        return fail(Code::invalid_argument, "{}: {}", flag, parsed.error().message);
    }
    out = std::move(*parsed);
    return {};
}

}  // namespace

Result<Overrides> gfd_settings(const OptionText& text, const std::function<const char*(const char*)>& getenv,
                               std::map<std::string, std::string>* sources) {
    Overrides out;
    Status status;
    // The flags first (a bad flag is reported before a bad variable), GFD's rows only: kgpu
    // labels has no other flag.
    for_each_option([&](const OptionNames& names, auto codec, auto, auto override_field, auto text_field, auto...) {
        using Codec = decltype(codec);
        if (!status || !names.taken_by("gfd")) return;
        status = parse_flag<Codec>(names, text.*text_field, out.*override_field);
        if (status && out.*override_field && sources)
            (*sources)[std::string(names.field)] = names.flags.substr(0, names.flags.find(','));
    });
    // Then GFD's variables for what no flag gave.
    for_each_option([&](const OptionNames& names, auto codec, auto, auto override_field, auto...) {
        using Codec = decltype(codec);
        if (!status || !names.taken_by("gfd") || out.*override_field) return;  // the flag wins
        for (std::string_view name : strings::split(names.gfd_env, ',')) {
            const std::string var(name);
            const char* v = getenv(var.c_str());
            if (v == nullptr || *v == '\0') continue;
            auto r = Codec::parse(Codec::trim ? strings::trim(v) : std::string_view(v));
            if (!r) {
                status = fail(Code::invalid_argument, "environment variable {}: {}", var, r.error().message);
                return;
            }
            out.*override_field = std::move(*r);
            if (sources) (*sources)[std::string(names.field)] = "environment variable " + var;
            return;  // the first variable set wins
        }
    });
    if (!status) return std::unexpected(status.error());
    return out;
}

Status parse_option_text(const OptionText& text, Overrides& out) {
    Status status;
    for_each_option([&](const OptionNames& names, auto codec, auto, auto override_field, auto text_field, auto) {
        using Codec = decltype(codec);
        if (status) status = parse_flag<Codec>(names, text.*text_field, out.*override_field);
    });
    return status;
}

}  // namespace kgpu::deviceplugin
