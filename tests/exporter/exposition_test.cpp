// The text exposition encoder: escaping, value formatting, families contiguous, HELP/TYPE once.
#include <gtest/gtest.h>

#include <cmath>

#include "exporter/exposition.h"
#include "metrics_text.h"

namespace kgpu::exporter {
namespace {

TEST(Exposition, EscapesLabelValues) {
    LabelSet l;
    l.add("path", "C:\\dir").add("quote", "say \"hi\"").add("multi", "a\nb");
    EXPECT_EQ(l.str(), R"(path="C:\\dir",quote="say \"hi\"",multi="a\nb")");

    Exposition ex;
    auto f = ex.family("m", "help", MetricType::gauge);
    ex.add(f, l, 1);
    auto parsed = test::parse_metrics(ex.render());
    ASSERT_TRUE(parsed.errors.empty()) << parsed.errors[0];
    ASSERT_EQ(parsed.samples.size(), 1u);
    EXPECT_EQ(parsed.samples[0].label("path"), "C:\\dir");
    EXPECT_EQ(parsed.samples[0].label("quote"), "say \"hi\"");
    EXPECT_EQ(parsed.samples[0].label("multi"), "a\nb");
}

TEST(Exposition, EscapesHelpButNotQuotes) {
    EXPECT_EQ(escape_help("a \\ b\nc \"d\""), "a \\\\ b\\nc \"d\"");
    Exposition ex;
    ex.add(ex.family("m", "line one\nline two", MetricType::counter), "", 3);
    EXPECT_EQ(ex.render(), "# HELP m line one\\nline two\n# TYPE m counter\nm 3\n");
}

TEST(Exposition, FamiliesAreContiguousWithHelpAndTypeOnce) {
    Exposition ex;
    auto a = ex.family("a_total", "A.", MetricType::counter);
    auto b = ex.family("b", "B.", MetricType::gauge);
    // Interleaved on purpose.
    for (int i = 0; i < 3; ++i) {
        LabelSet l;
        l.add("i", std::to_string(i));
        ex.add(b, l, i);
        ex.add(a, l, 10 + i);
    }
    EXPECT_EQ(ex.family("b", "other help", MetricType::counter), b);  // first declaration wins
    const std::string text = ex.render();
    auto parsed = test::parse_metrics(text);
    EXPECT_TRUE(parsed.errors.empty()) << parsed.errors[0];
    EXPECT_EQ(parsed.samples.size(), 6u);
    EXPECT_EQ(parsed.type["a_total"], "counter");
    EXPECT_EQ(parsed.type["b"], "gauge");
    EXPECT_EQ(parsed.help["b"], "B.");
    EXPECT_EQ(text.find("# HELP a_total"), 0u);  // declaration order
    EXPECT_LT(text.rfind("a_total{"), text.find("# HELP b"));
    EXPECT_EQ(ex.samples(), 6u);
}

TEST(Exposition, FamiliesWithoutSamplesAreLeftOut) {
    Exposition ex;
    ex.family("empty", "nothing", MetricType::gauge);
    EXPECT_EQ(ex.render(), "");
    ex.add(ex.family("x", "X.", MetricType::gauge), "", 1);
    EXPECT_EQ(ex.render().find("empty"), std::string::npos);
}

TEST(Exposition, ParserCatchesWhatTheEncoderMustNotDo) {
    // The checks below are only worth something if the parser would notice a violation.
    EXPECT_FALSE(test::parse_metrics("a 1\nb 1\na 2\n").errors.empty());                      // not contiguous
    EXPECT_FALSE(test::parse_metrics("# TYPE a gauge\n# TYPE a gauge\na 1\n").errors.empty());  // TYPE twice
    EXPECT_FALSE(test::parse_metrics("a 1\n# HELP a late\n").errors.empty());                 // HELP after samples
    EXPECT_FALSE(test::parse_metrics("a{x=\"1\"} 1\na{x=\"1\"} 2\n").errors.empty());         // duplicate series
    EXPECT_FALSE(test::parse_metrics("a{x=\"\\q\"} 1\n").errors.empty());                     // bad escape
    EXPECT_FALSE(test::parse_metrics("a 1").errors.empty());                                  // no final newline
}

TEST(Exposition, FormatsValues) {
    auto fmt = [](double v) {
        std::string s;
        append_value(s, v);
        return s;
    };
    EXPECT_EQ(fmt(42), "42");
    EXPECT_EQ(fmt(0), "0");
    EXPECT_EQ(fmt(-3), "-3");
    EXPECT_EQ(fmt(0.5), "0.5");
    EXPECT_EQ(fmt(70.123), "70.123");
    EXPECT_EQ(fmt(1200000000.0), "1200000000");
    EXPECT_EQ(fmt(std::nan("")), "NaN");
    EXPECT_EQ(fmt(INFINITY), "+Inf");
    EXPECT_EQ(fmt(-INFINITY), "-Inf");
    EXPECT_EQ(std::stod(fmt(1e300)), 1e300);
}

TEST(Exposition, ValidatesNames) {
    EXPECT_TRUE(valid_metric_name("DCGM_FI_DEV_GPU_UTIL"));
    EXPECT_TRUE(valid_metric_name("kgpu:rate_5m"));
    EXPECT_FALSE(valid_metric_name("9lives"));
    EXPECT_FALSE(valid_metric_name("a-b"));
    EXPECT_FALSE(valid_metric_name(""));
    EXPECT_TRUE(valid_label_name("UUID"));
    EXPECT_TRUE(valid_label_name("GPU_I_ID"));
    EXPECT_FALSE(valid_label_name("__name__"));
    EXPECT_FALSE(valid_label_name("a:b"));
    EXPECT_FALSE(valid_label_name("1a"));
}

}  // namespace
}  // namespace kgpu::exporter
