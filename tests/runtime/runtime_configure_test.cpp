// `kgpu runtime configure` end to end on temp copies of the fixtures; the merged result is read
// back by Debian's real containerd (`containerd --config … config dump`) when it is installed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "support/process.h"

namespace fs = std::filesystem;
using kgpu::test::run_process;
using kgpu::test::RunResult;
using kgpu::test::TempDir;
using ::testing::HasSubstr;

namespace {

const std::string kFixtures = std::string(KGPU_SOURCE_DIR) + "/tests/runtime/fixtures/";
const std::string kContainerd = "/usr/bin/containerd";

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string copy_fixture(const TempDir& dir, const std::string& name) {
    return dir.write("config.toml", slurp(kFixtures + name));
}

RunResult configure(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {KGPU_BINARY, "runtime", "configure", "--runtime", "containerd"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_process(argv);
}

// The config as containerd reads it (imports merged), or "" with a skip when containerd is absent.
std::string dump(const std::string& config) {
    auto r = run_process({kContainerd, "--config", config, "config", "dump"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
}

}  // namespace

TEST(RuntimeConfigureCli, WritesAtomicallyWithBackupAndSecondRunChangesNothing) {
    TempDir dir;
    const std::string config = copy_fixture(dir, "v2-systemd.toml");
    const std::string original = slurp(config);
    auto r = configure({"--config", config, "--set-as-default", "--enable-cdi"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr("systemctl restart containerd"));
    EXPECT_EQ(slurp(config + ".bak"), original);
    const std::string once = slurp(config);
    EXPECT_THAT(once, HasSubstr("default_runtime_name = \"nvidia\""));
    auto again = configure({"--config", config, "--set-as-default", "--enable-cdi"});
    ASSERT_EQ(again.exit_code, 0) << again.err;
    EXPECT_THAT(again.err, HasSubstr("already configured"));
    EXPECT_EQ(slurp(config), once);
    size_t files = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++files;
    EXPECT_EQ(files, 2u);  // config.toml and config.toml.bak, no temporary left behind
}

TEST(RuntimeConfigureCli, DryRunPrintsADiffAndWritesNothing) {
    TempDir dir;
    const std::string config = copy_fixture(dir, "v2-systemd.toml");
    const std::string original = slurp(config);
    auto r = configure({"--config", config, "--dry-run"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("--- " + config));
    EXPECT_THAT(r.out, HasSubstr("+            BinaryName = \"/usr/bin/nvidia-container-runtime\""));
    EXPECT_EQ(slurp(config), original);
    EXPECT_FALSE(fs::exists(config + ".bak"));
}

TEST(RuntimeConfigureCli, BrokenConfigIsLeftUntouchedAndReportedWithItsLine) {
    TempDir dir;
    const std::string config = copy_fixture(dir, "broken.toml");
    const std::string original = slurp(config);
    auto r = configure({"--config", config});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr(config + ":4:"));
    EXPECT_EQ(slurp(config), original);
    EXPECT_FALSE(fs::exists(config + ".bak"));
}

TEST(RuntimeConfigureCli, ContainerdReadsTheEditedConfig) {
    if (!fs::exists(kContainerd)) GTEST_SKIP() << "containerd not installed (scripts/setup installs it)";
    for (const std::string fixture : {"v2-systemd.toml", "v1-legacy.toml"}) {
        TempDir dir;
        const std::string config = copy_fixture(dir, fixture);
        auto r = configure({"--config", config, "--set-as-default", "--enable-cdi"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const std::string merged = dump(config);
        EXPECT_THAT(merged, HasSubstr(".containerd.runtimes.nvidia.options]")) << fixture;
        EXPECT_THAT(merged, HasSubstr("BinaryName = \"/usr/bin/nvidia-container-runtime\"")) << fixture;
        EXPECT_THAT(merged, HasSubstr("default_runtime_name = \"nvidia\"")) << fixture;
        // Debian 12's containerd 1.6 does not know enable_cdi (containerd 1.7 added it), so its
        // dump drops the key; the unit tests check that kgpu writes it.
    }
}

TEST(RuntimeConfigureCli, DropInIsMergedByContainerdWithTheRestOfTheCriTable) {
    TempDir dir;
    const std::string config = copy_fixture(dir, "v2-systemd.toml");
    const std::string drop_in = dir.path() + "/conf.d/99-nvidia.toml";
    auto r = configure({"--config", config, "--drop-in", drop_in, "--enable-cdi"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(slurp(config), HasSubstr("imports = [\"" + drop_in + "\"]"));
    EXPECT_THAT(slurp(drop_in), HasSubstr("BinaryName"));
    auto again = configure({"--config", config, "--drop-in", drop_in, "--enable-cdi"});
    ASSERT_EQ(again.exit_code, 0) << again.err;
    EXPECT_THAT(again.err, HasSubstr("already configured"));
    if (!fs::exists(kContainerd)) GTEST_SKIP() << "containerd not installed (scripts/setup installs it)";
    const std::string merged = dump(config);
    EXPECT_THAT(merged, HasSubstr("BinaryName = \"/usr/bin/nvidia-container-runtime\""));
    // Settings of the main config's CRI table survive the import's whole-table replacement.
    EXPECT_THAT(merged, HasSubstr("sandbox_image = \"registry.k8s.io/pause:3.9\""));
    EXPECT_THAT(merged, HasSubstr("config_path = \"/etc/containerd/certs.d\""));
    EXPECT_THAT(merged, HasSubstr("SystemdCgroup = true"));
}

TEST(RuntimeConfigureCli, BadOptionsAreUsageErrors) {
    TempDir dir;
    const std::string config = copy_fixture(dir, "v2-systemd.toml");
    EXPECT_EQ(configure({"--config", config, "--runtime-path", "relative/runtime"}).exit_code, 2);
    EXPECT_EQ(run_process({KGPU_BINARY, "runtime", "configure", "--runtime", "docker"}).exit_code, 2);
}

// Issue #14: --dry-run's diff needed memory quadratic in the config's lines (a 40k-line config
// took 6.3 GB, 100k lines were OOM-killed). Required: 100k lines in < 10 s of CPU and < 300 MB;
// measured from the child's own accounting (getrusage of the waited-for child: peak RSS and CPU
// time, which a loaded machine does not inflate the way it does wall time). The child also runs
// under `ulimit -v` so a regression fails fast instead of swapping the machine.
TEST(RuntimeConfigureCli, DryRunOnAHundredThousandLinesIsLinear) {
    TempDir dir;
    std::string text = slurp(kFixtures + "v2-systemd.toml");
    for (int i = 0; text.size() < 4 * 1024 * 1024 && i < 25000; ++i)
        text += "[plugins.\"io.containerd.example.v1.p" + std::to_string(i) + "\"]\n  setting_a = \"value " +
                std::to_string(i) + "\"\n  # about plugin " + std::to_string(i) + "\n  setting_b = " + std::to_string(i) + "\n";
    ASSERT_GE(std::count(text.begin(), text.end(), '\n'), 100000);
    const std::string config = dir.write("config.toml", text);
    std::vector<std::string> argv = {"/bin/sh", "-c", "ulimit -v 2097152 && exec \"$0\" \"$@\"", KGPU_BINARY};
#if defined(__SANITIZE_ADDRESS__)
    argv = {KGPU_BINARY};  // AddressSanitizer reserves terabytes of address space: no ulimit -v
#endif
    for (const char* a : {"runtime", "configure", "--config", config.c_str(), "--dry-run", "--set-as-default", "--enable-cdi"})
        argv.push_back(a);
    auto r = run_process(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("+    enable_cdi = true"));
    EXPECT_THAT(r.out, HasSubstr("-      default_runtime_name = \"runc\""));
    EXPECT_EQ(slurp(config), text);  // dry run: nothing written
    rusage ru{};
    ASSERT_EQ(::getrusage(RUSAGE_CHILDREN, &ru), 0);
    const double cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    const long peak_mb = ru.ru_maxrss / 1024;  // kilobytes on Linux
    std::cout << "runtime configure --dry-run, 100k lines: " << cpu_s << " s CPU, peak RSS " << peak_mb << " MB\n";
    EXPECT_LT(cpu_s, 10.0);
    EXPECT_LT(peak_mb, 300);
}
