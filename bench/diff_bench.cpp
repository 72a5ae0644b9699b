// unified_diff (runtime configure --dry-run) on large texts. Run: <build>/bench/kgpu_diff_bench
// --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "runtime/diff.h"

namespace {

std::vector<std::string> config_lines(int n) {
    std::vector<std::string> lines;
    for (int i = 0; i < n; ++i) lines.push_back("  setting_" + std::to_string(i % 5000) + " = \"value " + std::to_string(i) + "\"\n");
    return lines;
}

std::string join(const std::vector<std::string>& lines) {
    std::string s;
    for (const auto& l : lines) s += l;
    return s;
}

// What --dry-run shows: a large config with a dozen lines added and two changed.
void BM_DiffFewChanges(benchmark::State& state) {
    auto lines = config_lines(static_cast<int>(state.range(0)));
    const std::string a = join(lines);
    lines[lines.size() / 3] = "  changed = true\n";
    lines[lines.size() / 2] = "  changed = false\n";
    lines.insert(lines.begin() + 20, 12, "  added = 1\n");
    const std::string b = join(lines);
    for (auto _ : state) benchmark::DoNotOptimize(kgpu::runtime::unified_diff(a, b, "a", "b"));
}
BENCHMARK(BM_DiffFewChanges)->Arg(1000)->Arg(100000)->Unit(benchmark::kMillisecond);

// The worst case: every line in both texts, in a shuffled order (past the cost cap).
void BM_DiffShuffled(benchmark::State& state) {
    auto lines = config_lines(static_cast<int>(state.range(0)));
    const std::string a = join(lines);
    std::mt19937 rng(1);
    std::shuffle(lines.begin(), lines.end(), rng);
    const std::string b = join(lines);
    for (auto _ : state) benchmark::DoNotOptimize(kgpu::runtime::unified_diff(a, b, "a", "b"));
}
BENCHMARK(BM_DiffShuffled)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
