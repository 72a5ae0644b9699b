#include "runtime/toml_edit.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "common/strings.h"

namespace kgpu::runtime::tomledit {

namespace {

bool is_prefix(const Path& prefix, const Path& p) {
    return p.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), p.begin());
}

std::string quote(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            case '\r': out += "\\r"; break;
            default:
                if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
                    out += fmt::format("\\u{:04X}", static_cast<unsigned>(static_cast<unsigned char>(c)));
                else
                    out += c;
        }
    }
    return out + "\"";
}

// TOML spelling of a key: bare when it can be, else quoted.
std::string key_text(std::string_view k) {
    bool bare = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
    return bare ? std::string(k) : quote(k);
}

bool is_array_of_tables(const toml::node& n) {
    const toml::array* a = n.as_array();
    return a && !a->empty() && a->is_array_of_tables();
}

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

std::string indent_of(std::string_view line) {
    size_t n = 0;
    while (n < line.size() && (line[n] == ' ' || line[n] == '\t')) ++n;
    return std::string(line.substr(0, n));
}

// The key path of a table header line ("[plugins.\"x\".containerd] # c"), or nullopt for a line
// that is not a standard-table header.
std::optional<Path> header_path(std::string_view line) {
    line = strings::trim(line);
    if (!line.starts_with("[") || line.starts_with("[[")) return std::nullopt;
    Path out;
    std::string cur;
    char quote_char = 0;
    bool closed = false;
    for (size_t i = 1; i < line.size(); ++i) {
        const char c = line[i];
        if (quote_char) {
            if (c == '\\' && quote_char == '"' && i + 1 < line.size()) {
                cur += line[++i];
            } else if (c == quote_char) {
                quote_char = 0;
            } else {
                cur += c;
            }
        } else if (c == '"' || c == '\'') {
            quote_char = c;
        } else if (c == '.') {
            out.push_back(cur);
            cur.clear();
        } else if (c == ']') {
            closed = true;
            break;
        } else if (c != ' ' && c != '\t') {
            cur += c;
        }
    }
    if (!closed) return std::nullopt;
    out.push_back(cur);
    return out;
}

// The 1-based lines that open a [table] or [[array]] section.
void collect_headers(const toml::table& t, std::set<size_t>& lines) {
    for (const auto& [k, v] : t) {
        if (const toml::table* sub = v.as_table()) {
            if (!sub->is_inline()) {
                lines.insert(sub->source().begin.line);
                collect_headers(*sub, lines);
            }
        } else if (is_array_of_tables(v)) {
            for (const auto& e : *v.as_array()) {
                lines.insert(e.source().begin.line);
                collect_headers(*e.as_table(), lines);
            }
        }
    }
}

// Line indexes (0-based) of section headers in `lines`, from the parsed document.
std::vector<size_t> header_indexes(const toml::table& doc, const std::vector<std::string>& lines) {
    std::set<size_t> numbers;
    collect_headers(doc, numbers);
    std::vector<size_t> out;
    for (size_t n : numbers) {
        if (n == 0 || n > lines.size()) continue;
        if (strings::trim(lines[n - 1]).starts_with("[")) out.push_back(n - 1);
    }
    return out;
}

// [begin, end) of the section opened at header index `h`: up to the next header, without the
// blank and comment lines just above it (they introduce the next section).
std::pair<size_t, size_t> section_range(size_t h, const std::vector<size_t>& headers, const std::vector<std::string>& lines) {
    size_t end = lines.size();
    for (size_t x : headers)
        if (x > h) {
            end = x;
            break;
        }
    while (end > h + 1) {
        auto prev = strings::trim(lines[end - 1]);
        if (prev.empty() || prev.starts_with("#")) --end;
        else break;
    }
    return {h, end};
}

// The path of the [[array]] header at `line`, for prefix checks.
std::optional<Path> array_header_path(std::string_view line) {
    auto t = strings::trim(line);
    if (!t.starts_with("[[")) return std::nullopt;
    std::string inner(t.substr(1));
    return header_path(inner);
}

