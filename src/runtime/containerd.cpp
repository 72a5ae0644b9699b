#include "runtime/containerd.h"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>

#include <optional>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "common/strings.h"

namespace kgpu::runtime {

namespace {

using Path = std::vector<std::string>;

struct Layout {
    Path runtime_plugin;   // where enable_cdi lives
    Path containerd;       // where default_runtime_name and runtimes live
};

Result<Layout> layout_for(int version) {
    switch (version) {
        case 1: return Layout{{"plugins", "cri"}, {"plugins", "cri", "containerd"}};
        case 2:
            return Layout{{"plugins", "io.containerd.grpc.v1.cri"}, {"plugins", "io.containerd.grpc.v1.cri", "containerd"}};
        case 3:
            return Layout{{"plugins", "io.containerd.cri.v1.runtime"},
                          {"plugins", "io.containerd.cri.v1.runtime", "containerd"}};
        default: return fail(Code::invalid_argument, "containerd config version {}: expected 1, 2 or 3", version);
    }
}

Result<toml::table> parse(std::string_view text, std::string_view source) {
    try {
        return toml::parse(text, source);
    } catch (const toml::parse_error& e) {
        return fail(Code::parse, "{}:{}:{}: not valid TOML: {} (the file was left untouched)", source,
                    e.source().begin.line, e.source().begin.column, e.description());
    }
}

const toml::table* find_table(const toml::table& root, const Path& path) {
    const toml::table* t = &root;
    for (const auto& part : path) {
        const toml::node* n = t->get(part);
        if (!n || !n->is_table()) return nullptr;
        t = n->as_table();
    }
    return t;
}

// TOML spelling of a key: bare when it can be, else quoted.
std::string key_text(std::string_view k) {
    bool bare = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
    return bare ? std::string(k) : fmt::format("\"{}\"", k);
}

std::string header_text(const Path& path) {
    std::string out;
    for (const auto& p : path) out += (out.empty() ? "" : ".") + key_text(p);
    return out;
}

// A TOML basic string ("..."), the spelling containerd's own configs use.
std::string quote(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04X}", static_cast<unsigned>(c));
                else out += c;
        }
    }
    return out + "\"";
}

// A value as TOML text (strings as basic strings; arrays inline).
std::string format_node(const toml::node& n) {
    if (auto s = n.value_exact<std::string>()) return quote(*s);
    if (const toml::array* a = n.as_array()) {
        std::string out = "[";
        for (size_t i = 0; i < a->size(); ++i) out += (i ? ", " : "") + format_node(*a->get(i));
        return out + "]";
    }
    std::ostringstream ss;
    n.visit([&](auto&& v) {
        if constexpr (toml::is_table<decltype(v)>) ss << toml::toml_formatter{v};
        else ss << v;
    });
    return ss.str();
}

// The tables of `t` as standard-table TOML under `path` (the drop-in's copy of a plugin table).
void serialize(const toml::table& t, const std::vector<std::string>& path, std::string& out);

std::vector<std::string> split_lines(std::string_view text) {
    std::vector<std::string> lines;
    for (auto l : strings::split(text, '\n')) lines.emplace_back(l);
    if (!lines.empty() && lines.back().empty()) lines.pop_back();  // the final newline
    return lines;
}

std::string join_lines(const std::vector<std::string>& lines) {
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
}

// The key path of a table header line ("[plugins.\"x\".containerd]"), or nullopt for other lines.
std::optional<Path> header_path(std::string_view line) {
    line = strings::trim(line);
    if (!line.starts_with("[") || line.starts_with("[[")) return std::nullopt;
    auto close = line.rfind(']');
    if (close == std::string_view::npos) return std::nullopt;
    std::string_view inner = line.substr(1, close - 1);
    Path out;
    std::string cur;
    char quote_char = 0;
    for (char c : inner) {
        if (quote_char) {
            if (c == quote_char) quote_char = 0;
            else cur += c;
        } else if (c == '"' || c == '\'') {
            quote_char = c;
        } else if (c == '.') {
            out.push_back(std::string(strings::trim(cur)));
            cur.clear();
        } else if (c != ' ' && c != '\t') {
            cur += c;
        }
    }
    out.push_back(std::string(strings::trim(cur)));
    return out;
}

bool is_prefix(const Path& prefix, const Path& p) {
    return p.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), p.begin());
}

std::string indent_of(std::string_view line) {
    size_t n = 0;
    while (n < line.size() && (line[n] == ' ' || line[n] == '\t')) ++n;
    return std::string(line.substr(0, n));
}

std::string header_text(const std::vector<std::string>& path);

void serialize(const toml::table& t, const std::vector<std::string>& path, std::string& out) {
    out += "\n[" + header_text(path) + "]\n";
    for (const auto& [k, v] : t)
        if (!v.is_table()) out += "  " + key_text(k.str()) + " = " + format_node(v) + "\n";
    for (const auto& [k, v] : t) {
        if (!v.is_table()) continue;
        auto sub = path;
        sub.emplace_back(k.str());
        serialize(*v.as_table(), sub, out);
    }
}

