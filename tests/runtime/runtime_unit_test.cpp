// containerd config editing on real-world configs of each version (tests/runtime/fixtures),
// compared with expected files (tests/runtime/expected; KGPU_UPDATE_EXPECTED=1 rewrites them).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include <toml++/toml.h>

#include "runtime/containerd.h"
#include "runtime/crio.h"
#include "runtime/diff.h"
#include "support/unified_patch.h"
#include "common/strings.h"
#include "support/files.h"

using namespace kgpu;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

using kgpu::test::slurp;

const std::string kDir = std::string(KGPU_SOURCE_DIR) + "/tests/runtime/";

void expect_file(const std::string& name, const std::string& got) {
    const std::string path = kDir + "expected/" + name;
    if (std::getenv("KGPU_UPDATE_EXPECTED")) std::ofstream(path) << got;
    EXPECT_EQ(got, slurp(path)) << "compare with " << path;
}

// Every comment line of `before` is still in `after`.
void expect_comments_kept(const std::string& before, const std::string& after) {
    for (auto line : strings::split(before, '\n')) {
        auto t = strings::trim(line);
        if (t.starts_with("#")) {
            EXPECT_THAT(after, HasSubstr(std::string(t)));
        }
    }
}

struct Case {
    std::string fixture;
    bool set_default, cdi;
};

class RuntimeFixture : public ::testing::TestWithParam<Case> {};

// Issue #22: an in-place edit kgpu refuses because of the file's layout (inline tables, tables
// made of dotted keys) says why and that the drop-in, which does not touch that layout, works.
TEST(RuntimeConfigure, LayoutsThatCannotBeEditedInPlaceSuggestTheDropIn) {
    const std::vector<std::pair<std::string, std::string>> layouts = {
        // The new [..runtimes.nvidia] section would land in a table written inline.
        {"inline plugins", "version = 2\nplugins = { \"io.containerd.grpc.v1.cri\" = { containerd = { snapshotter = \"overlayfs\" } } }\n"},
        {"inline runtimes", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n"
                            "  runtimes = { runc = { runtime_type = \"io.containerd.runc.v2\" } }\n"},
        // The runtime's own table is made of dotted keys.
        {"dotted runtime", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n"
                           "  runtimes.nvidia.runtime_type = \"io.containerd.runc.v2\"\n"},
    };
    for (const auto& [what, text] : layouts) {
        SCOPED_TRACE(what);
        auto edited = runtime::configure(text, "/etc/containerd/config.toml", {});
        ASSERT_FALSE(edited);
        EXPECT_EQ(edited.error().code, Code::invalid_argument) << edited.error().message;
        EXPECT_TRUE(edited.error().message.starts_with("/etc/containerd/config.toml: ")) << edited.error().message;
        EXPECT_THAT(edited.error().message, HasSubstr("kgpu cannot"));
        EXPECT_THAT(edited.error().message, HasSubstr("the drop-in works with this file as it is")) << edited.error().message;
        // ... and it does.
        auto drop = runtime::configure_drop_in(text, "/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml", {});
        EXPECT_TRUE(drop) << drop.error().message;
    }
    // CRI-O's config likewise.
    auto crio = runtime::configure_crio("[crio.runtime]\nruntimes = { runc = { runtime_path = \"/usr/bin/runc\" } }\n",
                                        "/etc/crio/crio.conf", {});
    ASSERT_FALSE(crio);
    EXPECT_THAT(crio.error().message, HasSubstr("/etc/crio/crio.conf: kgpu cannot"));
    EXPECT_THAT(crio.error().message, HasSubstr("the drop-in works with this file as it is"));
    // Dotted keys elsewhere are no obstacle.
    EXPECT_TRUE(runtime::configure("version = 2\nplugins.\"io.containerd.grpc.v1.cri\".containerd.snapshotter = \"overlayfs\"\n",
                                   "/etc/containerd/config.toml", {}));
}

