// Unified diff in linear space: Myers' O(ND) algorithm with the "middle snake" divide and
// conquer (E. Myers, "An O(ND) Difference Algorithm and Its Variations", 1986, section 4b).
//
// The old version filled an (N+1)x(M+1) LCS table: a 40k-line config took 6.3 GB (issue #14).
// Memory here is O(N+M): the lines (views into the inputs), one integer class per line, two
// diagonal vectors and one "changed" flag per line. Time is O((N+M)·D) for D differing lines,
// bounded for inputs with very many differences by the cost cap below.
#include "runtime/diff.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

namespace kgpu::runtime {

namespace {

struct Line {
    std::string_view text;
    bool newline = true;  // false only for a last line without "\n"
};

std::vector<Line> lines_of(std::string_view s) {
    std::vector<Line> out;
    while (!s.empty()) {
        auto nl = s.find('\n');
        if (nl == std::string_view::npos) {
            out.push_back({s, false});
            break;
        }
        out.push_back({s.substr(0, nl), true});
        s.remove_prefix(nl + 1);
    }
    return out;
}

// After a search has spent this many steps (edit cost) on one sub-problem without finding the
// middle snake, it splits at the furthest point reached instead: the script stays correct but
// may no longer be minimal. Only texts with thousands of scattered differences get there; a
// configured containerd config differs in a few dozen lines.
constexpr int kCostCap = 2048;

// The comparison: lines as integer classes (equal lines, equal classes), marks changed lines.
class Differ {
public:
    Differ(std::vector<int32_t> a, std::vector<int32_t> b)
        : a_(std::move(a)), b_(std::move(b)), a_changed_(a_.size()), b_changed_(b_.size()) {
        const size_t diagonals = a_.size() + b_.size() + 3;
        fd_.resize(diagonals);
        bd_.resize(diagonals);
        offset_ = static_cast<int64_t>(b_.size()) + 1;
    }

    // Marks every line of a and b that is not in the (near-)longest common subsequence.
    void run() {
        // An explicit stack instead of recursion: heuristic splits can be lopsided, and a deep
        // recursion over 100k lines must not depend on the thread's stack size.
        struct Task {
            int64_t xoff, xlim, yoff, ylim;
            bool minimal;
        };
        std::vector<Task> todo{{0, static_cast<int64_t>(a_.size()), 0, static_cast<int64_t>(b_.size()), false}};
        while (!todo.empty()) {
            auto [xoff, xlim, yoff, ylim, minimal] = todo.back();
            todo.pop_back();
            // Equal lines at both ends belong to the common subsequence.
            while (xoff < xlim && yoff < ylim && a_[xoff] == b_[yoff]) ++xoff, ++yoff;
            while (xoff < xlim && yoff < ylim && a_[xlim - 1] == b_[ylim - 1]) --xlim, --ylim;
            if (xoff == xlim) {
                for (int64_t y = yoff; y < ylim; ++y) b_changed_[y] = true;
            } else if (yoff == ylim) {
                for (int64_t x = xoff; x < xlim; ++x) a_changed_[x] = true;
            } else {
                const Split s = middle_snake(xoff, xlim, yoff, ylim, minimal);
                todo.push_back({s.x, xlim, s.y, ylim, s.hi_minimal});
                todo.push_back({xoff, s.x, yoff, s.y, s.lo_minimal});
            }
        }
    }

    const std::vector<bool>& a_changed() const { return a_changed_; }
    const std::vector<bool>& b_changed() const { return b_changed_; }

private:
    struct Split {
        int64_t x, y;
        bool lo_minimal, hi_minimal;  // whether each half must be diffed without the cost cap
    };

    int64_t& fd(int64_t k) { return fd_[static_cast<size_t>(k + offset_)]; }
    int64_t& bd(int64_t k) { return bd_[static_cast<size_t>(k + offset_)]; }

