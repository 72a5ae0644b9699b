// `kgpu cdi generate` end to end: the built binary on the simulator's fixtures, a fake driver
// root (tests/cdi/fixtures/driver-root) copied into a temp dir with device nodes made by mknod
// (as root; otherwise regular files, and the comparison with the expected files is skipped
// because majors/minors then cannot appear). Every spec is validated against the CDI JSON schema
// (shared/facts/cdi-schema) by validate_cdi.py with Debian's python3-jsonschema.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/process.h"

namespace fs = std::filesystem;
using kgpu::test::run_process;
using kgpu::test::RunResult;
using kgpu::test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

const std::string kSource = KGPU_SOURCE_DIR;

std::string schema_dir() {
    // The schema lives next to the repository in shared/; tests/cdi keeps no copy of it.
    for (const std::string& d : {kSource + "/../shared/facts/cdi-schema", std::string("/work/shared/facts/cdi-schema")})
        if (fs::exists(d + "/schema.json")) return d;
    return "";
}

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

bool is_root() { return ::geteuid() == 0; }

// A driver root in a temp dir: the committed fixture plus /dev nodes with fixed numbers.
struct FakeRoot {
    TempDir dir;
    FakeRoot() {
        fs::copy(kSource + "/tests/cdi/fixtures/driver-root", dir.path(),
                 fs::copy_options::recursive | fs::copy_options::copy_symlinks);
        fs::create_directories(dir.path() + "/dev/nvidia-caps");
        node("/dev/nvidiactl", 195, 255);
        node("/dev/nvidia-uvm", 508, 0);
        node("/dev/nvidia-uvm-tools", 508, 1);
        for (unsigned i = 0; i < 8; ++i) node(fmt::format("/dev/nvidia{}", i), 195, i);
        for (unsigned c = 1; c < 543; ++c) node(fmt::format("/dev/nvidia-caps/nvidia-cap{}", c), 511, c);
    }
    void node(const std::string& path, unsigned maj, unsigned min) const {
        const std::string p = dir.path() + path;
        if (is_root()) {
            ASSERT_EQ(::mknod(p.c_str(), S_IFCHR | 0666, makedev(maj, min)), 0) << p;
        } else {
            std::ofstream(p) << "stand-in\n";
        }
    }
    const std::string& path() const { return dir.path(); }
};