// Issue #22: a file with CRLF line endings keeps them on every line, the added ones too.
TEST(RuntimeConfigure, CrlfFilesStayCrlf) {
    const std::string lf = "# node config\nversion = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n"
                           "  snapshotter = \"overlayfs\"\n";
    std::string crlf;
    for (char c : lf) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
    auto edited = runtime::configure(crlf, "crlf.toml", {});
    ASSERT_TRUE(edited) << edited.error().message;
    size_t bare = 0, lines = 0;
    for (size_t i = 0; i < edited->text.size(); ++i)
        if (edited->text[i] == '\n') {
            ++lines;
            if (i == 0 || edited->text[i - 1] != '\r') ++bare;
        }
    EXPECT_GT(lines, 6u);
    EXPECT_EQ(bare, 0u) << edited->text;
    EXPECT_TRUE(edited->text.starts_with("# node config\r\nversion = 2\r\n"));
    auto again = runtime::configure(edited->text, "crlf.toml", {});
    ASSERT_TRUE(again);
    EXPECT_FALSE(again->changed);
    // The same edit on the LF file gives the same text with LF endings.
    auto plain = runtime::configure(lf, "lf.toml", {});
    std::string as_crlf;
    for (char c : plain->text) as_crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
    EXPECT_EQ(edited->text, as_crlf);
}

}  // namespace

TEST_P(RuntimeFixture, EditMatchesExpectedKeepsCommentsAndIsIdempotent) {
    const auto& c = GetParam();
    const std::string before = slurp(kDir + "fixtures/" + c.fixture + ".toml");
    runtime::ContainerdOptions o;
    o.set_as_default = c.set_default;
    o.enable_cdi = c.cdi;
    auto edited = runtime::configure(before, c.fixture + ".toml", o);
    ASSERT_TRUE(edited) << edited.error().message;
    expect_file(c.fixture + (c.set_default ? ".default" : "") + (c.cdi ? ".cdi" : "") + ".toml", edited->text);
    expect_comments_kept(before, edited->text);
    auto again = runtime::configure(edited->text, "again", o);
    ASSERT_TRUE(again) << again.error().message;
    EXPECT_FALSE(again->changed);
    EXPECT_EQ(again->text, edited->text);
}

INSTANTIATE_TEST_SUITE_P(Configs, RuntimeFixture,
                         ::testing::Values(Case{"v2-systemd", false, false}, Case{"v2-systemd", true, true},
                                           Case{"v1-legacy", true, false}, Case{"v3-containerd2", true, true}),
                         [](const auto& info) {
                             std::string n = info.param.fixture + (info.param.set_default ? "_default" : "") +
                                             (info.param.cdi ? "_cdi" : "");
                             for (auto& ch : n)
                                 if (ch == '-') ch = '_';
                             return n;
                         });

TEST(RuntimeConfigure, CopiesRuncOptionsAndSetsBinaryName) {
    auto edited = runtime::configure(slurp(kDir + "fixtures/v2-systemd.toml"), "v2", {});
    ASSERT_TRUE(edited);
    EXPECT_EQ(edited->version, 2);
    EXPECT_THAT(edited->text, HasSubstr("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]"));
    EXPECT_THAT(edited->text, HasSubstr("BinaryName = \"/usr/bin/nvidia-container-runtime\""));
    // runc's default stays unless --set-as-default.
    EXPECT_THAT(edited->text, HasSubstr("default_runtime_name = \"runc\""));
    const auto nvidia = edited->text.find("runtimes.nvidia.options]");
    EXPECT_NE(edited->text.find("SystemdCgroup = true", nvidia), std::string::npos);
}

TEST(RuntimeConfigure, AlreadyConfiguredIsUnchanged) {
    const std::string before = slurp(kDir + "fixtures/v2-configured.toml");
    runtime::ContainerdOptions o;
    o.set_as_default = true;
    o.enable_cdi = true;
    auto edited = runtime::configure(before, "configured", o);
    ASSERT_TRUE(edited) << edited.error().message;
    EXPECT_FALSE(edited->changed);
}