std::optional<Path> any_header_path(std::string_view line) {
    if (auto p = header_path(line)) return p;
    return array_header_path(line);
}

// Where a new section for `path` goes: after the last section under the deepest ancestor that
// has one (next to its siblings), else at the end. Also returns the indentation to use.
std::pair<size_t, std::string> new_section_place(const Path& path, const std::vector<size_t>& headers,
                                                 const std::vector<std::string>& lines) {
    // A table whose subtables already have sections goes above the first of them.
    for (size_t h : headers) {
        auto hp = any_header_path(lines[h]);
        if (hp && is_prefix(path, *hp)) {
            size_t at = h;
            while (at > 0) {
                auto prev = strings::trim(lines[at - 1]);
                if (prev.starts_with("#")) --at;
                else break;
            }
            return {at, indent_of(lines[h])};
        }
    }
    for (size_t depth = path.size() - 1; depth >= 1; --depth) {
        Path ancestor(path.begin(), path.begin() + static_cast<long>(depth));
        std::optional<size_t> last;
        for (size_t h : headers) {
            auto hp = any_header_path(lines[h]);
            if (hp && is_prefix(ancestor, *hp)) last = h;
        }
        if (last) {
            auto [b, e] = section_range(*last, headers, lines);
            // Indented like a sibling when there is one, else one step deeper than the ancestor.
            std::optional<std::string> indent;
            for (size_t h : headers) {
                auto hp = any_header_path(lines[h]);
                if (hp && hp->size() == path.size() && is_prefix(Path(path.begin(), path.end() - 1), *hp))
                    indent = indent_of(lines[h]);
            }
            if (!indent) {
                for (size_t h : headers) {
                    auto hp = any_header_path(lines[h]);
                    if (hp && *hp == ancestor) indent = indent_of(lines[h]) + "  ";
                }
            }
            return {e, indent.value_or(indent_of(lines[*last]))};
        }
    }
    return {lines.size(), ""};
}

std::string format_inline_table(const toml::table& t) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, v] : t) {
        out += (first ? " " : ", ") + key_text(k.str()) + " = " + format_value(v);
        first = false;
    }
    return out + (first ? "}" : " }");
}

void serialize_into(const toml::table& t, const Path& path, const std::string& indent, bool array_element,
                    std::string& out) {
    if (!out.empty()) out += "\n";
    out += indent + (array_element ? "[[" : "[") + header_text(path) + (array_element ? "]]" : "]") + "\n";
    for (const auto& [k, v] : t) {
        if (v.is_table() || is_array_of_tables(v)) continue;
        out += indent + "  " + key_text(k.str()) + " = " + format_value(v) + "\n";
    }
    for (const auto& [k, v] : t) {
        Path sub = path;
        sub.emplace_back(k.str());
        if (const toml::table* st = v.as_table()) {
            serialize_into(*st, sub, indent + "  ", false, out);
        } else if (is_array_of_tables(v)) {
            for (const auto& e : *v.as_array()) serialize_into(*e.as_table(), sub, indent + "  ", true, out);
        }
    }
}

// Where a new top-level key goes: after the last top-level key, else after the file's leading
// comments; always above the first table.
size_t top_level_key_place(const toml::table& doc, const std::vector<size_t>& headers,
                           const std::vector<std::string>& lines) {
    size_t at = 0;
    for (const auto& [k, v] : doc)
        if (!v.is_table() && !is_array_of_tables(v)) at = std::max<size_t>(at, v.source().end.line);
    if (at == 0) {
        while (at < lines.size()) {
            auto t = strings::trim(lines[at]);
            if (t.empty() || t.starts_with("#")) ++at;
            else break;
        }
    }
    if (!headers.empty()) at = std::min(at, headers.front());
    return at;
}

}  // namespace

