// A strict YAML walker with located errors: "<file>:<line>: key '<a.b>': <what was expected>".
// The device plugin's config file and the exporter's web config read through it (kube's
// kubeconfig and the MIG manager's mig-parted config keep their own tools' messages). Header-only:
// its users link yaml-cpp.
//
// Null: a key given as `key:` or `key: null` counts as not set (NVIDIA's plugin and the
// Prometheus exporter-toolkit both read it so): unset() says so, scalar() and strings() read it as
// "" and an empty list, expect_map() as an empty map; boolean() and number() refuse it.
#pragma once

#include <algorithm>
#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "common/error.h"
#include "common/unknown_key.h"

namespace kgpu::yaml {

// Thrown by Walker::error; the parser's entry point catches it and returns the error.
struct ParseError {
    Error error;
};

class Walker {
public:
    // What expect_map() does with a key it does not allow: an error, or one entry in unknown()
    // (a schema whose reader ignores unknown keys, as NVIDIA's config parser does).
    enum class Unknown { error, collect };

    explicit Walker(std::string source, Unknown unknown = Unknown::error)
        : source_(std::move(source)), unknown_policy_(unknown) {}

    const std::string& source() const { return source_; }

    [[noreturn]] void error(const YAML::Node& node, const std::string& path, const std::string& what) const {
        throw ParseError{Error::make(Code::parse, "{}:{}: key '{}': {}", source_, line_of(node), path, what)};
    }

    // Checks that `node` is a map (or null: an empty block) whose keys are all `allowed`.
    void expect_map(const YAML::Node& node, const std::string& path, const std::vector<std::string_view>& allowed) const {
        if (node.IsNull()) return;
        if (!node.IsMap()) error(node, path, "expected a map");
        for (const auto& kv : node) {
            const std::string key = kv.first.Scalar();
            if (std::ranges::find(allowed, key) != allowed.end()) continue;
            const std::string expected = fmt::format("{}", fmt::join(allowed, ", "));
            if (unknown_policy_ == Unknown::error)
                error(kv.first, join(path, key), fmt::format("unknown key (expected one of: {})", expected));
            unknown_.push_back(UnknownKey{source_, line_of(kv.first), join(path, key), expected});
        }
    }
    // The keys expect_map() collected, in file order.
    std::vector<UnknownKey>& unknown() const { return unknown_; }

    static std::string join(const std::string& path, std::string_view key) {
        return path.empty() ? std::string(key) : path + "." + std::string(key);
    }
    static bool unset(const YAML::Node& node) { return !node || node.IsNull(); }
    static int line_of(const YAML::Node& node) {
        const int line = node.Mark().line;
        return line >= 0 ? line + 1 : 0;
    }

    std::string scalar(const YAML::Node& node, const std::string& path, std::string_view what = "a string") const {
        if (node.IsNull()) return "";
        if (!node.IsScalar()) error(node, path, fmt::format("expected {}", what));
        return node.Scalar();
    }
    bool boolean(const YAML::Node& node, const std::string& path) const {
        bool v = false;
        if (!node.IsScalar() || !YAML::convert<bool>::decode(node, v))
            error(node, path, "expected a boolean (true or false)");
        return v;
    }
    unsigned number(const YAML::Node& node, const std::string& path, unsigned min, unsigned max) const {
        if (!node.IsScalar()) error(node, path, "expected a number");
        const std::string& text = node.Scalar();
        unsigned v = 0;
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc{} || ptr != text.data() + text.size() || v < min || v > max)
            error(node, path, fmt::format("expected a number {}..{}, got '{}'", min, max, text));
        return v;
    }
    std::vector<std::string> strings(const YAML::Node& node, const std::string& path) const {
        std::vector<std::string> out;
        if (node.IsNull()) return out;
        if (!node.IsSequence()) error(node, path, "expected a list of strings");
        for (const auto& item : node) out.push_back(scalar(item, path));
        return out;
    }
    // Runs a Result-returning parser on a scalar and turns its error into a located one.
    template <class T, class F>
    T value(const YAML::Node& node, const std::string& path, F&& parse) const {
        const std::string text = scalar(node, path);
        auto r = parse(text);
        if (!r) error(node, path, r.error().message);
        return *r;
    }

private:
    std::string source_;
    Unknown unknown_policy_;
    mutable std::vector<UnknownKey> unknown_;
};

}  // namespace kgpu::yaml