TEST(RuntimeConfigure, OtherBinaryNameIsReplacedOnItsLine) {
    const std::string before = slurp(kDir + "fixtures/v2-configured.toml");
    runtime::ContainerdOptions o;
    o.runtime_path = "/usr/local/nvidia/toolkit/nvidia-container-runtime";
    auto edited = runtime::configure(before, "configured", o);
    ASSERT_TRUE(edited) << edited.error().message;
    EXPECT_THAT(edited->text, HasSubstr("        BinaryName = \"/usr/local/nvidia/toolkit/nvidia-container-runtime\"\n"));
    EXPECT_THAT(edited->text, Not(HasSubstr("\"/usr/bin/nvidia-container-runtime\"")));
}

TEST(RuntimeConfigure, BrokenTomlIsReportedWithItsLine) {
    auto edited = runtime::configure(slurp(kDir + "fixtures/broken.toml"), "/etc/containerd/config.toml", {});
    ASSERT_FALSE(edited);
    EXPECT_EQ(edited.error().code, Code::parse);
    EXPECT_THAT(edited.error().message, HasSubstr("/etc/containerd/config.toml:4:"));
}

// toml++ 3.3 asserts that a table header starts with a key character before checking it; a
// header like `[*a]` must be the parse error, not an abort (fuzz/containerd_config found it).
TEST(RuntimeConfigure, TableHeaderWithoutAKeyIsAParseError) {
    for (const char* header : {"[*plugins.cri]", "[=plugins]", "[>plugins.runc]"}) {
        auto edited = runtime::configure(std::string("version = 2\n\n") + header + "\n  x = 1\n",
                                         "/etc/containerd/config.toml", {});
        ASSERT_FALSE(edited) << header;
        EXPECT_EQ(edited.error().code, Code::parse) << header;
        EXPECT_THAT(edited.error().message, HasSubstr("/etc/containerd/config.toml:3:2")) << header;
        EXPECT_THAT(edited.error().message, HasSubstr("expected bare key starting character")) << header;
    }
}

// toml++ 3.3 reaches __builtin_unreachable() when it asks whether `é` is whitespace (src/common/
// toml_static.cpp): after the line-ending backslash of a valid multi-line string, and where a key
// may start. The first is a config like any other, the second a parse error naming the line.
TEST(RuntimeConfigure, NonAsciiAfterALineEndingBackslashOrAtAKeyIsParsed) {
    auto edited = runtime::configure("version = 2\n[x]\n  note = \"\"\"caf \\\n    \u00e9clair\"\"\"\n",
                                     "/etc/containerd/config.toml", {});
    ASSERT_TRUE(edited) << edited.error().message;
    EXPECT_THAT(edited->text, HasSubstr("\u00e9clair"));
    for (const char* key : {"\u00e9", "\u3001", "\ufef5"}) {
        auto broken = runtime::configure(std::string("version = 2\n") + key + " = 1\n", "/etc/containerd/config.toml", {});
        ASSERT_FALSE(broken) << key;
        EXPECT_EQ(broken.error().code, Code::parse) << key;
        EXPECT_THAT(broken.error().message, HasSubstr("/etc/containerd/config.toml:2:1")) << key;
    }
}

TEST(RuntimeConfigure, EmptyFileBecomesVersion2AndUnknownVersionIsRefused) {
    auto edited = runtime::configure("", "new", {});
    ASSERT_TRUE(edited) << edited.error().message;
    EXPECT_TRUE(edited->text.starts_with("version = 2\n"));
    EXPECT_THAT(edited->text, HasSubstr("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]"));
    auto v9 = runtime::configure("version = 9\n", "v9.toml", {});
    ASSERT_FALSE(v9);
    EXPECT_THAT(v9.error().message, HasSubstr("v9.toml"));
    EXPECT_THAT(v9.error().message, HasSubstr("expected 1, 2 or 3"));
}