Result<toml::table> parse(std::string_view text, std::string_view source) {
    try {
        return toml::parse(text, source);
    } catch (const toml::parse_error& e) {
        return fail(Code::parse, "{}:{}:{}: not valid TOML: {}", source, e.source().begin.line, e.source().begin.column,
                    e.description());
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

toml::table* find_table(toml::table& root, const Path& path) {
    return const_cast<toml::table*>(find_table(static_cast<const toml::table&>(root), path));
}

Result<toml::table*> ensure_table(toml::table& root, const Path& path, std::string_view source) {
    toml::table* t = &root;
    Path so_far;
    for (const auto& part : path) {
        so_far.push_back(part);
        toml::node* n = t->get(part);
        if (!n) {
            t->insert(part, toml::table{});
            n = t->get(part);
        }
        if (!n->is_table())
            return fail(Code::invalid_argument, "{}: {} is a {}, expected a table", source, header_text(so_far),
                        n->is_array() ? "list" : "value");
        t = n->as_table();
    }
    return t;
}

std::string header_text(const Path& path) {
    std::string out;
    for (const auto& p : path) out += (out.empty() ? "" : ".") + key_text(p);
    return out;
}

std::string format_value(const toml::node& n) {
    if (auto s = n.value_exact<std::string>()) return quote(*s);
    if (const toml::array* a = n.as_array()) {
        std::string out = "[";
        for (size_t i = 0; i < a->size(); ++i) out += (i ? ", " : "") + format_value(*a->get(i));
        return out + "]";
    }
    if (const toml::table* t = n.as_table()) return format_inline_table(*t);
    std::ostringstream ss;
    n.visit([&](auto&& v) {
        if constexpr (!toml::is_table<decltype(v)> && !toml::is_array<decltype(v)>) ss << v;
    });
    return ss.str();
}

std::string serialize(const toml::table& doc) {
    std::string out;
    for (const auto& [k, v] : doc) {
        if (v.is_table() || is_array_of_tables(v)) continue;
        out += key_text(k.str()) + " = " + format_value(v) + "\n";
    }
    for (const auto& [k, v] : doc) {
        if (const toml::table* t = v.as_table()) {
            serialize_into(*t, {std::string(k.str())}, "", false, out);
        } else if (is_array_of_tables(v)) {
            for (const auto& e : *v.as_array()) serialize_into(*e.as_table(), {std::string(k.str())}, "", true, out);
        }
    }
    return out;
}

std::string serialize_table(const toml::table& table, const Path& path, const std::string& indent) {
    std::string out;
    serialize_into(table, path, indent, false, out);
    return out;
}

Text::Text(std::string text, std::string source) : text_(std::move(text)), source_(std::move(source)) {
    // CRLF only when every line ends so: a file of mixed endings is edited as it is.
    size_t lf = 0, crlf = 0;
    for (size_t i = 0; i < text_.size(); ++i) {
        if (text_[i] != '\n') continue;
        ++lf;
        if (i > 0 && text_[i - 1] == '\r') ++crlf;
    }
    crlf_ = lf > 0 && crlf == lf;
    if (!crlf_) return;
    std::string lf_only;
    lf_only.reserve(text_.size());
    for (size_t i = 0; i < text_.size(); ++i)
        if (!(text_[i] == '\r' && i + 1 < text_.size() && text_[i + 1] == '\n')) lf_only += text_[i];
    text_ = std::move(lf_only);
}

std::string Text::str() const {
    if (!crlf_) return text_;
    std::string out;
    out.reserve(text_.size() + text_.size() / 16);
    for (char c : text_) {
        if (c == '\n') out += '\r';
        out += c;
    }
    return out;
}

Status Text::reparse_check(const std::string& candidate) const {
    auto doc = parse(candidate, source_);
    // What the file already defines inline or with dotted keys cannot get a [section] next to it:
    // the layout, not the request, makes the edit impossible in place.
    if (!doc)
        return fail(Code::invalid_argument, "{}: kgpu cannot make this edit line by line: the result would not be valid "
                    "TOML ({}), as happens when a table is written inline or with dotted keys; the file was left untouched",
                    source_, doc.error().message);
    return {};
}

Status Text::set_key(const Path& path, const std::string& key, const toml::node& value) {
    auto doc = parse(text_, source_);
    if (!doc) return std::unexpected(doc.error());
    auto lines = split_lines(text_);
    const std::string assignment = key_text(key) + " = " + format_value(value);
    Path full = path;
    full.push_back(key);
    const toml::table* table = find_table(*doc, path);
    {
        // Something on the way that is not a table cannot be edited.
        const toml::table* t = &*doc;
        for (size_t i = 0; i < path.size(); ++i) {
            const toml::node* n = t->get(path[i]);
            if (!n) break;
            if (!n->is_table())
                return fail(Code::invalid_argument, "{}: {} is not a table; kgpu cannot add {} to it", source_,
                            header_text(Path(path.begin(), path.begin() + static_cast<long>(i) + 1)), key);
            t = n->as_table();
        }
    }
    if (table && table->is_inline())
        return fail(Code::invalid_argument, "{}: [{}] is an inline table; kgpu edits only standard tables", source_,
                    header_text(path));
    if (table) {
        if (const toml::node* existing = table->get(key)) {
            if (format_value(*existing) == format_value(value)) return {};
            const auto& src = existing->source();
            const size_t line_no = src.begin.line;
            if (line_no == 0 || line_no > lines.size() || src.end.line != src.begin.line)
                return fail(Code::invalid_argument, "{}:{}: {} spans several lines; kgpu cannot edit it in place", source_,
                            line_no, header_text(full));
            std::string& line = lines[line_no - 1];
            std::string_view stripped = strings::trim(line);
            if (!stripped.starts_with(key_text(key)) && !stripped.starts_with(quote(key)))
                return fail(Code::invalid_argument, "{}:{}: {} is not set on a line of its own; kgpu cannot edit it in place",
                            source_, line_no, header_text(full));
            line = indent_of(line) + assignment;
            auto out = join_lines(lines);
            if (auto st = reparse_check(out); !st) return st;
            text_ = std::move(out);
            return {};
        }
    }
    const auto headers = header_indexes(*doc, lines);
    if (path.empty()) {
        lines.insert(lines.begin() + static_cast<long>(top_level_key_place(*doc, headers, lines)), assignment);
    } else {
        std::optional<size_t> own;
        for (size_t h : headers) {
            auto hp = header_path(lines[h]);
            if (hp && *hp == path) own = h;
        }
        if (own) {
            // After the table's last key line (keys keep the order they are added in).
            size_t at = *own + 1;
            while (at < lines.size()) {
                auto t = strings::trim(lines[at]);
                if (t.empty() || t.starts_with("[")) break;
                ++at;
            }
            lines.insert(lines.begin() + static_cast<long>(at), indent_of(lines[*own]) + "  " + assignment);
        } else {
            auto [at, indent] = new_section_place(path, headers, lines);
            std::vector<std::string> block = {"", indent + "[" + header_text(path) + "]", indent + "  " + assignment};
            if (at == 0) block.erase(block.begin());
            if (at < lines.size() && !strings::trim(lines[at]).empty()) block.push_back("");
            lines.insert(lines.begin() + static_cast<long>(at), block.begin(), block.end());
        }
    }
    auto out = join_lines(lines);
    if (auto st = reparse_check(out); !st) return st;
    text_ = std::move(out);
    return {};
}

Status Text::remove_key(const Path& path, const std::string& key) {
    auto doc = parse(text_, source_);
    if (!doc) return std::unexpected(doc.error());
    const toml::table* table = find_table(*doc, path);
    if (!table) return {};
    const toml::node* existing = table->get(key);
    if (!existing) return {};
    Path full = path;
    full.push_back(key);
    if (table->is_inline())
        return fail(Code::invalid_argument, "{}: [{}] is an inline table; kgpu cannot remove {} from it in place", source_,
                    header_text(path), key);
    auto lines = split_lines(text_);
    const auto& src = existing->source();
    const size_t line_no = src.begin.line;
    if (line_no == 0 || line_no > lines.size() || src.end.line != src.begin.line)
        return fail(Code::invalid_argument, "{}:{}: {} spans several lines; kgpu cannot remove it in place", source_,
                    line_no, header_text(full));
    std::string_view stripped = strings::trim(lines[line_no - 1]);
    if (!stripped.starts_with(key_text(key)) && !stripped.starts_with(quote(key)))
        return fail(Code::invalid_argument, "{}:{}: {} is not set on a line of its own; kgpu cannot remove it in place",
                    source_, line_no, header_text(full));
    lines.erase(lines.begin() + static_cast<long>(line_no - 1));
    auto out = join_lines(lines);
    if (auto st = reparse_check(out); !st) return st;
    text_ = std::move(out);
    return {};
}

Status Text::replace_table(const Path& path, const toml::table& value) {
    auto doc = parse(text_, source_);
    if (!doc) return std::unexpected(doc.error());
    Path parent(path.begin(), path.end() - 1);
    const toml::table* parent_table = find_table(*doc, parent);
    const toml::node* existing = parent_table ? parent_table->get(path.back()) : nullptr;
    if (existing && existing->is_table() && *existing->as_table() == value) return {};
    if (existing && !existing->is_table())
        return fail(Code::invalid_argument, "{}: {} is not a table; kgpu cannot replace it in place", source_,
                    header_text(path));
    if (existing && existing->as_table()->is_inline())
        return fail(Code::invalid_argument, "{}: [{}] is an inline table; kgpu edits only standard tables", source_,
                    header_text(path));
    auto lines = split_lines(text_);
    auto headers = header_indexes(*doc, lines);
    size_t insert_at = 0;
    std::string indent;
    if (existing) {
        // Remove every section of the table and its subtables, last first.
        std::vector<std::pair<size_t, size_t>> ranges;
        for (size_t h : headers) {
            auto hp = any_header_path(lines[h]);
            if (hp && is_prefix(path, *hp)) ranges.push_back(section_range(h, headers, lines));
        }
        if (ranges.empty())
            return fail(Code::invalid_argument, "{}: {} is defined without a [{}] header (dotted keys); kgpu cannot "
                        "replace it in place", source_, header_text(path), header_text(path));
        insert_at = ranges.front().first;
        indent = indent_of(lines[insert_at]);
        for (auto it = ranges.rbegin(); it != ranges.rend(); ++it)
            lines.erase(lines.begin() + static_cast<long>(it->first), lines.begin() + static_cast<long>(it->second));
        // What remains must no longer define the table (e.g. no dotted keys in its parent).
        auto check = parse(join_lines(lines), source_);
        if (!check) return std::unexpected(check.error());
        const toml::table* p = find_table(*check, parent);
        if (p && p->get(path.back()))
            return fail(Code::invalid_argument, "{}: parts of {} are set outside its own [{}] sections; kgpu cannot "
                        "replace it in place", source_, header_text(path), header_text(path));
        // Keep a blank line between the previous section and the new one.
        while (insert_at > 0 && strings::trim(lines[insert_at - 1]).empty()) {
            lines.erase(lines.begin() + static_cast<long>(insert_at - 1));
            --insert_at;
        }
    } else {
        std::tie(insert_at, indent) = new_section_place(path, headers, lines);
    }
    std::vector<std::string> block = split_lines(serialize_table(value, path, indent));
    if (insert_at > 0) block.insert(block.begin(), "");
    if (insert_at < lines.size() && !strings::trim(lines[insert_at]).empty()) block.push_back("");
    lines.insert(lines.begin() + static_cast<long>(insert_at), block.begin(), block.end());
    auto out = join_lines(lines);
    if (auto st = reparse_check(out); !st) return st;
    text_ = std::move(out);
    return {};
}

}  // namespace kgpu::runtime::tomledit