    // Finds a point (x, y) on an optimal path from (xoff, yoff) to (xlim, ylim) by running the
    // greedy search forward from the start and backward from the end at once, diagonal k = x - y,
    // until the two overlap (the middle snake). Both ends are known to differ.
    Split middle_snake(int64_t xoff, int64_t xlim, int64_t yoff, int64_t ylim, bool minimal) {
        const int64_t dmin = xoff - ylim, dmax = xlim - yoff;  // the diagonals of this box
        const int64_t fmid = xoff - yoff, bmid = xlim - ylim;  // where each search starts
        int64_t fmin = fmid, fmax = fmid, bmin = bmid, bmax = bmid;
        const bool odd = ((fmid - bmid) & 1) != 0;  // the searches meet on a forward step
        fd(fmid) = xoff;
        bd(bmid) = xlim;
        for (int64_t cost = 1;; ++cost) {
            // Forward: extend each reachable diagonal by one edit, then along equal lines.
            if (fmin > dmin) fd(--fmin - 1) = -1;
            else ++fmin;
            if (fmax < dmax) fd(++fmax + 1) = -1;
            else --fmax;
            for (int64_t k = fmax; k >= fmin; k -= 2) {
                const int64_t lo = fd(k - 1), hi = fd(k + 1);
                int64_t x = lo >= hi ? lo + 1 : hi;
                int64_t y = x - k;
                while (x < xlim && y < ylim && a_[x] == b_[y]) ++x, ++y;
                fd(k) = x;
                if (odd && bmin <= k && k <= bmax && bd(k) <= x) return {x, y, true, true};
            }
            // Backward, from the end.
            if (bmin > dmin) bd(--bmin - 1) = INT64_MAX;
            else ++bmin;
            if (bmax < dmax) bd(++bmax + 1) = INT64_MAX;
            else --bmax;
            for (int64_t k = bmax; k >= bmin; k -= 2) {
                const int64_t lo = bd(k - 1), hi = bd(k + 1);
                int64_t x = lo < hi ? lo : hi - 1;
                int64_t y = x - k;
                while (xoff < x && yoff < y && a_[x - 1] == b_[y - 1]) --x, --y;
                bd(k) = x;
                if (!odd && fmin <= k && k <= fmax && x <= fd(k)) return {x, y, true, true};
            }
            if (minimal || cost < kCostCap) continue;
            // Too expensive: split where one search got furthest (largest x + y forward, smallest
            // backward), so each round makes progress; that half is then diffed exactly.
            int64_t fbest = -1, fxbest = 0;
            for (int64_t k = fmax; k >= fmin; k -= 2) {
                int64_t x = std::min(fd(k), xlim), y = x - k;
                if (ylim < y) x = ylim + k, y = ylim;
                if (fbest < x + y) fbest = x + y, fxbest = x;
            }
            int64_t bbest = INT64_MAX, bxbest = 0;
            for (int64_t k = bmax; k >= bmin; k -= 2) {
                int64_t x = std::max(xoff, bd(k)), y = x - k;
                if (y < yoff) x = yoff + k, y = yoff;
                if (x + y < bbest) bbest = x + y, bxbest = x;
            }
            if ((xlim + ylim) - bbest < fbest - (xoff + yoff)) return {fxbest, fbest - fxbest, true, false};
            return {bxbest, bbest - bxbest, false, true};
        }
    }