// Sets `key` = `literal` in table `path` of `text`. With `overwrite` false an existing key is kept.
Result<std::string> set_key(const std::string& text, std::string_view source, const Path& path, const std::string& key,
                            const std::string& literal, bool overwrite) {
    auto doc = parse(text, source);
    if (!doc) return std::unexpected(doc.error());
    auto lines = split_lines(text);
    const toml::table* table = find_table(*doc, path);
    const std::string assignment = key_text(key) + " = " + literal;
    if (table && table->is_inline())
        return fail(Code::invalid_argument, "{}: [{}] is an inline table; kgpu edits only standard tables (use --drop-in)",
                    source, header_text(path));
    if (table) {
        if (const toml::node* existing = table->get(key)) {
            auto wanted = parse("x = " + literal, "literal");
            if (wanted && format_node(*existing) == format_node(*(*wanted)["x"].node())) return text;
            if (!overwrite) return text;
            const auto& src = existing->source();
            const size_t line_no = src.begin.line;
            if (line_no == 0 || line_no > lines.size() || src.end.line != src.begin.line)
                return fail(Code::invalid_argument, "{}:{}: {} spans several lines; kgpu cannot edit it in place (use --drop-in)",
                            source, line_no, key);
            std::string& line = lines[line_no - 1];
            std::string_view stripped = strings::trim(line);
            if (!stripped.starts_with(key) && !stripped.starts_with("\"" + key + "\""))
                return fail(Code::invalid_argument, "{}:{}: {} is not set on its own line; kgpu cannot edit it in place (use --drop-in)",
                            source, line_no, key);
            line = indent_of(line) + assignment;
            return join_lines(lines);
        }
        // The table's own header line, when it has one.
        for (size_t i = 0; i < lines.size(); ++i) {
            auto hp = header_path(lines[i]);
            if (hp && *hp == path) {
                // After the table's last key line (keys keep the order they are added in).
                size_t at = i + 1;
                while (at < lines.size()) {
                    auto t = strings::trim(lines[at]);
                    if (t.empty() || t.starts_with("[")) break;
                    ++at;
                }
                lines.insert(lines.begin() + static_cast<long>(at), indent_of(lines[i]) + "  " + assignment);
                return join_lines(lines);
            }
        }
    }
    // A new table: after the last table under the same parent (next to its siblings), else at the end.
    Path parent(path.begin(), path.end() - 1);
    std::optional<size_t> last_header;
    for (size_t i = 0; i < lines.size(); ++i) {
        auto hp = header_path(lines[i]);
        if (hp && is_prefix(parent, *hp) && parent.size() > 1) last_header = i;
    }
    size_t insert_at = lines.size();
    std::string indent;
    if (last_header) {
        indent = indent_of(lines[*last_header]);
        insert_at = *last_header + 1;
        while (insert_at < lines.size() && !header_path(lines[insert_at]) &&
               !strings::trim(lines[insert_at]).starts_with("[["))
            ++insert_at;
        // Comments and blank lines just above the next header belong to it.
        while (insert_at > *last_header + 1) {
            auto prev = strings::trim(lines[insert_at - 1]);
            if (prev.empty() || prev.starts_with("#")) --insert_at;
            else break;
        }
    }
    std::vector<std::string> block = {"", indent + "[" + header_text(path) + "]", indent + "  " + assignment};
    lines.insert(lines.begin() + static_cast<long>(insert_at), block.begin(), block.end());
    return join_lines(lines);
}

struct Edit {
    Path table;
    std::string key, literal;
    bool overwrite;
};

int version_of(const toml::table& doc, bool empty) {
    if (auto v = doc["version"].value<int64_t>()) return static_cast<int>(*v);
    return empty ? 2 : 1;
}

bool has_keys(const toml::table& doc) { return !doc.empty(); }

