// `kgpu labels` through the real path (the binary, the simulator loaded with dlopen), held to
// gpu-feature-discovery's own test rule and beyond it:
//
// - GFD's rule (NVIDIA/k8s-device-plugin v0.20.0, cmd/gpu-feature-discovery/main_test.go,
//   checkResult): every line written, vgpu lines aside, matches one of the expected patterns of
//   tests/expected-output*.txt for the MIG strategy, and every vgpu line one of
//   tests/expected-output-vgpu.txt's. Our patterns are written from the shapes of those files,
//   anchored, and at least as strict as GFD's (which Go matches unanchored, so
//   "[none|mps|time-slicing]" there is a character class that only checks the first character).
// - Beyond it, for every fixture in sim/nodes/ and every strategy: kgpu writes exactly the keys
//   GFD writes for that node, plus the documented kgpu additions (docs/labels.md).
// - The values, against reviewed feature files (tests/labels/expected; KGPU_UPDATE_EXPECTED=1
//   rewrites them after a reviewed change), and GFD's flags, variables and loop.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "support/pci_config.h"
#include "support/process.h"
#include "support/files.h"
#include "support/expect.h"

using kgpu::test::ChildProcess;
using kgpu::test::run_process;
using kgpu::test::RunResult;
using kgpu::test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

namespace fs = std::filesystem;

namespace {

using kgpu::test::slurp;
using kgpu::test::eventually;

const std::string kSource = KGPU_SOURCE_DIR;
const std::string kMachineFile = kSource + "/tests/labels/fixtures/product_name";

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
}

std::map<std::string, std::string> parse(const std::string& text) {
    std::map<std::string, std::string> m;
    for (const auto& l : lines_of(text)) {
        auto eq = l.find('=');
        EXPECT_NE(eq, std::string::npos) << l;
        EXPECT_FALSE(m.contains(l.substr(0, eq))) << "duplicate " << l;
        if (eq != std::string::npos) m[l.substr(0, eq)] = l.substr(eq + 1);
    }
    return m;
}

// ---- GFD's expected labels -------------------------------------------------------------------

// A label value Kubernetes accepts that also passes GFD's `.*`.
const std::string kValue = "([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?";
const std::string kNum = "[0-9]+";
const std::string kProduct = "[A-Za-z_-][A-Za-z0-9_.-]*";
const std::string kSharing = "(none|mps|time-slicing)";
const std::string kBool = "(true|false)";

using Patterns = std::vector<std::pair<std::string, std::string>>;  // key regex, value regex

// expected-output.txt and expected-output-mig-none.txt (the same list).
Patterns base_patterns(const std::string& mode) {
    return {
        {"gfd\\.timestamp", "[0-9]{10}"},
        {"cuda\\.driver\\.major", kNum},
        {"cuda\\.driver\\.minor", kNum},
        {"cuda\\.driver\\.rev", "[0-9]*"},
        {"cuda\\.runtime\\.major", kNum},
        {"cuda\\.runtime\\.minor", kNum},
        {"cuda\\.driver-version\\.major", kNum},
        {"cuda\\.driver-version\\.minor", kNum},
        {"cuda\\.driver-version\\.revision", "[0-9]*"},
        {"cuda\\.driver-version\\.full", "[0-9]+\\.[0-9]+\\.[0-9]+"},
        {"cuda\\.runtime-version\\.major", kNum},
        {"cuda\\.runtime-version\\.minor", kNum},
        {"cuda\\.runtime-version\\.full", "[0-9]+\\.[0-9]+"},
        {"gpu\\.machine", kValue},
        {"gpu\\.count", kNum},
        {"gpu\\.replicas", kNum},
        {"gpu\\.sharing-strategy", kSharing},
        {"gpu\\.product", kProduct},
        {"gpu\\.memory", kNum},
        {"gpu\\.family", "[a-z]+(-[a-z]+)*"},
        {"gpu\\.mode", mode},
        {"mig\\.capable", kBool},
        {"gpu\\.compute\\.major", kNum},
        {"gpu\\.compute\\.minor", kNum},
        {"mps\\.capable", kBool},
    };
}

const char* const kEngines[] = {"engines\\.copy", "engines\\.decoder", "engines\\.encoder", "engines\\.jpeg", "engines\\.ofa"};

// The labels of one MIG resource ("gpu" under single, "mig-<profile>" under mixed).
Patterns mig_resource_patterns(const std::string& resource, bool base) {
    Patterns p;
    if (base) {
        for (const auto& [k, v] : Patterns{{"product", kProduct}, {"count", kNum}, {"replicas", kNum},
                                           {"sharing-strategy", kSharing}, {"memory", kNum}})
            p.push_back({resource + "\\." + k, v});
    }
    p.push_back({resource + "\\.multiprocessors", kNum});
    for (const char* e : kEngines) p.push_back({resource + "\\." + e, kNum});
    p.push_back({resource + "\\.slices\\.gi", kNum});
    p.push_back({resource + "\\.slices\\.ci", kNum});
    return p;
}

Patterns patterns_for(const std::string& strategy) {
    if (strategy == "none") return base_patterns("(unknown|compute|graphics)");
    // expected-output-mig-single.txt: GFD's "[compute]" (first character c, o, m, p, u, t or e)
    // admits compute and unknown, not graphics.
    Patterns p = base_patterns(strategy == "single" ? "(compute|unknown)" : "(unknown|compute|graphics)");
    p.push_back({"mig\\.strategy", "(single|mixed)"});
    if (strategy == "single") {
        auto extra = mig_resource_patterns("gpu", false);
        p.insert(p.end(), extra.begin(), extra.end());
    } else {
        auto extra = mig_resource_patterns("mig-[0-9]+g\\.[0-9]+gb", true);
        p.insert(p.end(), extra.begin(), extra.end());
    }
    return p;
}

// expected-output-vgpu.txt: GFD's vGPU labeler, checked apart from the others.
const Patterns kVgpu = {{"vgpu\\.present", kBool},
                        {"vgpu\\.host-driver-version", kValue},
                        {"vgpu\\.host-driver-branch", kValue}};

// kgpu's additions to GFD's labels; docs/labels.md lists each under "kgpu additions".
const Patterns kAdditions = {{"gpu\\.present", kBool}};