    std::vector<int32_t> a_, b_;
    std::vector<bool> a_changed_, b_changed_;
    std::vector<int64_t> fd_, bd_;
    int64_t offset_ = 0;
};

struct LineHash {
    size_t operator()(const Line& l) const { return std::hash<std::string_view>{}(l.text) ^ (l.newline ? 0 : 0x9e3779b9u); }
};
struct LineEq {
    bool operator()(const Line& x, const Line& y) const { return x.newline == y.newline && x.text == y.text; }
};

// Which lines of `a` and of `b` the shortest edit script changes.
std::pair<std::vector<bool>, std::vector<bool>> changed_lines(const std::vector<Line>& a, const std::vector<Line>& b) {
    const size_t n = a.size(), m = b.size();
    // Lines as classes; a line that occurs in only one text is changed whatever the alignment,
    // so the search only sees lines that occur in both (which keeps it fast when many differ).
    std::unordered_map<Line, int32_t, LineHash, LineEq> classes;
    classes.reserve(n + m);
    std::vector<int32_t> ca(n), cb(m);
    for (size_t i = 0; i < n; ++i) ca[i] = classes.try_emplace(a[i], static_cast<int32_t>(classes.size())).first->second;
    for (size_t j = 0; j < m; ++j) cb[j] = classes.try_emplace(b[j], static_cast<int32_t>(classes.size())).first->second;
    std::vector<uint8_t> in_a(classes.size()), in_b(classes.size());
    for (int32_t c : ca) in_a[c] = 1;
    for (int32_t c : cb) in_b[c] = 1;
    std::vector<bool> a_changed(n), b_changed(m);
    std::vector<int32_t> ra, rb;         // the lines occurring in both texts
    std::vector<size_t> ra_at, rb_at;    // their indices in a and b
    for (size_t i = 0; i < n; ++i) {
        if (in_b[ca[i]]) ra.push_back(ca[i]), ra_at.push_back(i);
        else a_changed[i] = true;
    }
    for (size_t j = 0; j < m; ++j) {
        if (in_a[cb[j]]) rb.push_back(cb[j]), rb_at.push_back(j);
        else b_changed[j] = true;
    }
    classes = {};
    ca = {}, cb = {};
    {
        Differ d(std::move(ra), std::move(rb));
        d.run();
        for (size_t i = 0; i < ra_at.size(); ++i)
            if (d.a_changed()[i]) a_changed[ra_at[i]] = true;
        for (size_t j = 0; j < rb_at.size(); ++j)
            if (d.b_changed()[j]) b_changed[rb_at[j]] = true;
    }
    return {std::move(a_changed), std::move(b_changed)};
}

}  // namespace

std::string unified_diff(std::string_view before, std::string_view after, std::string_view a_name, std::string_view b_name) {
    if (before == after) return "";
    const auto a = lines_of(before), b = lines_of(after);
    const size_t n = a.size(), m = b.size();
    const auto [a_changed, b_changed] = changed_lines(a, b);

    // The edit script, walked hunk by hunk: unchanged lines pair up in order.
    struct Op {
        char kind;  // ' ', '-', '+'
        uint32_t ai, bi;
    };
    std::vector<Op> ops;
    ops.reserve(n + m);
    for (size_t i = 0, j = 0; i < n || j < m;) {
        if (i < n && a_changed[i]) ops.push_back({'-', static_cast<uint32_t>(i++), static_cast<uint32_t>(j)});
        else if (j < m && b_changed[j]) ops.push_back({'+', static_cast<uint32_t>(i), static_cast<uint32_t>(j++)});
        else ops.push_back({' ', static_cast<uint32_t>(i++), static_cast<uint32_t>(j++)});
    }

    std::string out = fmt::format("--- {}\n+++ {}\n", a_name, b_name);
    constexpr size_t ctx = 3;
    auto append_line = [&](char kind, const Line& l) {
        out += kind;
        out += l.text;
        out += '\n';
        if (!l.newline) out += "\\ No newline at end of file\n";
    };
    size_t k = 0;
    while (k < ops.size()) {
        if (ops[k].kind == ' ') {
            ++k;
            continue;
        }
        // A hunk: this change, and every later one separated from the previous by at most 2*ctx
        // unchanged lines (their contexts would touch), with ctx lines of context around.
        const size_t start = k >= ctx ? k - ctx : 0;
        size_t last_change = k;
        for (size_t x = k + 1; x < ops.size() && x - last_change <= 2 * ctx + 1; ++x)
            if (ops[x].kind != ' ') last_change = x;
        const size_t end = std::min(ops.size() - 1, last_change + ctx);
        size_t a_count = 0, b_count = 0;
        for (size_t x = start; x <= end; ++x) {
            if (ops[x].kind != '+') ++a_count;
            if (ops[x].kind != '-') ++b_count;
        }
        // An empty range is numbered by the line before it (0 at the top), as diff -u does.
        const size_t a_start = ops[start].ai + (a_count ? 1 : 0), b_start = ops[start].bi + (b_count ? 1 : 0);
        out += fmt::format("@@ -{},{} +{},{} @@\n", a_start, a_count, b_start, b_count);
        for (size_t x = start; x <= end; ++x) append_line(ops[x].kind, ops[x].kind == '+' ? b[ops[x].bi] : a[ops[x].ai]);
        k = end + 1;
    }
    return out;
}

}  // namespace kgpu::runtime
