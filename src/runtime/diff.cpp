#include "runtime/diff.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace kgpu::runtime {

namespace {

std::vector<std::string_view> lines_of(std::string_view s) {
    std::vector<std::string_view> out;
    while (!s.empty()) {
        auto nl = s.find('\n');
        if (nl == std::string_view::npos) {
            out.push_back(s);
            break;
        }
        out.push_back(s.substr(0, nl));
        s.remove_prefix(nl + 1);
    }
    return out;
}

}  // namespace

std::string unified_diff(std::string_view before, std::string_view after, std::string_view a_name, std::string_view b_name) {
    if (before == after) return "";
    const auto a = lines_of(before), b = lines_of(after);
    const size_t n = a.size(), m = b.size();
    // LCS table (configs are small: a few hundred lines).
    std::vector<std::vector<unsigned>> lcs(n + 1, std::vector<unsigned>(m + 1, 0));
    for (size_t i = n; i-- > 0;)
        for (size_t j = m; j-- > 0;)
            lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
    struct Op {
        char kind;  // ' ', '-', '+'
        size_t ai, bi;
    };
    std::vector<Op> ops;
    size_t i = 0, j = 0;
    while (i < n || j < m) {
        if (i < n && j < m && a[i] == b[j]) ops.push_back({' ', i++, j++});
        else if (j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j])) ops.push_back({'+', i, j++});
        else ops.push_back({'-', i++, j});
    }
    std::string out = fmt::format("--- {}\n+++ {}\n", a_name, b_name);
    const size_t ctx = 3;
    size_t k = 0;
    while (k < ops.size()) {
        if (ops[k].kind == ' ') {
            ++k;
            continue;
        }
        size_t start = k >= ctx ? k - ctx : 0;
        size_t end = k;
        // Extend the hunk while changes are within 2*ctx lines of each other.
        size_t last_change = k;
        for (size_t x = k; x < ops.size(); ++x) {
            if (ops[x].kind != ' ') last_change = x;
            else if (x - last_change > 2 * ctx) break;
            end = x;
        }
        end = std::min(ops.size() - 1, last_change + ctx);
        size_t a_count = 0, b_count = 0;
        for (size_t x = start; x <= end; ++x) {
            if (ops[x].kind != '+') ++a_count;
            if (ops[x].kind != '-') ++b_count;
        }
        const size_t a_start = ops[start].ai + (a_count ? 1 : 0), b_start = ops[start].bi + (b_count ? 1 : 0);
        out += fmt::format("@@ -{},{} +{},{} @@\n", a_start, a_count, b_start, b_count);
        for (size_t x = start; x <= end; ++x) {
            const auto& line = ops[x].kind == '+' ? b[ops[x].bi] : a[ops[x].ai];
            out += fmt::format("{}{}\n", ops[x].kind, line);
        }
        k = end + 1;
    }
    return out;
}

}  // namespace kgpu::runtime