TEST(RuntimeConfigure, InlineTablesAreNotEditedInPlace) {
    auto edited = runtime::configure(
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  runtimes = { nvidia = { runtime_type = \"x\" } }\n",
        "inline.toml", {});
    ASSERT_FALSE(edited);
    EXPECT_THAT(edited.error().message, HasSubstr("--drop-in-config"));
}

TEST(RuntimeDropIn, MainImportsTheDirectoryAndDropInCarriesTheWholeCriTable) {
    const std::string before = slurp(kDir + "fixtures/v2-systemd.toml");
    runtime::ContainerdOptions o;
    o.enable_cdi = true;
    auto r = runtime::configure_drop_in(before, "/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml", o);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->import, "/etc/containerd/conf.d/*.toml");
    expect_file("v2-systemd.main-with-imports.toml", r->main.text);
    expect_file("v2-systemd.99-nvidia.toml", r->drop_in);
    expect_comments_kept(before, r->main.text);
    EXPECT_THAT(r->main.text, HasSubstr("imports = [\"/etc/containerd/conf.d/*.toml\"]"));
    EXPECT_THAT(r->drop_in, HasSubstr("sandbox_image = \"registry.k8s.io/pause:3.9\""));
    EXPECT_THAT(r->drop_in, HasSubstr("enable_cdi = true"));
    auto again = runtime::configure_drop_in(r->main.text, "/etc/containerd/config.toml",
                                            "/etc/containerd/conf.d/99-nvidia.toml", o);
    ASSERT_TRUE(again);
    EXPECT_FALSE(again->main.changed);
    EXPECT_EQ(again->drop_in, r->drop_in);
    // The pattern already imported: the main config is left alone.
    auto glob = runtime::configure_drop_in("version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n", "c",
                                           "/etc/containerd/conf.d/99-nvidia.toml", o);
    ASSERT_TRUE(glob);
    EXPECT_FALSE(glob->main.changed);
    // imports that is not a list of paths is refused.
    auto bad = runtime::configure_drop_in("version = 2\nimports = \"x\"\n", "c.toml", "/etc/containerd/conf.d/99-nvidia.toml", o);
    ASSERT_FALSE(bad);
    EXPECT_THAT(bad.error().message, HasSubstr("imports"));
}

TEST(RuntimeConfigure, PrivilegedWithoutHostDevicesAndEveryOptionSurvive) {
    // The security setting an operator chose on runc carries over to the nvidia runtime.
    const std::string before =
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n"
        "  runtime_type = \"io.containerd.runc.v2\"\n  privileged_without_host_devices = true\n  pod_annotations = [\"a.b/*\"]\n"
        "  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n    SystemdCgroup = true\n"
        "    Root = \"/run/runc\"\n";
    auto edited = runtime::configure(before, "c.toml", {});
    ASSERT_TRUE(edited) << edited.error().message;
    const auto doc = toml::parse(edited->text);
    const auto nv = doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"];
    EXPECT_EQ(nv["privileged_without_host_devices"].value<bool>(), true);
    EXPECT_EQ(nv["pod_annotations"][0].value<std::string>(), "a.b/*");
    EXPECT_EQ(nv["options"]["Root"].value<std::string>(), "/run/runc");
    EXPECT_EQ(nv["options"]["SystemdCgroup"].value<bool>(), true);
    EXPECT_EQ(nv["options"]["BinaryName"].value<std::string>(), "/usr/bin/nvidia-container-runtime");
}

TEST(RuntimeConfigure, ContainerdDumpIsChecked) {
    runtime::ContainerdOptions o;
    o.set_as_default = true;
    const std::string good =
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\ndefault_runtime_name = \"nvidia\"\n"
        "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\n"
        "BinaryName = \"/usr/bin/nvidia-container-runtime\"\n";
    EXPECT_TRUE(runtime::check_dump(good, o));
    auto v3 = runtime::check_dump("version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd]\n"
                                  "default_runtime_name = \"runc\"\n"
                                  "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]\n"
                                  "BinaryName = \"/usr/bin/nvidia-container-runtime\"\n",
                                  o);
    ASSERT_FALSE(v3);
    EXPECT_THAT(v3.error().message, HasSubstr("default_runtime_name runc"));
    auto none = runtime::check_dump("version = 2\n", o);
    ASSERT_FALSE(none);
    EXPECT_THAT(none.error().message, HasSubstr("no runtime named nvidia"));
    EXPECT_EQ(runtime::parse_containerd_version("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1\n"),
              (std::pair{1, 6}));
    EXPECT_EQ(runtime::parse_containerd_version("containerd containerd.io v2.0.2 c507a0257\n"), (std::pair{2, 0}));
    EXPECT_FALSE(runtime::parse_containerd_version(""));
    EXPECT_FALSE(runtime::parse_containerd_version("containerd v99999999999.1\n")) << "too large: no version, no exception";
}

TEST(RuntimeConfigure, StagedMainConfigPointsTheImportAtTheScratchCopy) {
    auto staged = runtime::staged_main_config(
        "version = 2 # c\nimports = [\"/etc/containerd/conf.d/*.toml\", \"extra/*.toml\", \"/opt/x.toml\"]\n",
        "config.toml", "/etc/containerd", "/etc/containerd/conf.d/99-nvidia.toml", "/tmp/s/conf.d/99-nvidia.toml");
    ASSERT_TRUE(staged) << staged.error().message;
    const auto doc = toml::parse(*staged);
    EXPECT_EQ(doc["imports"][0].value<std::string>(), "/tmp/s/conf.d/*.toml");
    EXPECT_EQ(doc["imports"][1].value<std::string>(), "/etc/containerd/extra/*.toml");
    EXPECT_EQ(doc["imports"][2].value<std::string>(), "/opt/x.toml");
}

TEST(RuntimeDiff, ShowsAddedLinesWithContext) {
    const std::string d = runtime::unified_diff("a\nb\nc\n", "a\nb\nx\nc\n", "old", "new");
    EXPECT_EQ(d, "--- old\n+++ new\n@@ -1,3 +1,4 @@\n a\n b\n+x\n c\n");
    EXPECT_EQ(runtime::unified_diff("same\n", "same\n", "a", "b"), "");
}

TEST(RuntimeDiff, HunksAndNumberingAsDiffU) {
    // Changes 6 unchanged lines apart share a hunk; 7 apart, two hunks (as GNU diff -u).
    std::string a, b1, b2;
    for (int i = 1; i <= 20; ++i) a += std::to_string(i) + "\n";
    b1 = a, b2 = a;
    b1.replace(b1.find("2\n"), 2, "two\n");
    b1.replace(b1.find("\n9\n") + 1, 2, "nine\n");
    EXPECT_EQ(runtime::unified_diff(a, b1, "a", "b"),
              "--- a\n+++ b\n@@ -1,12 +1,12 @@\n 1\n-2\n+two\n 3\n 4\n 5\n 6\n 7\n 8\n-9\n+nine\n 10\n 11\n 12\n");
    b2.replace(b2.find("2\n"), 2, "two\n");
    b2.replace(b2.find("\n10\n") + 1, 3, "ten\n");
    EXPECT_EQ(runtime::unified_diff(a, b2, "a", "b"),
              "--- a\n+++ b\n@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n@@ -7,7 +7,7 @@\n 7\n 8\n 9\n-10\n+ten\n 11\n 12\n 13\n");
    // Insertions into and deletions of everything: an empty range is numbered by the line before.
    EXPECT_EQ(runtime::unified_diff("", "x\n", "a", "b"), "--- a\n+++ b\n@@ -0,0 +1,1 @@\n+x\n");
    EXPECT_EQ(runtime::unified_diff("x\ny\n", "", "a", "b"), "--- a\n+++ b\n@@ -1,2 +0,0 @@\n-x\n-y\n");
}

TEST(RuntimeDiff, MissingFinalNewlineIsShown) {
    // "a\nb" and "a\nb\n" differ only in the final newline: diff -u shows it with a marker line.
    EXPECT_EQ(runtime::unified_diff("a\nb", "a\nb\n", "x", "y"),
              "--- x\n+++ y\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n");
    EXPECT_EQ(test::apply_patch("a\nb", runtime::unified_diff("a\nb", "a\nb\n", "x", "y")), "a\nb\n");
    EXPECT_EQ(test::apply_patch("a\nb\n", runtime::unified_diff("a\nb\n", "a\nc", "x", "y")), "a\nc");
}

TEST(RuntimeDiff, DiffsTakeBeforeToAfter) {
    // Pseudo-random edits of texts with many repeated lines (the hard case for a diff), checked
    // by applying the patch; and the common subsequence is the longest for small cases, where a
    // quadratic LCS is cheap to compute here.
    std::mt19937 rng(14);
    auto text = [&](int lines, int alphabet) {
        std::string t;
        for (int i = 0; i < lines; ++i) t += "l" + std::to_string(rng() % alphabet) + "\n";
        return t;
    };
    auto lcs = [](const std::string& x, const std::string& y) {
        std::vector<std::string> a, b;
        std::stringstream sa(x), sb(y);
        for (std::string l; std::getline(sa, l);) a.push_back(l);
        for (std::string l; std::getline(sb, l);) b.push_back(l);
        std::vector<std::vector<int>> t(a.size() + 1, std::vector<int>(b.size() + 1));
        for (size_t i = a.size(); i-- > 0;)
            for (size_t j = b.size(); j-- > 0;) t[i][j] = a[i] == b[j] ? t[i + 1][j + 1] + 1 : std::max(t[i + 1][j], t[i][j + 1]);
        return t[0][0];
    };
    for (int round = 0; round < 300; ++round) {
        const int alphabet = 2 + round % 7;
        const std::string a = text(static_cast<int>(rng() % 40), alphabet), b = text(static_cast<int>(rng() % 40), alphabet);
        const std::string d = runtime::unified_diff(a, b, "a", "b");
        auto applied = test::apply_patch(a, d);
        ASSERT_TRUE(applied) << "a:\n" << a << "b:\n" << b << "diff:\n" << d;
        EXPECT_EQ(*applied, b) << d;
        // Minimal: removed + added = |a| + |b| - 2 LCS.
        size_t removed = 0, added = 0;
        std::stringstream sd(d);
        for (std::string l; std::getline(sd, l);) {
            if (l.starts_with("---") || l.starts_with("+++")) continue;
            removed += l.starts_with("-");
            added += l.starts_with("+");
        }
        const auto count = [](const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); };
        EXPECT_EQ(removed + added, count(a) + count(b) - 2 * static_cast<size_t>(lcs(a, b))) << d;
    }
}

