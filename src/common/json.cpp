#include "common/json.h"

#include <cctype>

namespace kgpu::json {

namespace {

// A JSON null every absent member refers to, and the empty containers absent objects/arrays read as.
const nlohmann::json& null_value() {
    static const nlohmann::json v;
    return v;
}
const nlohmann::json& empty_object() {
    static const nlohmann::json v = nlohmann::json::object();
    return v;
}
const nlohmann::json& empty_array() {
    static const nlohmann::json v = nlohmann::json::array();
    return v;
}

// How messages show the value found: containers by their type, scalars by their (shortened) text.
std::string found(const nlohmann::json& v) {
    if (v.is_object()) return "an object";
    if (v.is_array()) return "an array";
    std::string text = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (text.size() > 40) text = text.substr(0, 37) + "...";
    return text;
}

}  // namespace

std::string path_step(std::string_view key) {
    bool ident = !key.empty() && (std::isalpha(static_cast<unsigned char>(key[0])) || key[0] == '_');
    for (char c : key) ident = ident && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (ident) return "." + std::string(key);
    // Quoted as a JSON string, so any key (quotes, control characters) reads back unambiguously.
    return "[" + nlohmann::json(std::string(key)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "]";
}

Reader::Reader(const nlohmann::json& value, std::string_view document) : value_(&value), document_(document), path_(".") {}

void Reader::fail(std::string_view expected) const {
    throw ShapeError{Error::make(Code::parse, "{}: {}: expected {}, found {}", document_, path_, expected, found(*value_))};
}

std::string Reader::child(const std::string& step) const {
    if (path_ != ".") return path_ + step;
    return step.starts_with('.') ? step : "." + step;  // jq: .items, .[0], .["a/b"]
}

void Reader::expect_object() const {
    if (!value_->is_object()) fail("an object");
}

Reader Reader::member(std::string_view key) const {
    expect_object();
    auto it = value_->find(key);
    return Reader(it == value_->end() ? &null_value() : &*it, document_, child(path_step(key)));
}

bool Reader::has(std::string_view key) const { return !member(key).is_null(); }

std::optional<Reader> Reader::find(std::string_view key) const {
    Reader m = member(key);
    if (m.is_null()) return std::nullopt;
    return m;
}

Reader Reader::object(std::string_view key) const {
    Reader m = member(key);
    if (m.is_null()) return Reader(&empty_object(), document_, std::move(m.path_));
    m.expect_object();
    return m;
}

Reader Reader::array(std::string_view key) const {
    Reader m = member(key);
    if (m.is_null()) return Reader(&empty_array(), document_, std::move(m.path_));
    if (!m.is_array()) m.fail("an array");
    return m;
}

std::string Reader::string(std::string_view key, std::string_view fallback) const {
    Reader m = member(key);
    if (m.is_null()) return std::string(fallback);
    return m.as_string();
}

bool Reader::boolean(std::string_view key, bool fallback) const {
    Reader m = member(key);
    if (m.is_null()) return fallback;
    if (!m.value_->is_boolean()) m.fail("true or false");
    return m.value_->get<bool>();
}

std::vector<Reader> Reader::elements() const {
    if (!value_->is_array()) fail("an array");
    std::vector<Reader> out;
    out.reserve(value_->size());
    size_t i = 0;
    for (const auto& v : *value_) out.push_back(Reader(&v, document_, child("[" + std::to_string(i++) + "]")));
    return out;
}

std::vector<std::pair<std::string, Reader>> Reader::members() const {
    expect_object();
    std::vector<std::pair<std::string, Reader>> out;
    out.reserve(value_->size());
    for (const auto& [k, v] : value_->items()) out.emplace_back(k, Reader(&v, document_, child(path_step(k))));
    return out;
}

std::string Reader::as_string() const {
    if (!value_->is_string()) fail("a string");
    return value_->get<std::string>();
}

std::string Reader::as_scalar_text() const {
    if (value_->is_string()) return value_->get<std::string>();
    if (!value_->is_number()) fail("a string or a number");
    return value_->dump();
}

Status check_depth(std::string_view text, std::string_view document, size_t limit) {
    size_t depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') ++i;  // the escaped character cannot end the string
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > limit)
                return fail(Code::parse, "{}: JSON nested deeper than {} levels (at byte {}); refused", document, limit, i);
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return {};
}

Result<nlohmann::json> parse(std::string_view text, std::string_view document) {
    if (auto st = check_depth(text, document); !st) return std::unexpected(st.error());
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 3: ...".
        std::string_view what = e.what();
        if (auto close = what.find("] "); what.starts_with("[json.exception.") && close != std::string_view::npos)
            what.remove_prefix(close + 2);
        return fail(Code::parse, "{}: not JSON: {}", document, what);
    }
}

}  // namespace kgpu::json
