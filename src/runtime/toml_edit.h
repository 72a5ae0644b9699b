// TOML for the runtime configs (containerd, CRI-O): parse with positions in errors, walk and
// build tables, write a generated document, and edit an operator's file in place.
//
// In-place edits change only the lines that carry the edited keys and tables, so comments,
// order and spacing of everything else survive (re-serialising with toml++ would drop every
// comment). toml++ parses the text only to locate keys and tables; every edit parses its result
// again, and callers compare the final text, parsed, with the document they meant to produce.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "common/error.h"

namespace kgpu::runtime::tomledit {

using Path = std::vector<std::string>;

// Errors: parse, naming source:line:column, when `text` is not TOML.
Result<toml::table> parse(std::string_view text, std::string_view source);

// The table at `path` (the root for an empty path), or nullptr when something on the way is
// missing or not a table.
const toml::table* find_table(const toml::table& root, const Path& path);
toml::table* find_table(toml::table& root, const Path& path);

// The table at `path`, created with its parents when missing. Errors: invalid_argument when a
// key on the way holds a value that is not a table (the message names `source` and the key).
Result<toml::table*> ensure_table(toml::table& root, const Path& path, std::string_view source);

// "plugins.\"io.containerd.grpc.v1.cri\".containerd": keys quoted where TOML needs it.
std::string header_text(const Path& path);

// A value as inline TOML text (strings as basic strings, arrays and tables inline).
std::string format_value(const toml::node& value);

// A whole document as TOML: top-level keys first, then each table as a [header] section with
// its keys, then its subtables (sorted by key, two-space indentation per level). For generated
// files (drop-ins); it keeps no comments.
std::string serialize(const toml::table& doc);

// The sections of one table at `path`, each line prefixed with `indent`.
std::string serialize_table(const toml::table& table, const Path& path, const std::string& indent = "");

// A config file's text under edit. Each call leaves the text valid TOML or fails with the text
// unchanged. Errors: parse (the text was not TOML), invalid_argument when the layout cannot be
// edited line by line (inline tables, a value spanning lines, a table defined by dotted keys):
// the message names the file and the key. A file whose every line ends in CRLF (written on
// Windows, or by a tool that does) keeps CRLF on every line, the added ones included.
class Text {
public:
    Text(std::string text, std::string source);

    // The text, with the file's line endings.
    std::string str() const;

    // Sets `key` in the table at `path` (created when missing); an existing key is rewritten on
    // its own line. An empty path is the top level (new keys go above the first table).
    Status set_key(const Path& path, const std::string& key, const toml::node& value);
    // Removes `key` from the table at `path`; no-op when absent.
    Status remove_key(const Path& path, const std::string& key);
    // Makes the table at `path` equal `value`: its sections are replaced by freshly written
    // ones (in the place of the first), or added after the last section under the same parent
    // when the table is new. A table already equal to `value` is left as it is.
    Status replace_table(const Path& path, const toml::table& value);

private:
    Status reparse_check(const std::string& candidate) const;
    std::string text_;  // with LF line endings while edited
    std::string source_;
    bool crlf_ = false;
};

}  // namespace kgpu::runtime::tomledit