bool matches(const Patterns& patterns, const std::string& line) {
    for (const auto& [k, v] : patterns)
        if (std::regex_match(line, std::regex("nvidia\\.com/" + k + "=" + v))) return true;
    return false;
}

// GFD's checkResult over our patterns: the lines that match none (vgpu lines are GFD's other
// file's business). One exception, GFD's own: the labels GFD writes when `single` cannot serve
// the node (newInvalidMigStrategyLabeler) have an empty sharing-strategy that GFD's patterns do
// not accept; GFD's tests never produce them. It is allowed next to a -MIG-INVALID product only.
std::vector<std::string> gfd_check(const std::string& output, const std::string& strategy) {
    const Patterns expected = patterns_for(strategy);
    const bool invalid = output.find("nvidia.com/gpu.product=") != std::string::npos &&
                         std::regex_search(output, std::regex("nvidia\\.com/gpu\\.product=[^\\n]*-MIG-INVALID\\n"));
    std::vector<std::string> bad;
    for (const auto& line : lines_of(output)) {
        if (line.find("vgpu") != std::string::npos) continue;
        if (matches(expected, line) || matches(kAdditions, line)) continue;
        if (invalid && line == "nvidia.com/gpu.sharing-strategy=") continue;
        bad.push_back(line);
    }
    return bad;
}

// GFD's checkResult with the vGPU file: every vgpu line matches one of its patterns.
std::vector<std::string> gfd_vgpu_check(const std::string& output) {
    std::vector<std::string> bad;
    for (const auto& line : lines_of(output))
        if (line.find("vgpu") != std::string::npos && !matches(kVgpu, line)) bad.push_back(line);
    return bad;
}

// ---- what GFD writes for a fixture ----------------------------------------------------------

struct NodeFacts {
    size_t gpus = 0, mig_enabled = 0;
    bool enabled_but_empty = false;
    std::vector<std::string> profiles;  // distinct, in discovery order
    std::vector<std::string> bus_ids;
};

NodeFacts facts(const std::string& fixture_path) {
    NodeFacts f;
    YAML::Node root = YAML::LoadFile(fixture_path);
    for (const auto& g : root["gpus"]) {
        if (g["lost"] && g["lost"].as<bool>()) continue;
        ++f.gpus;
        f.bus_ids.push_back(g["pci_bus_id"].as<std::string>());
        YAML::Node mig = g["mig"];
        if (!mig || mig["mode"].as<std::string>() != "enabled") continue;
        ++f.mig_enabled;
        if (!mig["devices"] || mig["devices"].size() == 0) f.enabled_but_empty = true;
        for (const auto& d : mig["devices"]) {
            auto p = d["profile"].as<std::string>();
            if (std::find(f.profiles.begin(), f.profiles.end(), p) == f.profiles.end()) f.profiles.push_back(p);
        }
    }
    return f;
}

bool single_serves(const NodeFacts& f) {
    return f.mig_enabled == f.gpus && !f.enabled_but_empty && f.profiles.size() == 1;
}

std::string unescape(std::string k) {
    std::string out;
    for (char c : k)
        if (c != '\\') out.push_back(c);
    return out;
}

// The keys GFD writes for the node (GFD's labelers, internal/lm), without kgpu's additions, on
// a sysfs where the vGPU scan succeeds: vgpu.present on every node, the host driver's labels
// when there is a vGPU.
std::set<std::string> gfd_keys(const NodeFacts& f, const std::string& strategy, bool vgpu = false) {
    std::set<std::string> keys = {"nvidia.com/gfd.timestamp", "nvidia.com/vgpu.present"};
    if (vgpu) keys.insert({"nvidia.com/vgpu.host-driver-version", "nvidia.com/vgpu.host-driver-branch"});
    if (f.gpus == 0) return keys;  // no devices: no device labels
    for (const auto& [k, v] : base_patterns("")) keys.insert("nvidia.com/" + unescape(k));
    if (strategy != "none") keys.insert("nvidia.com/mig.strategy");
    if (strategy == "single" && f.mig_enabled > 0 && single_serves(f))
        for (const auto& [k, v] : mig_resource_patterns("gpu", false)) keys.insert("nvidia.com/" + unescape(k));
    if (strategy == "mixed")
        for (const auto& p : f.profiles)
            for (const auto& [k, v] : mig_resource_patterns("mig-" + p, true)) keys.insert("nvidia.com/" + unescape(k));
    return keys;
}

// ---- running kgpu labels --------------------------------------------------------------------

std::vector<std::string> fixtures() {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(kSource + "/sim/nodes"))
        if (e.path().extension() == ".yaml") out.push_back(e.path().stem().string());
    std::sort(out.begin(), out.end());
    return out;
}

