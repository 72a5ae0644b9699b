#include "toolkit/config.h"

#include <filesystem>

#include <toml++/toml.h>

#include <fmt/format.h>

#include "common/files.h"
#include "common/log.h"

namespace kgpu::toolkit {

namespace {

struct Reader {
    std::string_view source;
    const toml::table& doc;

    unsigned line(const toml::node& n) const { return static_cast<unsigned>(n.source().begin.line); }

    std::unexpected<Error> bad(const toml::node& n, std::string_view key, std::string_view expected) const {
        return fail(Code::invalid_argument, "{}:{}: key '{}': expected {}", source, line(n), key, expected);
    }

    Status string(std::string_view key, std::string& out, bool absolute_or_empty = false) const {
        const toml::node* n = doc.get(key);
        if (!n) return {};
        auto v = n->value_exact<std::string>();
        if (!v) return bad(*n, key, "a string");
        if (absolute_or_empty && !v->empty() && v->front() != '/') return bad(*n, key, "an absolute path (or \"\")");
        out = *v;
        return {};
    }

    Status boolean(std::string_view key, bool& out) const {
        const toml::node* n = doc.get(key);
        if (!n) return {};
        auto v = n->value_exact<bool>();
        if (!v) return bad(*n, key, "true or false");
        out = *v;
        return {};
    }