Result<Edited> apply(std::string text, std::string_view source, const ContainerdOptions& o, bool new_file) {
    auto doc = parse(text, source);
    if (!doc) return std::unexpected(doc.error());
    const int version = version_of(*doc, !has_keys(*doc));
    auto layout = layout_for(version);
    if (!layout) return std::unexpected(layout.error().context(source));
    if (o.runtime_name.empty() || o.runtime_path.empty() || o.runtime_path.front() != '/')
        return fail(Code::invalid_argument, "--runtime-path '{}': expected an absolute path", o.runtime_path);
    Edited out;
    out.version = version;
    const std::string original = text;
    if (new_file && !has_keys(*doc)) text = fmt::format("version = {}\n", version) + text;

    Path runtimes = layout->containerd;
    runtimes.push_back("runtimes");
    Path nvidia = runtimes;
    nvidia.push_back(o.runtime_name);
    Path nvidia_options = nvidia;
    nvidia_options.push_back("options");
    Path runc_options = runtimes;
    runc_options.push_back("runc");
    runc_options.push_back("options");

    std::vector<Edit> edits = {
        {nvidia, "runtime_type", quote("io.containerd.runc.v2"), true},
        {nvidia_options, "BinaryName", quote(o.runtime_path), true},
    };
    if (const toml::table* runc = find_table(*doc, runc_options)) {
        for (const auto& [k, v] : *runc) {
            if (k.str() == "BinaryName" || v.is_table()) continue;
            edits.push_back({nvidia_options, std::string(k.str()), format_node(v), false});
        }
    }
    if (o.set_as_default) edits.push_back({layout->containerd, "default_runtime_name", quote(o.runtime_name), true});
    if (o.enable_cdi) edits.push_back({layout->runtime_plugin, "enable_cdi", "true", true});

    for (const auto& e : edits) {
        auto next = set_key(text, source, e.table, e.key, e.literal, e.overwrite);
        if (!next) return std::unexpected(next.error());
        text = std::move(*next);
    }

    // Check what containerd will read.
    auto check = parse(text, source);
    if (!check) return fail(Code::internal, "the edited config does not parse: {}", check.error().message);
    const toml::table* nv = find_table(*check, nvidia_options);
    const toml::table* rt = find_table(*check, nvidia);
    bool ok = nv && rt && (*rt)["runtime_type"].value<std::string>() == "io.containerd.runc.v2" &&
              (*nv)["BinaryName"].value<std::string>() == o.runtime_path;
    if (o.set_as_default) {
        const toml::table* c = find_table(*check, layout->containerd);
        ok = ok && c && (*c)["default_runtime_name"].value<std::string>() == o.runtime_name;
    }
    if (o.enable_cdi) {
        const toml::table* p = find_table(*check, layout->runtime_plugin);
        ok = ok && p && (*p)["enable_cdi"].value<bool>() == true;
    }
    if (!ok) return fail(Code::internal, "{}: the edited config does not read back as intended; use --drop-in", source);
    out.text = std::move(text);
    out.changed = out.text != original;
    return out;
}

}  // namespace

Result<Edited> configure(std::string_view text, std::string_view source, const ContainerdOptions& options) {
    return apply(std::string(text), source, options, true);
}

Result<DropIn> configure_drop_in(std::string_view text, std::string_view source, const std::string& drop_in_path,
                                 const ContainerdOptions& options) {
    auto doc = parse(text, source);
    if (!doc) return std::unexpected(doc.error());
    const int version = version_of(*doc, !has_keys(*doc));
    auto layout = layout_for(version);
    if (!layout) return std::unexpected(layout.error().context(source));
    if (drop_in_path.empty() || drop_in_path.front() != '/')
        return fail(Code::invalid_argument, "--drop-in '{}': expected an absolute path", drop_in_path);

    // The drop-in: version, then a copy of the whole CRI plugin table, then the edits.
    toml::table plugin_copy;
    if (const toml::table* plugin = find_table(*doc, layout->runtime_plugin)) plugin_copy = *plugin;
    std::string body = fmt::format("version = {}\n", version);
    serialize(plugin_copy, layout->runtime_plugin, body);
    std::string drop_in = fmt::format(
        "# Written by `kgpu runtime configure --drop-in`: the {} runtime, plus a copy of the CRI plugin\n"
        "# table of {} (containerd before 2.1 replaces a whole plugin table from an import rather than\n"
        "# merging it). Edit {} and run kgpu again instead of editing this file.\n",
        options.runtime_name, source, source);
    drop_in += body;
    auto edited = apply(drop_in, drop_in_path, options, false);
    if (!edited) return std::unexpected(edited.error());

    // The main config: imports gets the drop-in (top-level, so before the first table).
    DropIn out;
    out.drop_in = edited->text;
    out.main.version = version;
    std::string main(text);
    if (const toml::node* imports = doc->get("imports")) {
        const toml::array* arr = imports->as_array();
        if (!arr) return fail(Code::invalid_argument, "{}: imports is not an array", source);
        for (const auto& e : *arr) {
            auto s = e.value<std::string>();
            if (s && (*s == drop_in_path || ::fnmatch(s->c_str(), drop_in_path.c_str(), FNM_PATHNAME) == 0)) {
                out.main.text = main;
                return out;
            }
        }
        toml::array extended = *arr;
        extended.push_back(drop_in_path);
        auto next = set_key(main, source, {}, "imports", format_node(extended), true);
        if (!next) return std::unexpected(next.error());
        out.main.text = *next;
    } else {
        auto lines = split_lines(main);
        size_t at = 0;
        for (size_t i = 0; i < lines.size(); ++i) {
            auto t = strings::trim(lines[i]);
            if (t.starts_with("version")) {
                at = i + 1;
                break;
            }
            if (t.starts_with("[")) break;
        }
        if (lines.empty()) lines.push_back(fmt::format("version = {}", version)), at = 1;
        lines.insert(lines.begin() + static_cast<long>(at), "imports = [" + quote(drop_in_path) + "]");
        out.main.text = join_lines(lines);
    }
    auto check = parse(out.main.text, source);
    if (!check) return fail(Code::internal, "the edited config does not parse: {}", check.error().message);
    out.main.changed = out.main.text != text;
    return out;
}

}  // namespace kgpu::runtime
