#include "runtime/crio.h"

#include <fmt/format.h>

#include "runtime/engine.h"
#include "runtime/toml_edit.h"

namespace kgpu::runtime {

namespace {

using tomledit::Path;

const Path kRuntime = {"crio", "runtime"};

Path runtime_table(const std::string& name) { return {"crio", "runtime", "runtimes", name}; }

// What nvidia-ctk's crio AddRuntime does to `dest`, the template read from `source`.
Status add_runtime(toml::table& dest, const toml::table& source, const CrioOptions& o, std::string_view name) {
    if (o.runtime_path.empty() || o.runtime_path.front() != '/')
        return fail(Code::invalid_argument, "--nvidia-runtime-path '{}': expected an absolute path", o.runtime_path);
    if (o.runtime_name.empty()) return fail(Code::invalid_argument, "--nvidia-runtime-name: expected a name");
    std::string default_name;
    if (const toml::table* r = tomledit::find_table(source, kRuntime))
        default_name = (*r)["default_runtime"].value_or(std::string{});
    const toml::table* tmpl = nullptr;
    for (const auto& n : low_level_runtimes(default_name))
        if ((tmpl = tomledit::find_table(source, runtime_table(n)))) break;
    auto runtimes = tomledit::ensure_table(dest, {"crio", "runtime", "runtimes"}, name);
    if (!runtimes) return std::unexpected(runtimes.error());
    if (tmpl) (*runtimes)->insert_or_assign(o.runtime_name, *tmpl);
    auto rt = tomledit::ensure_table(**runtimes, {o.runtime_name}, name);
    if (!rt) return std::unexpected(rt.error());
    (*rt)->insert_or_assign("runtime_path", o.runtime_path);
    (*rt)->insert_or_assign("runtime_type", "oci");
    toml::table& runtime = *tomledit::find_table(dest, kRuntime);
    if (o.set_as_default) {
        runtime.insert_or_assign("default_runtime", o.runtime_name);
    } else if (runtime["default_runtime"].value<std::string>() == o.runtime_name) {
        runtime.erase("default_runtime");
    }
    return {};
}

}  // namespace

Result<std::string> crio_drop_in(const SourceText& source, const CrioOptions& o) {
    auto src = tomledit::parse(source.text, source.name);
    if (!src) return std::unexpected(src.error());
    toml::table drop;
    if (auto st = add_runtime(drop, *src, o, source.name); !st) return std::unexpected(st.error());
    std::string text = fmt::format("# Written by `kgpu runtime configure --runtime crio`: the {} runtime, its settings copied\n"
                                   "# from {}. CRI-O reads this directory after its main config.\n",
                                   o.runtime_name, source.name) +
                       tomledit::serialize(drop);
    // What CRI-O will read back.
    auto check = tomledit::parse(text, "the CRI-O drop-in");
    if (!check || *check != drop) return fail(Code::internal, "the CRI-O drop-in does not read back as written");
    return text;
}

Result<Edited> configure_crio(std::string_view text, std::string_view source, const CrioOptions& o,
                              const std::optional<SourceText>& from) {
    auto parsed = parse_sources(text, source, from);
    if (!parsed) return std::unexpected(parsed.error());
    toml::table target = parsed->doc;
    if (auto st = add_runtime(target, parsed->templates(), o, source); !st) return std::unexpected(st.error());

    tomledit::Text t{std::string(text), std::string(source)};
    // A layout kgpu cannot edit in place says so and that the drop-in works.
    auto hint = [](const Error& e) {
        Error out = e;
        if (e.code == Code::invalid_argument) out.message += std::string("; ") + std::string(kDropInHint);
        return std::unexpected(out);
    };
    const Path rt = runtime_table(o.runtime_name);
    if (auto st = t.replace_table(rt, *tomledit::find_table(target, rt)); !st) return hint(st.error());
    const toml::table& runtime = *tomledit::find_table(target, kRuntime);
    if (auto name = runtime["default_runtime"].value<std::string>()) {
        if (auto st = t.set_key(kRuntime, "default_runtime", toml::value<std::string>(*name)); !st) return hint(st.error());
    } else if (auto st = t.remove_key(kRuntime, "default_runtime"); !st) {
        return hint(st.error());
    }
    auto check = tomledit::parse(t.str(), source);
    if (!check) return std::unexpected(check.error());
    if (*check != target)
        return fail(Code::invalid_argument, "{}: kgpu cannot make this edit line by line without changing other settings; {}",
                    source, kDropInHint);
    Edited out;
    out.text = t.str();
    out.changed = out.text != text;
    return out;
}

}  // namespace kgpu::runtime
