// Applies a unified diff to a text, strictly, so tests and the diff fuzz target can check that a
// diff made by runtime::unified_diff takes `before` to `after`.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kgpu::test {

// `before` with `patch` applied: every context and removed line must match, hunks in order and
// their counts right; "\ No newline at end of file" removes the newline of the line before it.
// nullopt when the patch does not apply.
inline std::optional<std::string> apply_patch(const std::string& before, const std::string& patch) {
    auto split = [](std::string_view s) {
        std::vector<std::string> out;
        while (!s.empty()) {
            auto nl = s.find('\n');
            out.emplace_back(s.substr(0, nl == std::string_view::npos ? s.size() : nl + 1));
            if (nl == std::string_view::npos) break;
            s.remove_prefix(nl + 1);
        }
        return out;
    };
    const auto a = split(before), p = split(patch);
    if (p.size() < 2 || !p[0].starts_with("--- ") || !p[1].starts_with("+++ ")) return std::nullopt;
    std::string out;
    size_t ai = 0;
    for (size_t k = 2; k < p.size();) {
        unsigned as = 0, ac = 0, bs = 0, bc = 0;
        if (std::sscanf(p[k].c_str(), "@@ -%u,%u +%u,%u @@", &as, &ac, &bs, &bc) != 4) return std::nullopt;
        const size_t first = ac ? as - 1 : as;  // an empty range names the line before it
        if (first < ai || first > a.size()) return std::nullopt;
        while (ai < first) out += a[ai++];
        ++k;
        size_t seen_a = 0, seen_b = 0;
        char prev = 0;  // the kind of the previous line: a "\ No newline" marker applies to it
        while (k < p.size() && !p[k].starts_with("@@")) {
            const std::string& l = p[k++];
            if (l.starts_with("\\ No newline at end of file")) {
                if (prev == 0) return std::nullopt;
                if ((prev == ' ' || prev == '-') && a[ai - 1].back() == '\n') return std::nullopt;
                if (prev == ' ' || prev == '+') {
                    if (out.empty() || out.back() != '\n') return std::nullopt;
                    out.pop_back();
                }
                prev = 0;
                continue;
            }
            const char kind = l[0];
            const std::string text = l.substr(1);
            if (kind != ' ' && kind != '-' && kind != '+') return std::nullopt;
            if (kind == ' ' || kind == '-') {
                if (ai >= a.size()) return std::nullopt;
                std::string have = a[ai];
                if (have.back() != '\n') have += '\n';
                if (have != text) return std::nullopt;
                ++ai, ++seen_a;
            }
            if (kind == ' ' || kind == '+') {
                out += text;
                ++seen_b;
            }
            prev = kind;
        }
        if (seen_a != ac || seen_b != bc) return std::nullopt;
    }
    while (ai < a.size()) out += a[ai++];
    return out;
}

}  // namespace kgpu::test
