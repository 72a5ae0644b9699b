#include "runtime/containerd.h"

#include <cctype>
#include <charconv>
#include <filesystem>
#include <regex>

#include <fmt/format.h>

#include "runtime/engine.h"
#include "runtime/toml_edit.h"

namespace kgpu::runtime {

std::string cri_plugin(int version) {
    switch (version) {
        case 1: return "cri";
        case 2: return "io.containerd.grpc.v1.cri";
        default: return "io.containerd.cri.v1.runtime";
    }
}

namespace {

namespace fs = std::filesystem;
using tomledit::Path;

Path plugin_path(int version) { return {"plugins", cri_plugin(version)}; }
Path containerd_path(int version) { return {"plugins", cri_plugin(version), "containerd"}; }
Path runtime_path(int version, const std::string& name) {
    return {"plugins", cri_plugin(version), "containerd", "runtimes", name};
}

Result<int> version_of(const toml::table& doc, std::string_view source, const ContainerdOptions& o) {
    if (doc.empty()) return o.use_legacy_config ? 1 : o.new_config_version;
    const toml::node* v = doc.get("version");
    if (!v) return 1;
    auto n = v->value_exact<int64_t>();
    if (!n) return fail(Code::invalid_argument, "{}: version is not an integer (expected 1, 2 or 3)", source);
    if (*n < 1 || *n > 3) return fail(Code::invalid_argument, "{}: containerd config version {}: expected 1, 2 or 3", source, *n);
    return static_cast<int>(*n);
}

Status check_options(const ContainerdOptions& o) {
    if (o.runtime_name.empty()) return fail(Code::invalid_argument, "--nvidia-runtime-name: expected a name");
    if (o.runtime_path.empty() || o.runtime_path.front() != '/')
        return fail(Code::invalid_argument, "--nvidia-runtime-path '{}': expected an absolute path", o.runtime_path);
    return {};
}

// The table the new runtime starts from (nvidia-ctk's GetDefaultRuntimeOptions).
toml::table template_runtime(const toml::table& source, int version, const ContainerdOptions& o) {
    std::string default_name;
    if (const toml::table* c = tomledit::find_table(source, containerd_path(version)))
        default_name = (*c)["default_runtime_name"].value_or(std::string{});
    for (const auto& name : low_level_runtimes(default_name))
        if (const toml::table* t = tomledit::find_table(source, runtime_path(version, name))) return *t;
    toml::table t;
    t.insert("runtime_type", o.runtime_type);
    t.insert("runtime_root", "");
    t.insert("runtime_engine", "");
    t.insert("privileged_without_host_devices", false);
    return t;
}

// What nvidia-ctk's AddRuntime + EnableCDI do to `dest`, with the template read from `source`.
Status add_runtime(toml::table& dest, const toml::table& source, int version, const ContainerdOptions& o,
                   std::string_view name) {
    dest.insert_or_assign("version", static_cast<int64_t>(version));
    const bool legacy_default = version == 1 && o.use_legacy_config && o.set_as_default;
    auto runtimes = tomledit::ensure_table(dest, containerd_path(version), name);
    if (!runtimes) return std::unexpected(runtimes.error());
    auto rts = tomledit::ensure_table(**runtimes, {"runtimes"}, name);
    if (!rts) return std::unexpected(rts.error());
    (*rts)->insert_or_assign(o.runtime_name, template_runtime(source, version, o));
    toml::table& rt = *(*rts)->get(o.runtime_name)->as_table();
    if (rt["runtime_type"].value_or(std::string{}).empty() && !o.runtime_type.empty())
        rt.insert_or_assign("runtime_type", o.runtime_type);
    auto opts = tomledit::ensure_table(rt, {"options"}, name);
    if (!opts) return std::unexpected(opts.error());
    (*opts)->insert_or_assign("BinaryName", o.runtime_path);
    if (version == 1) (*opts)->insert_or_assign("Runtime", o.runtime_path);

    toml::table& containerd = **runtimes;
    if (o.set_as_default && !legacy_default) {
        containerd.insert_or_assign("default_runtime_name", o.runtime_name);
    } else if (containerd["default_runtime_name"].value<std::string>() == o.runtime_name) {
        containerd.erase("default_runtime_name");
    }
    if (legacy_default) {
        // The deprecated default runtime table of containerd < 1.4 (removed in 2.0).
        if (!containerd.get("default_runtime")) {
            toml::table d;
            d.insert("runtime_type", o.runtime_type);
            d.insert("runtime_root", "");
            d.insert("runtime_engine", "");
            d.insert("privileged_without_host_devices", false);
            containerd.insert("default_runtime", std::move(d));
        }
        auto dopts = tomledit::ensure_table(containerd, {"default_runtime", "options"}, name);
        if (!dopts) return std::unexpected(dopts.error());
        (*dopts)->insert_or_assign("BinaryName", o.runtime_path);
        (*dopts)->insert_or_assign("Runtime", o.runtime_path);
    }
    if (o.enable_cdi) {
        // Deliberately in the CRI plugin table for every version: nvidia-ctk v1.20 writes
        // version 1's under plugins.cri.containerd, where containerd does not read it.
        auto plugin = tomledit::ensure_table(dest, plugin_path(version), name);
        if (!plugin) return std::unexpected(plugin.error());
        (*plugin)->insert_or_assign("enable_cdi", true);
    }
    return {};
}

std::string pattern_for(const std::string& drop_in_path) {
    return fs::path(drop_in_path).parent_path().string() + "/*.toml";
}

}  // namespace

Result<int> config_version(std::string_view text, std::string_view source, const ContainerdOptions& options) {
    auto doc = tomledit::parse(text, source);
    if (!doc) return std::unexpected(doc.error());
    return version_of(*doc, source, options);
}

Result<ParsedSources> parse_sources(std::string_view text, std::string_view source, const std::optional<SourceText>& from) {
    auto doc = tomledit::parse(text, source);
    if (!doc) return std::unexpected(doc.error());
    ParsedSources out{std::move(*doc), std::nullopt};
    if (from) {
        auto f = tomledit::parse(from->text, from->name);
        if (!f) return std::unexpected(f.error());
        out.from = std::move(*f);
    }
    return out;
}

Result<Edited> configure(std::string_view text, std::string_view source, const ContainerdOptions& o,
                         const std::optional<SourceText>& from) {
    if (auto st = check_options(o); !st) return std::unexpected(st.error());
    auto parsed = parse_sources(text, source, from);
    if (!parsed) return std::unexpected(parsed.error());
    toml::table* doc = &parsed->doc;
    auto version = version_of(parsed->templates(), from ? std::string_view(from->name) : source, o);
    if (!version) return std::unexpected(version.error());
    const int v = *version;

    toml::table target = *doc;
    if (auto st = add_runtime(target, parsed->templates(), v, o, source); !st) return std::unexpected(st.error());

    // The same result as text edits of the operator's file.
    tomledit::Text t{std::string(text), std::string(source)};
    auto hint = [](const Error& e) {
        Error out = e;
        if (e.code == Code::invalid_argument) out.message += std::string("; ") + std::string(kDropInHint);
        return std::unexpected(out);
    };
    if ((*doc)["version"].value<int64_t>() != v) {
        if (auto st = t.set_key({}, "version", toml::value<int64_t>(v)); !st) return hint(st.error());
    }
    const Path rt = runtime_path(v, o.runtime_name);
    if (auto st = t.replace_table(rt, *tomledit::find_table(target, rt)); !st) return hint(st.error());
    const toml::table& tc = *tomledit::find_table(target, containerd_path(v));
    if (auto name = tc["default_runtime_name"].value<std::string>()) {
        if (auto st = t.set_key(containerd_path(v), "default_runtime_name", toml::value<std::string>(*name)); !st)
            return hint(st.error());
    } else if (auto st = t.remove_key(containerd_path(v), "default_runtime_name"); !st) {
        return hint(st.error());
    }
    if (const toml::table* d = tc["default_runtime"].as_table()) {
        Path dp = containerd_path(v);
        dp.push_back("default_runtime");
        if (auto st = t.replace_table(dp, *d); !st) return hint(st.error());
    }
    if (o.enable_cdi) {
        if (auto st = t.set_key(plugin_path(v), "enable_cdi", toml::value<bool>(true)); !st)
            return hint(st.error());
    }

    auto check = tomledit::parse(t.str(), source);
    if (!check) return std::unexpected(check.error());
    if (*check != target)
        return fail(Code::invalid_argument,
                    "{}: kgpu cannot make this edit line by line without changing other settings; {}", source,
                    kDropInHint);
    Edited out;
    out.version = v;
    out.text = t.str();
    out.changed = out.text != text;
    return out;
}

Result<DropIn> configure_drop_in(std::string_view text, std::string_view source, const std::string& drop_in_path,
                                 const ContainerdOptions& o, const std::optional<SourceText>& from) {
    if (auto st = check_options(o); !st) return std::unexpected(st.error());
    if (drop_in_path.empty() || drop_in_path.front() != '/')
        return fail(Code::invalid_argument, "--drop-in-config '{}': expected an absolute path", drop_in_path);
    auto parsed = parse_sources(text, source, from);
    if (!parsed) return std::unexpected(parsed.error());
    toml::table* main = &parsed->doc;
    const toml::table& src = parsed->templates();
    auto version = version_of(src, from ? std::string_view(from->name) : source, o);
    if (!version) return std::unexpected(version.error());
    const int v = *version;
    if (v == 1)
        return fail(Code::invalid_argument, "{}: a version 1 config has no imports, so it takes no drop-in (edit it in "
                    "place with --drop-in-config=\"\")", source);

    // The drop-in: version, a copy of the whole CRI plugin table, then the edits.
    toml::table drop;
    drop.insert("version", static_cast<int64_t>(v));
    if (const toml::table* plugin = tomledit::find_table(src, plugin_path(v))) {
        auto plugins = tomledit::ensure_table(drop, {"plugins"}, drop_in_path);
        if (!plugins) return std::unexpected(plugins.error());
        (*plugins)->insert(cri_plugin(v), *plugin);
    }
    if (auto st = add_runtime(drop, src, v, o, drop_in_path); !st) return std::unexpected(st.error());

    DropIn out;
    out.import = pattern_for(drop_in_path);
    out.drop_in = fmt::format(
        "# Written by `kgpu runtime configure`: the {} runtime on a copy of the CRI plugin table of\n"
        "# {} (containerd before 2.1 replaces a whole plugin table from an\n"
        "# import rather than merging it). Run kgpu again after changing that file; do not edit this one.\n",
        o.runtime_name, from ? from->name : std::string(source));
    out.drop_in += tomledit::serialize(drop);
    // What containerd will read back.
    auto check = tomledit::parse(out.drop_in, drop_in_path);
    if (!check || *check != drop) return fail(Code::internal, "{}: the drop-in does not read back as written", drop_in_path);

    // The main config imports the drop-in's directory.
    std::vector<std::string> imports;
    if (const toml::node* n = main->get("imports")) {
        const toml::array* arr = n->as_array();
        if (!arr) return fail(Code::invalid_argument, "{}: imports is not a list", source);
        for (const auto& e : *arr) {
            auto s = e.value<std::string>();
            if (!s) return fail(Code::invalid_argument, "{}: imports holds a value that is not a path", source);
            imports.push_back(*s);
        }
    }
    out.main.version = v;
    out.main.text = std::string(text);
    if (std::find(imports.begin(), imports.end(), out.import) == imports.end()) {
        const bool was_empty = main->empty();
        tomledit::Text t{std::string(text), std::string(source)};
        toml::array arr;
        for (const auto& i : imports) arr.push_back(i);
        arr.push_back(out.import);
        if (auto st = t.set_key({}, "imports", arr); !st) return std::unexpected(st.error());
        if (was_empty) {
            if (auto st = t.set_key({}, "version", toml::value<int64_t>(v)); !st) return std::unexpected(st.error());
        }
        out.main.text = t.str();
    }
    out.main.changed = out.main.text != text;
    return out;
}

Result<std::string> staged_main_config(std::string_view main_text, std::string_view source, const std::string& config_dir,
                                       const std::string& drop_in_path, const std::string& staged_drop_in) {
    auto doc = tomledit::parse(main_text, source);
    if (!doc) return std::unexpected(doc.error());
    if (toml::array* arr = (*doc)["imports"].as_array()) {
        toml::array staged;
        for (const auto& e : *arr) {
            std::string s = e.value_or(std::string{});
            if (!s.empty() && s.front() != '/') s = (fs::path(config_dir) / s).string();
            if (!drop_in_path.empty() && s == pattern_for(drop_in_path)) s = pattern_for(staged_drop_in);
            else if (!drop_in_path.empty() && s == drop_in_path) s = staged_drop_in;
            staged.push_back(s);
        }
        doc->insert_or_assign("imports", std::move(staged));
    }
    return tomledit::serialize(*doc);
}

Status check_dump(std::string_view dump, const ContainerdOptions& o) {
    auto doc = tomledit::parse(dump, "containerd config dump");
    if (!doc) return std::unexpected(doc.error());
    for (int v : {3, 2, 1}) {
        const toml::table* rt = tomledit::find_table(*doc, runtime_path(v, o.runtime_name));
        if (!rt) continue;
        auto binary = (*rt)["options"]["BinaryName"].value<std::string>();
        if (binary != o.runtime_path)
            return fail(Code::not_found, "`containerd config dump` shows runtime {} with BinaryName {}, expected {}",
                        o.runtime_name, binary.value_or("(none)"), o.runtime_path);
        if (o.set_as_default) {
            auto def = (*tomledit::find_table(*doc, containerd_path(v)))["default_runtime_name"].value<std::string>();
            if (def != o.runtime_name)
                return fail(Code::not_found, "`containerd config dump` shows default_runtime_name {}, expected {}",
                            def.value_or("(none)"), o.runtime_name);
        }
        return {};
    }
    return fail(Code::not_found, "`containerd config dump` shows no runtime named {}: containerd would not load it",
                o.runtime_name);
}

std::optional<std::pair<int, int>> parse_containerd_version(std::string_view out) {
    static const std::regex re(R"((?:^|\s)v?(\d+)\.(\d+)(?:\.\d+)?)");
    std::string s(out);
    std::smatch m;
    if (!std::regex_search(s, m, re)) return std::nullopt;
    // from_chars: a number too large for an int is no version (std::stoi would throw).
    int major = 0, minor = 0;
    const std::string a = m[1].str(), b = m[2].str();
    if (std::from_chars(a.data(), a.data() + a.size(), major).ec != std::errc{} ||
        std::from_chars(b.data(), b.data() + b.size(), minor).ec != std::errc{})
        return std::nullopt;
    return std::pair{major, minor};
}

}  // namespace kgpu::runtime