RunResult generate(const std::string& fixture, const FakeRoot& root, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {KGPU_BINARY, "cdi", "generate", "--nvml-library", KGPU_SIM_LIBRARY,
                                     "--driver-root", root.path(), "--proc-root", root.path() + "/proc",
                                     "--sysfs-root", root.path() + "/sys"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_process(argv, {{"KGPU_SIM_NODE", kSource + "/sim/nodes/" + fixture + ".yaml"}});
}

RunResult validate(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/bin/python3", kSource + "/tests/cdi/validate_cdi.py"};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
    return s;
}

class CdiFixture : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(CdiFixture, YamlAndJsonAreSchemaValidEqualAndMatchTheExpectedSpec) {
    ASSERT_FALSE(schema_dir().empty()) << "CDI schema not found next to the repository";
    FakeRoot root;
    TempDir out;
    auto yaml = generate(GetParam(), root, {"--output", out.path() + "/spec.yaml"});
    ASSERT_EQ(yaml.exit_code, 0) << yaml.err;
    auto json = generate(GetParam(), root, {"--format", "json"});
    ASSERT_EQ(json.exit_code, 0) << json.err;
    const std::string json_path = out.write("spec.json", json.out);
    auto v = validate({schema_dir(), out.path() + "/spec.yaml", json_path});
    EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
    auto same = validate({"--equal", out.path() + "/spec.yaml", json_path});
    EXPECT_EQ(same.exit_code, 0) << same.out << same.err;

    if (!is_root()) GTEST_SKIP() << "not root: device nodes are regular files, expected-file comparison skipped";
    const std::string got = replace_all(slurp(out.path() + "/spec.yaml"), root.path(), "@ROOT@");
    const std::string expected_path = kSource + "/tests/cdi/expected/" + GetParam() + ".yaml";
    if (std::getenv("KGPU_UPDATE_EXPECTED")) std::ofstream(expected_path) << got;
    EXPECT_EQ(got, slurp(expected_path)) << "regenerate with KGPU_UPDATE_EXPECTED=1 after checking the difference";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CdiFixture, ::testing::Values("dgx-h100", "t4x4", "a100-mig", "pcie-nvlink-pairs"),
                         [](const auto& info) {
                             std::string n = info.param;
                             for (auto& c : n)
                                 if (c == '-') c = '_';
                             return n;
                         });

TEST(CdiGenerate, MigDevicesCarryTheParentAndCapsNodesWithNumbers) {
    FakeRoot root;
    auto r = generate("a100-mig", root, {"--format", "json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto spec = nlohmann::json::parse(r.out);
    const nlohmann::json* mig = nullptr;
    for (const auto& d : spec["devices"])
        if (d["name"] == "1:0") mig = &d;
    ASSERT_NE(mig, nullptr);
    const auto& nodes = (*mig)["containerEdits"]["deviceNodes"];
    ASSERT_EQ(nodes.size(), 3u);
    EXPECT_EQ(nodes[0]["path"], "/dev/nvidia1");
    // GPU minor 1, GI 2, CI 0 in the driver's layout: 3 + 1*135 + 2*9 = 156, CI 0 = 157.
    EXPECT_EQ(nodes[1]["path"], "/dev/nvidia-caps/nvidia-cap156");
    EXPECT_EQ(nodes[2]["path"], "/dev/nvidia-caps/nvidia-cap157");
    if (is_root()) {
        EXPECT_EQ(nodes[1]["major"], 511);
        EXPECT_EQ(nodes[1]["minor"], 156);
        EXPECT_EQ(nodes[1]["type"], "c");
    }
    bool by_uuid = false;
    for (const auto& d : spec["devices"]) by_uuid = by_uuid || d["name"] == "MIG-7b8347a7-1fe5-eb5c-1670-8c5b74d9ad48";
    EXPECT_TRUE(by_uuid);
}

TEST(CdiGenerate, TypeIndexNamesAndNoHooks) {
    FakeRoot root;
    auto r = generate("a100-mig", root, {"--format", "json", "--device-name-strategy", "type-index", "--no-hooks"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto spec = nlohmann::json::parse(r.out);
    EXPECT_EQ(spec["devices"][0]["name"], "gpu0");
    EXPECT_EQ(spec["devices"][4]["name"], "mig0:0");
    EXPECT_FALSE(spec["containerEdits"].contains("hooks"));
}

TEST(CdiGenerate, OutputFileIsJsonByExtensionAndLeavesNoTemporaryFiles) {
    FakeRoot root;
    TempDir out;
    auto r = generate("t4x4", root, {"--output", out.path() + "/nvidia.json", "--vendor", "example.com", "--class", "acc"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto spec = nlohmann::json::parse(slurp(out.path() + "/nvidia.json"));
    EXPECT_EQ(spec["kind"], "example.com/acc");
    size_t files = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(out.path())) ++files;
    EXPECT_EQ(files, 1u);
    // t4x4 runs driver 535.161.08: its libraries, not the 550 ones of the same root.
    EXPECT_THAT(spec.dump(), HasSubstr("libcuda.so.535.161.08"));
    EXPECT_THAT(spec.dump(), Not(HasSubstr("libcuda.so.550.54.15")));
}

TEST(CdiGenerate, ErrorsNameTheInput) {
    FakeRoot root;
    auto empty = generate("empty", root);
    EXPECT_EQ(empty.exit_code, 1);
    EXPECT_THAT(empty.err, HasSubstr("no GPUs"));
    auto strategy = generate("t4x4", root, {"--device-name-strategy", "index,serial"});
    EXPECT_EQ(strategy.exit_code, 2);
    EXPECT_THAT(strategy.err, HasSubstr("'serial'"));
    fs::remove(root.path() + "/proc/driver/nvidia-caps/mig-minors");
    auto minors = generate("a100-mig", root);
    EXPECT_EQ(minors.exit_code, 1);
    EXPECT_THAT(minors.err, HasSubstr("mig-minors"));
    auto unwritable = generate("t4x4", root, {"--output", root.path() + "/no/such/dir/spec.yaml"});
    EXPECT_EQ(unwritable.exit_code, 1);
    EXPECT_THAT(unwritable.err, HasSubstr("no/such/dir"));
}