    // A string or an array of non-empty strings.
    Status strings(std::string_view key, std::vector<std::string>& out) const {
        const toml::node* n = doc.get(key);
        if (!n) return {};
        std::vector<std::string> values;
        if (auto s = n->value_exact<std::string>()) {
            values.push_back(*s);
        } else if (const toml::array* a = n->as_array()) {
            for (const auto& e : *a) {
                auto s = e.value_exact<std::string>();
                if (!s) return bad(e, key, "an array of strings");
                values.push_back(*s);
            }
        } else {
            return bad(*n, key, "a string or an array of strings");
        }
        for (const auto& v : values)
            if (v.empty()) return bad(*n, key, "non-empty strings");
        if (values.empty()) return bad(*n, key, "at least one value");
        out = std::move(values);
        return {};
    }
};

constexpr std::string_view kKeys[] = {
    "low-level-runtime", "driver-root", "dev-root", "nvml-library", "proc-root", "log-file", "log-level",
    "accept-nvidia-visible-devices-envvar-when-unprivileged", "accept-nvidia-visible-devices-as-volume-mounts",
    "annotation-prefixes", "default-kind", "hook-path", "ldconfig-path", "disable-require", "inventory-cache",
};

}  // namespace

Result<RuntimeConfig> parse_config(std::string_view text, std::string_view source) {
    toml::table doc;
    try {
        doc = toml::parse(text, source);
    } catch (const toml::parse_error& e) {
        return fail(Code::parse, "{}:{}:{}: not valid TOML: {}", source, e.source().begin.line, e.source().begin.column,
                    e.description());
    }
    for (const auto& [k, v] : doc) {
        bool known = false;
        for (auto key : kKeys) known = known || k.str() == key;
        if (!known)
            return fail(Code::invalid_argument, "{}:{}: unknown key '{}' (known: low-level-runtime, driver-root, dev-root, "
                        "nvml-library, proc-root, log-file, log-level, accept-nvidia-visible-devices-envvar-when-unprivileged, "
                        "accept-nvidia-visible-devices-as-volume-mounts, annotation-prefixes, default-kind, hook-path, "
                        "ldconfig-path, disable-require, inventory-cache)",
                        source, v.source().begin.line, k.str());
    }
    RuntimeConfig c;
    c.source = std::string(source);
    Reader r{source, doc};
    for (auto st : {r.strings("low-level-runtime", c.low_level_runtime), r.string("driver-root", c.driver_root, true),
                    r.string("dev-root", c.dev_root, true), r.string("nvml-library", c.nvml_library),
                    r.string("proc-root", c.proc_root, true), r.string("log-file", c.log_file, true),
                    r.string("log-level", c.log_level),
                    r.boolean("accept-nvidia-visible-devices-envvar-when-unprivileged", c.accept_envvar_when_unprivileged),
                    r.boolean("accept-nvidia-visible-devices-as-volume-mounts", c.accept_volume_mounts),
                    r.strings("annotation-prefixes", c.annotation_prefixes), r.string("default-kind", c.default_kind),
                    r.string("hook-path", c.hook_path, true), r.string("ldconfig-path", c.ldconfig_path),
                    r.boolean("disable-require", c.disable_require),
                    r.string("inventory-cache", c.inventory_cache, true)}) {
        if (!st) return std::unexpected(st.error());
    }
    if (c.driver_root.empty()) c.driver_root = "/";
    if (c.proc_root.empty()) c.proc_root = "/proc";
    log::Level level;
    if (!log::parse_level(c.log_level, level))
        return r.bad(*doc.get("log-level"), "log-level", "debug, info, warn, error or off");
    if (auto slash = c.default_kind.find('/'); slash == std::string::npos || slash == 0 || slash + 1 == c.default_kind.size())
        return r.bad(*doc.get("default-kind"), "default-kind", "a CDI kind such as nvidia.com/gpu");
    std::string_view ld = c.ldconfig_path;
    if (ld.starts_with('@')) ld.remove_prefix(1);
    if (ld.empty() || ld.front() != '/')
        return r.bad(*doc.get("ldconfig-path"), "ldconfig-path", "an absolute path, optionally prefixed with @");
    return c;
}

Result<ConfigSource> config_source(std::string_view env_value, const std::string& install_dir) {
    if (!env_value.empty()) return ConfigSource{std::string(env_value), std::string(kConfigEnv), {}, true};
    if (!install_dir.empty()) {
        const std::string record = (std::filesystem::path(install_dir) / kConfigRecordName).string();
        auto text = files::read_regular(record);
        if (text) {
            std::string_view path = *text;
            if (path.ends_with('\n')) path.remove_suffix(1);
            if (path.empty() || path.front() != '/' || path.find('\n') != std::string_view::npos ||
                path.find('\0') != std::string_view::npos)
                return fail(Code::invalid_argument, "{}: expected one line, the absolute path of the container runtime's "
                            "config (`kgpu runtime install` writes it)", record);
            return ConfigSource{std::string(path), record, record, true};
        }
        if (text.error().code != Code::not_found) return std::unexpected(text.error());
    }
    return ConfigSource{std::string(kDefaultConfigPath), "the default path", {}, false};
}

Result<RuntimeConfig> load_config(const ConfigSource& source) {
    auto text = files::read_regular(source.path);
    if (!text) {
        if (text.error().code == Code::not_found && !source.required) return RuntimeConfig{};
        Error e = text.error();
        if (!source.record.empty())
            e.message += fmt::format(" (the config `kgpu runtime install` wrote, as recorded in {})", source.record);
        else if (source.required)
            e.message += fmt::format(" (named by {})", source.chosen_by);
        return std::unexpected(e);
    }
    return parse_config(*text, source.path);
}

Result<RuntimeConfig> load_config(std::string_view env_value) {
    auto source = config_source(env_value, "");
    if (!source) return std::unexpected(source.error());
    return load_config(*source);
}

namespace {

std::string toml_string(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out + "\"";
}

std::string toml_list(const std::vector<std::string>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + toml_string(v[i]);
    return out + "]";
}

}  // namespace

std::string render_config(const RuntimeConfig& c) {
    auto b = [](bool v) { return v ? "true" : "false"; };
    return fmt::format(
        "# kgpu container runtime (`kgpu container-runtime`, docs/container-runtime.md).\n"
        "# The OCI runtime that does the work: a path, or names searched in PATH in order.\n"
        "low-level-runtime = {}\n"
        "# Where the driver's files are (a host path) and the root of /dev/nvidia* (\"\" = driver-root).\n"
        "driver-root = {}\n"
        "dev-root = {}\n"
        "# libnvidia-ml.so.1 to load (\"\" = searched under driver-root).\n"
        "nvml-library = {}\n"
        "proc-root = {}\n"
        "# Appended to by every call (\"\" = no file; errors also go to runc's --log file).\n"
        "log-file = {}\n"
        "log-level = {}\n"
        "# NVIDIA's security settings: false/true lets only the device plugin's volume mounts or CDI\n"
        "# annotations (which a pod cannot forge) select GPUs in unprivileged containers.\n"
        "accept-nvidia-visible-devices-envvar-when-unprivileged = {}\n"
        "accept-nvidia-visible-devices-as-volume-mounts = {}\n"
        "# CDI device requests in these annotations, for the kind below, are resolved in memory.\n"
        "annotation-prefixes = {}\n"
        "default-kind = {}\n"
        "# The createContainer hooks' binary, a host path (\"\" = nvidia-cdi-hook next to kgpu).\n"
        "hook-path = {}\n"
        "ldconfig-path = {}\n"
        "disable-require = {}\n"
        "# The node's inventory between creates, re-read from NVML when the driver, its GPUs, MIG\n"
        "# instances, device nodes or library change (\"\" = NVML on every create).\n"
        "inventory-cache = {}\n",
        toml_list(c.low_level_runtime), toml_string(c.driver_root), toml_string(c.dev_root), toml_string(c.nvml_library),
        toml_string(c.proc_root), toml_string(c.log_file), toml_string(c.log_level), b(c.accept_envvar_when_unprivileged),
        b(c.accept_volume_mounts), toml_list(c.annotation_prefixes), toml_string(c.default_kind), toml_string(c.hook_path),
        toml_string(c.ldconfig_path), b(c.disable_require), toml_string(c.inventory_cache));
}

}  // namespace kgpu::toolkit