TEST(RuntimeDiff, LargeTextsWithFewChanges) {
    // 100k lines, a few edits spread over it: the old LCS table needed N*M cells (issue #14).
    std::string a;
    for (int i = 0; i < 100000; ++i) a += fmt::format("    key_{} = \"value {}\"\n", i % 5000, i);
    std::string b = a;
    for (size_t pos : {size_t{0}, b.size() / 3, b.size() / 2, b.size() - 40}) {
        pos = b.find('\n', pos) + 1;
        b.insert(pos, "    added = true\n");
    }
    b.erase(b.find("key_4000 = "), 4);
    const std::string d = runtime::unified_diff(a, b, "a", "b");
    auto applied = test::apply_patch(a, d);
    ASSERT_TRUE(applied);
    EXPECT_EQ(*applied, b);
    EXPECT_EQ(std::count(d.begin(), d.end(), '@'), 5 * 4);  // five hunks
}

TEST(RuntimeDiff, ManyDifferencesStayCorrect) {
    // Texts that share every line but in a shuffled order: far past the cost cap, where the
    // search splits heuristically; the patch must still take a to b.
    std::vector<std::string> lines;
    for (int i = 0; i < 20000; ++i) lines.push_back(fmt::format("line {}\n", i % 3000));
    std::string a, b;
    for (const auto& l : lines) a += l;
    std::mt19937 rng(7);
    std::shuffle(lines.begin(), lines.end(), rng);
    for (const auto& l : lines) b += l;
    const std::string d = runtime::unified_diff(a, b, "a", "b");
    auto applied = test::apply_patch(a, d);
    ASSERT_TRUE(applied);
    EXPECT_EQ(*applied, b);
}
