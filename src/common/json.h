// Checked reading of JSON that comes from outside (kubectl output, files an operator names).
//
// nlohmann::json's accessors throw or abort on a value of the wrong type (`value()` on an array,
// `get<std::string>()` on a number, `operator[]` on a const object without the key); valid JSON of
// the wrong shape must instead be an error that names the document and where in it the value is:
//
//     nodes.json: .items[0].metadata: expected an object
//
// Decoding code reads through json::Reader, whose accessors check every type; json::decode()
// runs such code and turns the first mismatch into Error{Code::parse, "<document>: <path>:
// expected <what>"}. Reader throws only inside decode(), which catches it (error.h's policy:
// exceptions only while parsing input, never out of the parsing function).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace kgpu::json {

// A value in a named document, with the path that reached it (jq syntax: `.items[0].metadata`,
// `.limits["nvidia.com/gpu"]`). It refers to the JSON value and to the document's name, which
// must both outlive it (Readers live inside decode()).
//
// Member accessors treat an absent member and a JSON null alike (Kubernetes omits empty fields
// and sometimes writes null), and throw when this value is not an object or the member has
// another type than asked for.
class Reader {
public:
    Reader(const nlohmann::json& value, std::string_view document);

    const nlohmann::json& value() const { return *value_; }
    std::string_view document() const { return document_; }
    const std::string& path() const { return path_; }  // "." for the root
    bool is_null() const { return value_->is_null(); }
    bool is_object() const { return value_->is_object(); }
    bool is_array() const { return value_->is_array(); }
    bool is_string() const { return value_->is_string(); }

    // Whether the member is present and not null (this must be an object).
    bool has(std::string_view key) const;
    // The member when present and not null (this must be an object).
    std::optional<Reader> find(std::string_view key) const;

    // Typed members; absent or null gives the fallback, another type throws.
    Reader object(std::string_view key) const;  // an object; {} when absent
    Reader array(std::string_view key) const;   // an array; [] when absent
    std::string string(std::string_view key, std::string_view fallback = "") const;
    bool boolean(std::string_view key, bool fallback) const;

    // This value, which must have the type asked for.
    std::vector<Reader> elements() const;                          // an array's
    std::vector<std::pair<std::string, Reader>> members() const;  // an object's, in key order
    std::string as_string() const;
    // A string's content, or the JSON text of a number (Kubernetes quantities come as either).
    std::string as_scalar_text() const;

    // Throws the mismatch that decode() reports as "<document>: <path>: expected <what>".
    [[noreturn]] void fail(std::string_view expected) const;

private:
    Reader(const nlohmann::json* value, std::string_view document, std::string path)
        : value_(value), document_(document), path_(std::move(path)) {}
    Reader member(std::string_view key) const;  // value null when absent
    std::string child(const std::string& step) const;  // the path one step further
    void expect_object() const;

    const nlohmann::json* value_;
    std::string_view document_;  // the caller's (decode's argument), which outlives every Reader
    std::string path_;
};

// The mismatch Reader throws; only decode() should ever see it.
struct ShapeError {
    Error error;
};

// Runs `f(Reader)` on `root`, named `document` in messages. Returns what f returns, or the first
// shape mismatch as a parse error. f itself must not throw anything else.
template <class F>
auto decode(const nlohmann::json& root, std::string_view document, F&& f) -> Result<decltype(f(std::declval<Reader>()))> {
    try {
        return std::forward<F>(f)(Reader(root, document));
    } catch (const ShapeError& e) {
        return std::unexpected(e.error);
    }
}

// How deep arrays and objects may nest in JSON kgpu reads from outside. nlohmann::json parses
// deep nesting without recursion, but copying, comparing and serialising a value recurse once per
// level: a config.json nested 70,000 levels deep overflows the stack (a crash, rc 139, of the
// container runtime even for a container that asks for no GPU). No document kgpu reads (OCI
// specs, kubectl output, daemon.json) comes near: an OCI spec nests about 6 levels.
inline constexpr size_t kMaxDepth = 512;

// Refuses `text` when its arrays and objects nest deeper than `limit`: one pass over the bytes
// (strings and their escapes skipped), before any parser sees them. Malformed JSON passes
// (the parser reports it). Errors: parse "<document>: JSON nested deeper than <limit> levels
// (at byte <n>); refused".
Status check_depth(std::string_view text, std::string_view document, size_t limit = kMaxDepth);

// Parses `text` without exceptions, after check_depth. Errors: parse "<document>: not JSON:
// <where and why>", and check_depth's.
Result<nlohmann::json> parse(std::string_view text, std::string_view document);

// jq-style path step: ".name" for identifier-like keys, `["nvidia.com/gpu"]` otherwise.
std::string path_step(std::string_view key);

// The text of a document kgpu writes for people and for the API server (Events, annotations,
// status files). nlohmann's dump() throws on a string that is not UTF-8; such a byte can come
// from outside (a tool's output, a name NVML gives), so each bad one becomes U+FFFD instead of an
// exception that would end the process. Documents whose strings must stay exact (CDI specs,
// caches, OCI specs) refuse them instead.
template <class Json>
std::string dump_text(const Json& doc, int indent = -1) {
    return doc.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace kgpu::json