// "00000000:07:00.0" (NVML, the fixtures) -> "0000:07:00.0" (sysfs).
std::string sysfs_name(const std::string& bus) {
    std::string id = bus.substr(4);
    for (auto& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return id;
}

// Writes a PCI function into a sysfs tree: vendor, class and configuration space.
void pci_device(const TempDir& dir, const std::string& name, const std::string& vendor, const std::string& config) {
    dir.write("bus/pci/devices/" + name + "/vendor", vendor + "\n");
    dir.write("bus/pci/devices/" + name + "/class", "0x030200\n");
    dir.write("bus/pci/devices/" + name + "/config", config);
}

// The sysfs tree of one fixture's host: each of its GPUs a 3D controller (what gpu.mode and
// gpu.present read) with the configuration space of a GPU that is not a vGPU (what the vGPU scan
// reads), next to a function of another vendor. The empty fixture's bus has no NVIDIA function.
const std::string& sysfs_root(const std::string& fixture) {
    static std::map<std::string, TempDir> dirs;
    auto [it, made] = dirs.try_emplace(fixture);
    if (made) {
        for (const auto& bus : facts(kSource + "/sim/nodes/" + fixture + ".yaml").bus_ids)
            pci_device(it->second, sysfs_name(bus), "0x10de", kgpu::test::nvidia_gpu_config().bytes());
        it->second.write("bus/pci/devices/0000:00:00.0/vendor", "0x8086\n");  // a host bridge
    }
    return it->second.path();
}

RunResult labels(const std::string& fixture, const std::vector<std::string>& extra,
                 std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {KGPU_BINARY, "labels", "--nvml-library", KGPU_SIM_LIBRARY};
    if (std::find(extra.begin(), extra.end(), "--sysfs-root") == extra.end())
        argv.insert(argv.end(), {"--sysfs-root", sysfs_root(fixture)});
    argv.insert(argv.end(), extra.begin(), extra.end());
    env.emplace("KGPU_SIM_NODE", kSource + "/sim/nodes/" + fixture + ".yaml");
    return run_process(argv, env);
}

std::string label_once(const std::string& fixture, const std::vector<std::string>& extra,
                       std::map<std::string, std::string> env = {}) {
    std::vector<std::string> args = {"--oneshot", "--output-file", "-"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = labels(fixture, args, std::move(env));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
}

std::string test_name(std::string n) {
    for (auto& ch : n)
        if (ch == '-' || ch == '.') ch = '_';
    return n;
}

}  // namespace

// ---- GFD's rule and GFD's key set, every fixture x every strategy ---------------------------

class GfdRule : public ::testing::TestWithParam<std::string> {};

TEST_P(GfdRule, EveryFixturePassesGfdsCheckAndWritesEveryLabelGfdWrites) {
    const std::string& strategy = GetParam();
    const auto all = fixtures();
    ASSERT_GE(all.size(), 6u);
    for (const auto& fixture : all) {
        SCOPED_TRACE(fixture + " --mig-strategy " + strategy);
        const std::string out = label_once(fixture, {"--mig-strategy", strategy});
        EXPECT_THAT(gfd_check(out, strategy), ::testing::IsEmpty()) << out;
        EXPECT_THAT(gfd_vgpu_check(out), ::testing::IsEmpty()) << out;
        auto got = parse(out);
        std::set<std::string> keys;
        for (const auto& [k, v] : got)
            if (!matches(kAdditions, k + "=" + v)) keys.insert(k);
        EXPECT_EQ(keys, gfd_keys(facts(kSource + "/sim/nodes/" + fixture + ".yaml"), strategy)) << out;
        EXPECT_EQ(got["nvidia.com/gpu.present"], got.contains("nvidia.com/gpu.count") ? "true" : "false");
    }
}

INSTANTIATE_TEST_SUITE_P(Strategies, GfdRule, ::testing::Values("none", "single", "mixed"),
                         [](const auto& info) { return info.param; });

TEST(GfdRuleSelf, RejectsWhatGfdRejects) {
    // The check must be able to fail: lines GFD's patterns do not accept.
    EXPECT_EQ(gfd_check("nvidia.com/mig.strategy=none\n", "none").size(), 1u);  // GFD: only single, mixed
    EXPECT_EQ(gfd_check("nvidia.com/gpu.product=3D-card\n", "none").size(), 1u);
    EXPECT_EQ(gfd_check("nvidia.com/gpu.sharing-strategy=\n", "single").size(), 1u);
    EXPECT_EQ(gfd_check("nvidia.com/gpu.mode=graphics\n", "single").size(), 1u);
    EXPECT_EQ(gfd_check("nvidia.com/gpu.engines.copy=1\n", "none").size(), 1u);
    EXPECT_EQ(gfd_check("nvidia.com/mig-1g.10gb.engines.ofa=x\n", "mixed").size(), 1u);
    EXPECT_EQ(gfd_check("nvidia.com/gpu.present=yes\n", "none").size(), 1u);
    EXPECT_TRUE(gfd_check("nvidia.com/vgpu.present=false\nnvidia.com/gpu.count=1\n", "none").empty());
    EXPECT_EQ(gfd_vgpu_check("nvidia.com/vgpu.present=yes\nnvidia.com/gpu.count=x\n").size(), 1u);
    EXPECT_EQ(gfd_vgpu_check("nvidia.com/vgpu.host=1\n").size(), 1u);
    EXPECT_TRUE(gfd_vgpu_check("nvidia.com/vgpu.present=true\nnvidia.com/vgpu.host-driver-version=550.54.16\n").empty());
}

TEST(GfdRuleSelf, EveryKgpuAdditionIsDocumented) {
    const std::string doc = slurp(kSource + "/docs/labels.md");
    auto at = doc.find("## kgpu additions");
    ASSERT_NE(at, std::string::npos) << "docs/labels.md has no '## kgpu additions' section";
    const std::string section = doc.substr(at, doc.find("\n## ", at + 1) - at);
    for (const auto& [k, v] : kAdditions) EXPECT_THAT(section, HasSubstr("nvidia.com/" + unescape(k))) << k;
    // and docs/migration.md no longer calls it a GFD label
    const std::string migration = slurp(kSource + "/docs/migration.md");
    auto gfd = migration.find("## gpu-feature-discovery");
    ASSERT_NE(gfd, std::string::npos);
    const std::string identical = migration.substr(gfd, migration.find("Differs", gfd) - gfd);
    EXPECT_FALSE(std::regex_search(identical, std::regex("(^|[^v])gpu\\.present"))) << identical;  // vgpu.present is GFD's
}

// ---- values ---------------------------------------------------------------------------------

struct Case {
    std::string fixture, strategy, config;
    std::string name() const { return fixture + "." + strategy + (config.empty() ? "" : "." + config); }
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

class LabelsFixture : public ::testing::TestWithParam<Case> {};

TEST_P(LabelsFixture, FeatureFileMatchesTheReviewedOne) {
    const auto& c = GetParam();
    TempDir out;
    std::vector<std::string> extra = {"--oneshot", "--no-timestamp", "--machine-type-file", kMachineFile,
                                      "--output-file", out.path() + "/kgpu", "--mig-strategy", c.strategy};
    if (!c.config.empty()) extra.insert(extra.end(), {"--config-file", kSource + "/tests/labels/fixtures/" + c.config + ".yaml"});
    auto r = labels(c.fixture, extra);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string got = slurp(out.path() + "/kgpu");
    EXPECT_THAT(gfd_check(got, c.strategy), ::testing::IsEmpty());
    const std::string expected = kSource + "/tests/labels/expected/" + c.name() + ".txt";
    if (std::getenv("KGPU_UPDATE_EXPECTED")) std::ofstream(expected) << got;
    EXPECT_EQ(got, slurp(expected));
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, LabelsFixture,
    ::testing::Values(Case{"dgx-h100", "none", ""}, Case{"t4x4", "none", ""}, Case{"a100-mig", "none", ""},
                      Case{"a100-mig", "mixed", ""}, Case{"a100-mig", "single", ""},
                      Case{"a100-mig", "mixed", "time-slicing"}, Case{"a100-mig-uniform", "none", ""},
                      Case{"a100-mig-uniform", "single", ""}, Case{"a100-mig-uniform", "mixed", ""},
                      Case{"a100-mig-uniform", "single", "time-slicing-single"}, Case{"empty", "none", ""},
                      Case{"dgx-h100", "none", "mps"}),
    [](const auto& info) { return test_name(info.param.name()); });

TEST(LabelsValues, GpuCountIsEveryGpuOfTheModelUnderEveryStrategy) {
    for (const std::string s : {"none", "single", "mixed"}) {
        auto l = parse(label_once("a100-mig", {"--mig-strategy", s}));
        EXPECT_EQ(l["nvidia.com/gpu.count"], s == "single" ? "0" : "4") << s;  // single: -MIG-INVALID
    }
    EXPECT_EQ(parse(label_once("a100-mig-uniform", {"--mig-strategy", "single"}))["nvidia.com/gpu.count"], "12");
}

TEST(LabelsValues, SingleOnANodeItCannotServeWritesInvalidLabelsAndKeepsRunning) {
    auto r = labels("a100-mig", {"--oneshot", "-o", "-", "--mig-strategy", "single"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto l = parse(r.out);
    EXPECT_EQ(l["nvidia.com/gpu.product"], "NVIDIA-A100-SXM4-80GB-MIG-INVALID");
    EXPECT_EQ(l["nvidia.com/gpu.replicas"], "0");
    EXPECT_EQ(l["nvidia.com/gpu.memory"], "0");
    EXPECT_EQ(l["nvidia.com/gpu.sharing-strategy"], "");
    EXPECT_THAT(r.err, HasSubstr("devices with MIG enabled and disabled"));
}

TEST(LabelsValues, NoGpusWriteNoDeviceLabels) {
    auto l = parse(label_once("empty", {}));
    EXPECT_EQ(l.size(), 3u);
    EXPECT_EQ(l["nvidia.com/gpu.present"], "false");
    EXPECT_EQ(l["nvidia.com/vgpu.present"], "false");  // GFD's vGPU labeler runs on every node
    EXPECT_TRUE(l.contains("nvidia.com/gfd.timestamp"));
}

// A vGPU guest: the GPUs NVML shows are virtual functions whose configuration space carries
// NVIDIA's "VF" capability with the host's driver version and branch (GFD's vGPU labeler).
TEST(LabelsValues, VgpuGuestGetsTheHostDriverLabels) {
    TempDir sys;
    const auto t4 = facts(kSource + "/sim/nodes/t4x4.yaml");
    for (const auto& bus : t4.bus_ids)
        pci_device(sys, sysfs_name(bus), "0x10de", kgpu::test::nvidia_vgpu_config("550.54.16", "r550_00").bytes());
    const std::string out = label_once("t4x4", {"--sysfs-root", sys.path()});
    EXPECT_THAT(gfd_check(out, "none"), ::testing::IsEmpty()) << out;
    EXPECT_THAT(gfd_vgpu_check(out), ::testing::IsEmpty()) << out;
    auto l = parse(out);
    EXPECT_EQ(l["nvidia.com/vgpu.present"], "true");
    EXPECT_EQ(l["nvidia.com/vgpu.host-driver-version"], "550.54.16");
    EXPECT_EQ(l["nvidia.com/vgpu.host-driver-branch"], "r550_00");
    std::set<std::string> keys;
    for (const auto& [k, v] : l)
        if (!matches(kAdditions, k + "=" + v)) keys.insert(k);
    EXPECT_EQ(keys, gfd_keys(t4, "none", /*vgpu=*/true)) << out;
    EXPECT_EQ(l["nvidia.com/gpu.count"], "4");

    // A VF capability without the host driver record fails the labeling, as in GFD.
    kgpu::test::PciConfig broken = kgpu::test::nvidia_gpu_config();
    broken.capability(0xc8, 0x09, kgpu::test::vendor_specific("VF"));
    pci_device(sys, sysfs_name(t4.bus_ids[2]), "0x10de", broken.bytes());
    auto r = labels("t4x4", {"--oneshot", "-o", "-", "--sysfs-root", sys.path()});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("vGPU " + sysfs_name(t4.bus_ids[2])));
    EXPECT_THAT(r.err, HasSubstr("no host driver version record"));
}

// GFD's vGPU labeler writes nothing when the scan fails (here: an unprivileged read of the
// configuration space returns its first 64 bytes) and logs why; the other labels are written.
TEST(LabelsValues, AFailedVgpuScanWritesNoVgpuLabelAndSaysWhy) {
    TempDir sys;
    for (const auto& bus : facts(kSource + "/sim/nodes/t4x4.yaml").bus_ids)
        pci_device(sys, sysfs_name(bus), "0x10de", kgpu::test::nvidia_gpu_config(64).bytes());
    auto r = labels("t4x4", {"--oneshot", "-o", "-", "--sysfs-root", sys.path()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto l = parse(r.out);
    EXPECT_FALSE(l.contains("nvidia.com/vgpu.present")) << r.out;
    EXPECT_EQ(l["nvidia.com/gpu.count"], "4");
    EXPECT_EQ(l["nvidia.com/gpu.mode"], "compute");
    EXPECT_THAT(r.err, HasSubstr("vGPU scan"));
    EXPECT_THAT(r.err, HasSubstr("64 bytes"));
    EXPECT_THAT(r.err, HasSubstr("CAP_SYS_ADMIN"));
}

TEST(LabelsValues, TimestampIsNowAndMachineIsUnknownWithoutADmiFile) {
    const auto before = std::time(nullptr);
    auto l = parse(label_once("t4x4", {}));
    const auto after = std::time(nullptr);
    const long ts = std::stol(l["nvidia.com/gfd.timestamp"]);
    EXPECT_GE(ts, before);
    EXPECT_LE(ts, after);
    EXPECT_EQ(l["nvidia.com/gpu.machine"], "unknown");  // the sysfs root has no class/dmi/id/product_name
    TempDir dmi;
    dmi.write("class/dmi/id/product_name", "PowerEdge R750xa\n");
    auto with_dmi = parse(label_once("t4x4", {"--sysfs-root", dmi.path()}));
    EXPECT_EQ(with_dmi["nvidia.com/gpu.machine"], "PowerEdge-R750xa");
    EXPECT_EQ(with_dmi["nvidia.com/gpu.mode"], "unknown");  // that sysfs has no PCI class files
    EXPECT_FALSE(with_dmi.contains("nvidia.com/vgpu.present"));  // nor PCI devices: the scan failed
}

// ---- GFD's flags and variables --------------------------------------------------------------

TEST(LabelsCli, GfdEnvironmentVariables) {
    TempDir dir;
    const std::string out = dir.path() + "/features";
    const std::string cfg = dir.write("cfg.yaml", "version: v1\nflags:\n  migStrategy: single\n");
    auto r = labels("a100-mig", {},
                    {{"GFD_ONESHOT", "true"}, {"GFD_OUTPUT_FILE", out}, {"GFD_NO_TIMESTAMP", "true"},
                     {"GFD_MACHINE_TYPE_FILE", kMachineFile}, {"GFD_MIG_STRATEGY", "mixed"}, {"MIG_STRATEGY", "none"},
                     {"GFD_CONFIG_FILE", cfg}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto l = parse(slurp(out));
    EXPECT_EQ(l["nvidia.com/mig.strategy"], "mixed");  // GFD_MIG_STRATEGY over MIG_STRATEGY over the file
    EXPECT_FALSE(l.contains("nvidia.com/gfd.timestamp"));
    EXPECT_EQ(l["nvidia.com/gpu.machine"], "ProLiant-XL675d-Gen10-Plus");
    // MIG_STRATEGY alone, CONFIG_FILE alone; the flag over both.
    EXPECT_FALSE(parse(label_once("a100-mig", {}, {{"MIG_STRATEGY", "none"}})).contains("nvidia.com/mig.strategy"));
    EXPECT_EQ(parse(label_once("a100-mig", {}, {{"CONFIG_FILE", cfg}}))["nvidia.com/mig.strategy"], "single");
    EXPECT_EQ(parse(label_once("a100-mig", {"--mig-strategy", "mixed"}, {{"GFD_MIG_STRATEGY", "single"}}))
                  ["nvidia.com/mig.strategy"],
              "mixed");
}

TEST(LabelsCli, OutputAliasesAndBooleanSpellings) {
    TempDir dir;
    for (const std::string flag : {"-o", "--output", "--output-file"}) {
        auto r = labels("t4x4", {"--oneshot=true", flag, dir.path() + "/f" + flag, "--no-timestamp=1"});
        ASSERT_EQ(r.exit_code, 0) << flag << r.err;
        auto l = parse(slurp(dir.path() + "/f" + flag));
        EXPECT_EQ(l["nvidia.com/gpu.count"], "4") << flag;
        EXPECT_FALSE(l.contains("nvidia.com/gfd.timestamp"));
    }
}

// Issue #22: `-o` into a directory that does not exist yet (NFD's features.d before NFD ran, a
// /run path after a reboot) creates it 0755 instead of failing.
TEST(LabelsCli, OutputIntoAMissingDirectoryCreatesIt) {
    TempDir dir;
    const std::string file = dir.path() + "/features.d/sub/gfd";
    auto r = labels("t4x4", {"--oneshot", "-o", file});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(parse(slurp(file))["nvidia.com/gpu.count"], "4");
    struct stat st {};
    ASSERT_EQ(::stat((dir.path() + "/features.d").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0755u);
}

TEST(LabelsCli, FailOnInitError) {
    const std::vector<std::string> base = {KGPU_BINARY, "labels", "--oneshot", "-o", "-", "--nvml-library",
                                           "/nonexistent/libnvidia-ml.so.1", "--sysfs-root", sysfs_root("t4x4")};
    auto fails = run_process(base);
    EXPECT_EQ(fails.exit_code, 1);
    EXPECT_THAT(fails.err, HasSubstr("/nonexistent/libnvidia-ml.so.1"));
    // In the loop too: NVML failing at the first labeling is exit 1, not an endless retry.
    ChildProcess loop({KGPU_BINARY, "labels", "-o", "-", "--sleep-interval", "1h", "--nvml-library",
                       "/nonexistent/libnvidia-ml.so.1"});
    EXPECT_EQ(loop.wait(10000), 1) << loop.err();
    for (const auto& [args, env] :
         std::vector<std::pair<std::vector<std::string>, std::map<std::string, std::string>>>{
             {{"--fail-on-init-error=false"}, {}},
             {{}, {{"FAIL_ON_INIT_ERROR", "false"}}},
             {{}, {{"GFD_FAIL_ON_INIT_ERROR", "false"}, {"FAIL_ON_INIT_ERROR", "true"}}}}) {
        auto argv = base;
        argv.insert(argv.end(), args.begin(), args.end());
        auto r = run_process(argv, env);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        auto l = parse(r.out);
        EXPECT_EQ(l.size(), 3u) << r.out;  // no device labels
        // The GPUs are still on the PCI bus: gpu.present stays true as the GPU Operator derives it,
        // so the node keeps its GPU stack while the driver is fixed (issue #23).
        EXPECT_EQ(l["nvidia.com/gpu.present"], "true");
        EXPECT_EQ(l["nvidia.com/vgpu.present"], "false");  // the vGPU scan does not need NVML
        EXPECT_THAT(r.err, HasSubstr("NVML did not start"));
        EXPECT_THAT(r.err, HasSubstr("the PCI bus has 4 NVIDIA GPU(s)"));
        EXPECT_THAT(r.err, HasSubstr("gpu.present=true"));
    }
    // A bus without NVIDIA GPUs (only a host bridge, an NVSwitch and an NVIDIA audio function):
    // false, as the Operator's label.
    TempDir sys;
    sys.write("bus/pci/devices/0000:00:00.0/vendor", "0x8086\n");
    sys.write("bus/pci/devices/0000:00:00.0/class", "0x060000\n");
    sys.write("bus/pci/devices/0000:c1:00.0/vendor", "0x10de\n");
    sys.write("bus/pci/devices/0000:c1:00.0/class", "0x068000\n");
    sys.write("bus/pci/devices/0000:c1:00.0/config", kgpu::test::nvidia_gpu_config().bytes());
    sys.write("bus/pci/devices/0000:3b:00.1/vendor", "0x10de\n");
    sys.write("bus/pci/devices/0000:3b:00.1/class", "0x040300\n");
    sys.write("bus/pci/devices/0000:3b:00.1/config", kgpu::test::nvidia_gpu_config().bytes());
    auto argv = base;
    argv.back() = sys.path();
    argv.emplace_back("--fail-on-init-error=false");
    auto none = run_process(argv);
    ASSERT_EQ(none.exit_code, 0) << none.err;
    EXPECT_EQ(parse(none.out)["nvidia.com/gpu.present"], "false") << none.out;
    EXPECT_THAT(none.err, Not(HasSubstr("PCI bus has")));
}

// NVML works but reports no GPU while the bus has some (bound to vfio-pci, or the driver failed
// to initialise them): gpu.present follows the bus, with a warning naming the functions.
TEST(LabelsValues, GpuPresentFollowsThePciBusWhenNvmlSeesNone) {
    TempDir sys;
    pci_device(sys, "0000:3b:00.0", "0x10de", kgpu::test::nvidia_gpu_config().bytes());
    auto r = labels("empty", {"--oneshot", "-o", "-", "--sysfs-root", sys.path()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto l = parse(r.out);
    EXPECT_EQ(l["nvidia.com/gpu.present"], "true") << r.out;
    EXPECT_FALSE(l.contains("nvidia.com/gpu.count"));
    EXPECT_THAT(r.err, HasSubstr("NVML reports no GPU but the PCI bus has 1 NVIDIA GPU(s) (0000:3b:00.0)"));
}

TEST(LabelsCli, ErrorsNameTheInput) {
    auto bad = labels("t4x4", {"--oneshot", "--mig-strategy", "double"});
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_THAT(bad.err, HasSubstr("'double'"));
    auto env = labels("t4x4", {"--oneshot"}, {{"GFD_MIG_STRATEGY", "triple"}});
    EXPECT_EQ(env.exit_code, 2);
    EXPECT_THAT(env.err, HasSubstr("GFD_MIG_STRATEGY"));
    for (const std::string v : {"soon", "10", "0s", "-5s", "1x", "s"}) {
        auto interval = labels("t4x4", {"--oneshot", "-o", "-", "--sleep-interval", v});
        if (v == "10") {
            EXPECT_EQ(interval.exit_code, 0) << interval.err;  // plain seconds
            continue;
        }
        EXPECT_EQ(interval.exit_code, 2) << v;
        EXPECT_THAT(interval.err, HasSubstr("'" + v + "'"));
    }
    for (const std::string v : {"1m30s", "1.5h", "500ms", "infinite"})
        EXPECT_EQ(labels("t4x4", {"--oneshot", "-o", "-", "--sleep-interval", v}).exit_code, 0) << v;
    auto boolean = labels("t4x4", {}, {{"GFD_ONESHOT", "maybe"}});
    EXPECT_EQ(boolean.exit_code, 2);
    EXPECT_THAT(boolean.err, HasSubstr("GFD_ONESHOT"));
    auto tegra = labels("t4x4", {"--oneshot", "--device-discovery-strategy", "tegra"});
    EXPECT_EQ(tegra.exit_code, 2);
    EXPECT_THAT(tegra.err, HasSubstr("'tegra'"));
    // The device plugin's parser reads the config file: a bad value names file:line and exits 2;
    // an unknown key (issue #23: NVIDIA's parser, and GFD's, ignore it) is ignored with a warning
    // naming file:line and the key, and the labels are written.
    const std::string bad_value = kSource + "/tests/labels/fixtures/bad-sharing-value.yaml";
    auto config = labels("t4x4", {"--oneshot", "--config-file", bad_value});
    EXPECT_EQ(config.exit_code, 2);
    EXPECT_THAT(config.err, HasSubstr("bad-sharing-value.yaml:6: key 'sharing.timeSlicing.resources[0].replicas'"));
    auto unknown = labels("t4x4", {"--oneshot", "--output-file", "-", "--config-file",
                                   kSource + "/tests/labels/fixtures/bad-sharing.yaml"});
    EXPECT_EQ(unknown.exit_code, 0) << unknown.err;
    EXPECT_THAT(unknown.err, HasSubstr("bad-sharing.yaml:7: key 'sharing.timeSlicing.resources[0].replica': unknown key"));
    EXPECT_EQ(parse(unknown.out)["nvidia.com/gpu.replicas"], "4");
}

// GFD v0.17+'s Kubernetes client and node flags, and --driver-root-ctr-path: a GFD command line
// runs (they used to be unknown flags, exit 109), with one warning that they have no effect;
// malformed numbers are refused naming the flag or variable.
TEST(LabelsCli, GfdKubernetesClientFlagsAreAcceptedAndSaid) {
    auto r = labels("t4x4", {"--oneshot", "-o", "-", "--kubeconfig", "/root/.kube/config", "--kube-api-qps", "7.5",
                             "--kube-api-burst", "20", "--namespace", "gpu-operator", "--node-name", "node-1",
                             "--pod-name", "gfd-abcde", "--driver-root-ctr-path", "/driver-root"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(parse(r.out)["nvidia.com/gpu.count"], "4");
    EXPECT_THAT(r.err, HasSubstr("--kubeconfig, --kube-api-qps, --kube-api-burst, --namespace, --node-name, --pod-name "
                                 "ignored"));
    EXPECT_THAT(r.err, HasSubstr("--driver-root-ctr-path '/driver-root' ignored"));
    // The DaemonSet's environment (NODE_NAME, KUBE_API_QPS) is no reason for a warning.
    auto env = labels("t4x4", {"--oneshot", "-o", "-"}, {{"NODE_NAME", "node-1"}, {"KUBE_API_QPS", "5"}});
    ASSERT_EQ(env.exit_code, 0) << env.err;
    EXPECT_THAT(env.err, Not(HasSubstr("ignored")));
    auto qps = labels("t4x4", {"--oneshot", "-o", "-", "--kube-api-qps", "fast"});
    EXPECT_EQ(qps.exit_code, 2);
    EXPECT_THAT(qps.err, HasSubstr("--kube-api-qps 'fast': expected a number"));
    auto burst = labels("t4x4", {"--oneshot", "-o", "-"}, {{"KUBE_API_BURST", "1.5"}});
    EXPECT_EQ(burst.exit_code, 2);
    EXPECT_THAT(burst.err, HasSubstr("environment variable KUBE_API_BURST '1.5': expected an integer"));
}

// Per-node configs (issue #27): the config the node label names, chosen as the device plugin
// does; without a node name or API server the default and the fallbacks decide.
TEST(LabelsCli, ConfigSourceDirectoryChoosesAsThePlugin) {
    TempDir dir;
    dir.write("configs/default", "version: v1\n");
    dir.write("configs/ts4", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 4}\n");
    const std::string src = dir.path() + "/configs";
    auto fallback = labels("t4x4", {"--oneshot", "-o", "-", "--config-file-srcdir", src});
    ASSERT_EQ(fallback.exit_code, 0) << fallback.err;
    EXPECT_EQ(parse(fallback.out)["nvidia.com/gpu.replicas"], "1");
    EXPECT_THAT(fallback.err, HasSubstr("config 'default' (fallback named (a config called default))"));
    EXPECT_THAT(fallback.err, HasSubstr("the node label nvidia.com/device-plugin.config is not read: no node name"));

    auto by_default = labels("t4x4", {"--oneshot", "-o", "-"}, {{"CONFIG_FILE_SRCDIR", src}, {"DEFAULT_CONFIG", "ts4"}});
    ASSERT_EQ(by_default.exit_code, 0) << by_default.err;
    EXPECT_EQ(parse(by_default.out)["nvidia.com/gpu.replicas"], "4");
    EXPECT_EQ(parse(by_default.out)["nvidia.com/gpu.product"], "Tesla-T4-SHARED");

    // A --config-file flag outside a directory that only the environment names wins (flag > env).
    const std::string outside = dir.write("elsewhere.yaml", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                                                            "    - {name: nvidia.com/gpu, replicas: 3}\n");
    auto flag_wins = labels("t4x4", {"--oneshot", "-o", "-", "--config-file", outside}, {{"CONFIG_FILE_SRCDIR", src}});
    ASSERT_EQ(flag_wins.exit_code, 0) << flag_wins.err;
    EXPECT_EQ(parse(flag_wins.out)["nvidia.com/gpu.replicas"], "3");
    EXPECT_THAT(flag_wins.err, HasSubstr("CONFIG_FILE_SRCDIR " + src + " is not used: --config-file " + outside + " is given"));
    // One inside it is its default.
    auto inside = labels("t4x4", {"--oneshot", "-o", "-", "--config-file", src + "/ts4"}, {{"CONFIG_FILE_SRCDIR", src}});
    ASSERT_EQ(inside.exit_code, 0) << inside.err;
    EXPECT_EQ(parse(inside.out)["nvidia.com/gpu.replicas"], "4");
    EXPECT_THAT(inside.err, HasSubstr("config 'ts4' (the default config (DEFAULT_CONFIG=ts4))"));

    auto bad = labels("t4x4", {"--oneshot", "-o", "-", "--config-file-srcdir", src, "--fallback-strategies", "nearest"});
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_THAT(bad.err, HasSubstr("unknown fallback strategy 'nearest'"));
    auto none = labels("t4x4", {"--oneshot", "-o", "-", "--config-file-srcdir", dir.path() + "/missing"});
    EXPECT_EQ(none.exit_code, 2) << none.err;
    EXPECT_THAT(none.err, HasSubstr("CONFIG_FILE_SRCDIR"));
}

TEST(LabelsCli, ConfigFileSharingAndFlagPrecedence) {
    // The config says mixed and 4 replicas; the flag's strategy wins.
    auto l = parse(label_once("a100-mig", {"--config-file", kSource + "/tests/labels/fixtures/time-slicing.yaml",
                                           "--mig-strategy", "none"}));
    EXPECT_FALSE(l.contains("nvidia.com/mig.strategy"));
    EXPECT_EQ(l["nvidia.com/gpu.replicas"], "4");
    EXPECT_EQ(l["nvidia.com/gpu.sharing-strategy"], "time-slicing");
    EXPECT_EQ(l["nvidia.com/gpu.product"], "NVIDIA-A100-SXM4-80GB-SHARED");
}

// GFD takes its own settings from the shared config file too (flags.failOnInitError,
// flags.gfd.*), under what a flag or variable gives: a GFD ConfigMap keeps working.
TEST(LabelsCli, ConfigFileGfdFlagsApplyUnderFlagsAndVariables) {
    TempDir dir;
    const std::string out = dir.path() + "/from-file";
    const std::string cfg = dir.write("gfd.yaml", "version: v1\nflags:\n  failOnInitError: false\n  gfd:\n"
                                                  "    oneshot: true\n    noTimestamp: true\n    outputFile: " +
                                                      out + "\n");
    // oneshot from the file: the process labels once and exits, into the file's output file,
    // without a timestamp; NVML failing is not fatal (failOnInitError: false).
    ChildProcess once({KGPU_BINARY, "labels", "--nvml-library", "/nonexistent/libnvidia-ml.so.1", "--sysfs-root",
                       sysfs_root("t4x4"), "--config-file", cfg});
    ASSERT_EQ(once.wait(20000), 0) << once.err();
    auto l = parse(slurp(out));
    EXPECT_EQ(l["nvidia.com/gpu.present"], "true");
    EXPECT_FALSE(l.contains("nvidia.com/gfd.timestamp"));
    // A flag or a variable wins over the file.
    auto flag = run_process({KGPU_BINARY, "labels", "-o", "-", "--fail-on-init-error=true", "--nvml-library",
                             "/nonexistent/libnvidia-ml.so.1", "--sysfs-root", sysfs_root("t4x4"), "--config-file", cfg});
    EXPECT_EQ(flag.exit_code, 1) << flag.err;
    auto env = labels("t4x4", {"--config-file", cfg, "--oneshot"}, {{"GFD_OUTPUT_FILE", "-"}, {"GFD_NO_TIMESTAMP", "false"}});
    ASSERT_EQ(env.exit_code, 0) << env.err;
    EXPECT_TRUE(parse(env.out).contains("nvidia.com/gfd.timestamp")) << env.out;
}

// A per-resource rename is dropped by GFD v0.14-v0.20 (DisableResourceNamingInConfig), so the
// product keeps "-SHARED"; with kgpu's opt-in the plugin serves the new name and the suffix goes.
TEST(LabelsCli, SharingRenameFollowsTheDevicePluginsOptIn) {
    TempDir dir;
    const std::string body = "sharing:\n  timeSlicing:\n    resources:\n"
                             "    - {name: gpu, rename: my-shared-gpu, devices: [0], replicas: 2}\n";
    auto l = parse(label_once("t4x4", {"--config-file", dir.write("nvidia.yaml", "version: v1\n" + body)}));
    EXPECT_EQ(l["nvidia.com/gpu.product"], "Tesla-T4-SHARED");
    EXPECT_EQ(l["nvidia.com/gpu.replicas"], "2");
    EXPECT_EQ(l["nvidia.com/gpu.sharing-strategy"], "time-slicing");
    auto opted = parse(label_once(
        "t4x4", {"--config-file", dir.write("kgpu.yaml", "version: v1\nflags: {applyResourceNaming: true}\n" + body)}));
    EXPECT_EQ(opted["nvidia.com/gpu.product"], "Tesla-T4");
    EXPECT_EQ(opted["nvidia.com/gpu.replicas"], "2");
    // Either way the labels stay under the resource's own name, as in GFD: no label is written
    // for the name the plugin serves.
    for (const auto* written : {&l, &opted})
        for (const auto& [k, v] : *written) EXPECT_THAT(k, Not(HasSubstr("my-shared-gpu")));
    // ... and docs/labels.md says so rather than that `rename` is honoured (issue #23).
    std::string doc = slurp(kSource + "/docs/labels.md");
    std::replace(doc.begin(), doc.end(), '\n', ' ');
    EXPECT_THAT(doc, Not(HasSubstr("rename` is honoured")));
    EXPECT_THAT(doc, HasSubstr("`rename` does not move the labels"));
}

// sharing.mps: GFD's sharing-strategy mps and mps.capable=true, which the MPS DaemonSet selects
// on; a GPU with MIG enabled cannot be shared with MPS (GFD fails the same way).
TEST(LabelsCli, MpsSharingAsGfd) {
    const std::string mps = kSource + "/tests/labels/fixtures/mps.yaml";
    auto l = parse(label_once("t4x4", {"--config-file", mps}));
    EXPECT_EQ(l["nvidia.com/mps.capable"], "true");
    EXPECT_EQ(l["nvidia.com/gpu.sharing-strategy"], "mps");
    EXPECT_EQ(l["nvidia.com/gpu.replicas"], "4");
    EXPECT_EQ(l["nvidia.com/gpu.product"], "Tesla-T4-SHARED");
    auto mig = labels("a100-mig", {"--oneshot", "-o", "-", "--config-file", mps});
    EXPECT_NE(mig.exit_code, 0);
    EXPECT_THAT(mig.err, HasSubstr("MPS sharing is not supported for MIG devices"));
}

// ---- the loop -------------------------------------------------------------------------------

namespace {

}  // namespace

TEST(LabelsLoop, RewritesWithTheSameTimestampReloadsOnSighupAndRemovesTheFileOnSigterm) {
    TempDir dir;
    const std::string out = dir.path() + "/features.d/kgpu";
    fs::create_directories(dir.path() + "/features.d");
    const std::string cfg = dir.write("config.yaml", "version: v1\nflags:\n  migStrategy: none\n");
    ChildProcess child({KGPU_BINARY, "labels", "--nvml-library", KGPU_SIM_LIBRARY, "--sysfs-root", sysfs_root("a100-mig"),
                        "--sleep-interval", "200ms", "-o", out, "--config-file", cfg},
                       {{"KGPU_SIM_NODE", kSource + "/sim/nodes/a100-mig.yaml"}});
    ASSERT_TRUE(eventually([&] { return fs::exists(out); })) << child.err();
    const auto first = parse(slurp(out));
    // A rewrite a second or more later keeps the timestamp: it is taken once per configuration.
    const long ts = std::stol(first.at("nvidia.com/gfd.timestamp"));
    ASSERT_TRUE(eventually([&] { return std::time(nullptr) > ts + 1; }));
    const auto mtime = fs::last_write_time(out);
    ASSERT_TRUE(eventually([&] { return fs::last_write_time(out) != mtime; })) << "not rewritten";
    EXPECT_EQ(parse(slurp(out))["nvidia.com/gfd.timestamp"], first.at("nvidia.com/gfd.timestamp"));
    EXPECT_FALSE(first.contains("nvidia.com/mig.strategy"));

    dir.write("config.yaml", "version: v1\nflags:\n  migStrategy: mixed\n");
    child.signal(SIGHUP);
    EXPECT_TRUE(eventually([&] { return parse(slurp(out))["nvidia.com/mig.strategy"] == "mixed"; })) << child.err();
    EXPECT_TRUE(child.running());

    child.signal(SIGTERM);
    EXPECT_EQ(child.wait(10000), 0) << child.err();
    EXPECT_FALSE(fs::exists(out));  // GFD removes its file when it stops
}

TEST(LabelsLoop, InfiniteIntervalLabelsOnceAndKeepsTheFile) {
    TempDir dir;
    const std::string out = dir.path() + "/kgpu";
    ChildProcess child({KGPU_BINARY, "labels", "--nvml-library", KGPU_SIM_LIBRARY, "--sysfs-root", sysfs_root("t4x4"),
                        "--sleep-interval", "infinite", "-o", out},
                       {{"KGPU_SIM_NODE", kSource + "/sim/nodes/t4x4.yaml"}});
    ASSERT_TRUE(eventually([&] { return fs::exists(out); })) << child.err();
    EXPECT_TRUE(child.running());
    child.signal(SIGINT);
    EXPECT_EQ(child.wait(10000), 0) << child.err();
    EXPECT_TRUE(fs::exists(out));
}
