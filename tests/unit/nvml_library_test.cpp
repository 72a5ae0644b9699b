// The loader: table filled once, versioned names preferred, missing optional entries answer
// NOT_SUPPORTED, missing required ones are all listed in one error, and every load failure names
// the paths tried.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "nvml/device.h"
#include "nvml/error.h"
#include "nvml/library.h"
#include "cdi/ld_cache_builder.h"
#include "support/fake_nvml.h"
#include "support/process.h"

using namespace kgpu;
using ::testing::AllOf;
using ::testing::HasSubstr;

namespace {

class NvmlLibraryTest : public ::testing::Test {
protected:
    void SetUp() override {
        test::fake_node() = {};
        test::fake_node().gpus.resize(2);
        test::fake_node().gpus[1].uuid = "GPU-11111111-1111-1111-1111-111111111111";
    }
};

TEST_F(NvmlLibraryTest, TableWithoutRequiredEntriesListsEveryMissingOne) {
    nvml::EntryPoints t{};
    t.Shutdown = [] { return NVML_SUCCESS; };
    auto lib = nvml::Library::from_table(t, "in-memory");
    ASSERT_FALSE(lib);
    EXPECT_EQ(lib.error().code, Code::not_supported);
    EXPECT_THAT(lib.error().message,
                AllOf(HasSubstr("nvmlInit_v2 (or nvmlInit)"), HasSubstr("nvmlErrorString"),
                      HasSubstr("nvmlDeviceGetCount_v2 (or nvmlDeviceGetCount)"), HasSubstr("nvmlDeviceGetUUID"),
                      HasSubstr("nvmlSystemGetDriverVersion")));
    EXPECT_THAT(lib.error().message, ::testing::Not(HasSubstr("nvmlShutdown")));
}

TEST_F(NvmlLibraryTest, MissingOptionalEntryAnswersNotSupported) {
    auto t = test::fake_table();
    ASSERT_EQ(t.DeviceGetSerial, nullptr);
    auto lib = nvml::Library::from_table(t, "in-memory");
    ASSERT_TRUE(lib) << lib.error().message;
    EXPECT_THAT((*lib)->missing_optional(), ::testing::Contains("nvmlDeviceGetSerial"));
    auto session = nvml::Session::open(*lib);
    ASSERT_TRUE(session);
    auto dev = session->device_by_index(0);
    ASSERT_TRUE(dev);
    auto serial = dev->serial();
    ASSERT_FALSE(serial);
    EXPECT_EQ(serial.error().code, Code::not_supported);
    EXPECT_EQ(serial.error().nvml_return, NVML_ERROR_NOT_SUPPORTED);
    EXPECT_THAT(serial.error().message, HasSubstr("nvmlDeviceGetSerial"));
}

TEST_F(NvmlLibraryTest, OverriddenEntryFailsWithItsNameAndCode) {
    auto t = test::fake_table();
    t.DeviceGetUUID = [](nvmlDevice_t, char*, unsigned) { return NVML_ERROR_GPU_IS_LOST; };
    auto lib = nvml::Library::from_table(t, "in-memory");
    ASSERT_TRUE(lib);
    auto session = nvml::Session::open(*lib);
    ASSERT_TRUE(session);
    auto uuid = session->device_by_index(1)->uuid();
    ASSERT_FALSE(uuid);
    EXPECT_EQ(uuid.error().code, Code::gpu_lost);
    EXPECT_EQ(uuid.error().nvml_return, NVML_ERROR_GPU_IS_LOST);
    EXPECT_THAT(uuid.error().message, AllOf(HasSubstr("nvmlDeviceGetUUID"), HasSubstr("GPU_IS_LOST (15)"),
                                            HasSubstr("GPU is lost")));
}

TEST_F(NvmlLibraryTest, SessionShutsDownOnceWhenTheLastOwnerGoes) {
    auto lib = nvml::Library::from_table(test::fake_table(), "in-memory");
    ASSERT_TRUE(lib);
    {
        auto session = nvml::Session::open(*lib);
        ASSERT_TRUE(session);
        EXPECT_EQ(test::fake_node().init_calls, 1);
        auto dev = session->device_by_index(0);
        ASSERT_TRUE(dev);
        { auto moved = std::move(*session); }
        // A device keeps NVML initialised: its handle would be invalid after shutdown.
        EXPECT_EQ(test::fake_node().shutdown_calls, 0);
        EXPECT_TRUE(dev->uuid());
    }
    EXPECT_EQ(test::fake_node().shutdown_calls, 1);
}

TEST_F(NvmlLibraryTest, InitFailureCarriesTheReturnCode) {
    test::fake_node().init_result = NVML_ERROR_DRIVER_NOT_LOADED;
    auto lib = nvml::Library::from_table(test::fake_table(), "in-memory");
    ASSERT_TRUE(lib);
    auto session = nvml::Session::open(*lib);
    ASSERT_FALSE(session);
    EXPECT_EQ(session.error().nvml_return, NVML_ERROR_DRIVER_NOT_LOADED);
    EXPECT_EQ(session.error().code, Code::unavailable);
    EXPECT_THAT(session.error().message, HasSubstr("DRIVER_NOT_LOADED"));
    EXPECT_EQ(test::fake_node().shutdown_calls, 0);  // a failed init needs no shutdown
    EXPECT_THAT(std::string(nvml::init_failure_hint(NVML_ERROR_DRIVER_NOT_LOADED)), HasSubstr("kernel module"));
}

TEST(NvmlCandidatePaths, SearchesTheDriverRootThenTheLoader) {
    auto paths = nvml::candidate_paths({"", "/run/nvidia/driver"});
    ASSERT_EQ(paths.size(), 12u);  // nvidia-ctk's 11 directories, then the bare name
    EXPECT_EQ(paths.front(), "/run/nvidia/driver/libnvidia-ml.so.1");
    EXPECT_EQ(paths[1], "/run/nvidia/driver/usr/lib64/libnvidia-ml.so.1");
    EXPECT_EQ(paths[2], "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
    EXPECT_EQ(paths[4], "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.1");
    EXPECT_EQ(paths[8], "/run/nvidia/driver/lib/aarch64-linux-gnu/libnvidia-ml.so.1");
    EXPECT_EQ(paths.back(), "libnvidia-ml.so.1");
    EXPECT_EQ(nvml::candidate_paths({"", "/"})[1], "/usr/lib64/libnvidia-ml.so.1");
    EXPECT_EQ(nvml::candidate_paths({"/opt/x/libnvidia-ml.so.1", "/"}),
              std::vector<std::string>{"/opt/x/libnvidia-ml.so.1"});
}

// Issue #22 item 5: a driver only the driver root's /etc/ld.so.cache lists (a directory its
// ld.so.conf.d names) is found there, as nvidia-ctk's locator finds it, before the bare name
// (which searches this machine's cache, not the root's). The root's absolute links stay in it.
TEST(NvmlLoad, FindsTheLibraryTheDriverRootsLoaderCacheLists) {
    test::TempDir root;
    const std::string dir = root.path() + "/opt/nvidia/lib";
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(KGPU_SIM_LIBRARY, dir + "/libnvidia-ml.so.550.54.15");
    std::filesystem::create_symlink("/opt/nvidia/lib/libnvidia-ml.so.550.54.15", dir + "/libnvidia-ml.so.1");
    root.write("etc/ld.so.cache", test::ld_so_cache({{"libnvidia-ml.so.1", "/opt/nvidia/lib/libnvidia-ml.so.1"},
                                                     {"libnvidia-ml.so.1", "/opt/i386/libnvidia-ml.so.1", 0x0003},
                                                     {"libcuda.so.1", "/opt/nvidia/lib/libcuda.so.1"}}));
    auto paths = nvml::candidate_paths({"", root.path()});
    ASSERT_EQ(paths.size(), 13u);
    EXPECT_EQ(paths[11], dir + "/libnvidia-ml.so.550.54.15");  // the link resolved inside the root
    EXPECT_EQ(paths.back(), "libnvidia-ml.so.1");
    auto lib = nvml::Library::load({"", root.path()});
    ASSERT_TRUE(lib) << lib.error().message;
    EXPECT_EQ((*lib)->origin(), dir + "/libnvidia-ml.so.550.54.15");
}

TEST(NvmlLoad, NothingLoadsNamesEveryPathTriedAndSuggestsDoctor) {
    auto root = std::filesystem::temp_directory_path() / "kgpu-no-driver-root";
    auto lib = nvml::Library::load({"", root});
    // The bare name may resolve on a machine with a driver; this test is about the message.
    if (lib) GTEST_SKIP() << "a system libnvidia-ml.so.1 is installed";
    EXPECT_EQ(lib.error().code, Code::not_found);
    for (const auto& p : nvml::candidate_paths({"", root})) EXPECT_THAT(lib.error().message, HasSubstr(p));
    EXPECT_THAT(lib.error().message, HasSubstr("kgpu doctor"));
}

TEST(NvmlLoad, ExplicitPathThatIsNotALibrary) {
    auto path = std::filesystem::temp_directory_path() / "kgpu-not-a-library.so.1";
    std::ofstream(path) << "not an ELF file\n";
    auto lib = nvml::Library::load({path.string(), "/"});
    ASSERT_FALSE(lib);
    EXPECT_THAT(lib.error().message, AllOf(HasSubstr(path.string()), HasSubstr("kgpu doctor")));
    std::filesystem::remove(path);
}

TEST(NvmlLoad, RealLibraryWithoutInitIsRefusedListingTheMissingSymbols) {
    auto lib = nvml::Library::load({KGPU_NOINIT_LIBRARY, "/"});
    ASSERT_FALSE(lib);
    EXPECT_EQ(lib.error().code, Code::not_supported);
    EXPECT_THAT(lib.error().message, AllOf(HasSubstr(KGPU_NOINIT_LIBRARY), HasSubstr("nvmlInit_v2 (or nvmlInit)"),
                                           HasSubstr("nvmlDeviceGetHandleByIndex_v2"), HasSubstr("kgpu doctor")));
}

TEST(NvmlLoad, SimulatorBindsEveryEntryPoint) {
    auto lib = nvml::Library::load({KGPU_SIM_LIBRARY, "/"});
    ASSERT_TRUE(lib) << lib.error().message;
    EXPECT_EQ((*lib)->origin(), KGPU_SIM_LIBRARY);
    EXPECT_EQ((*lib)->symbol_name("Init"), "nvmlInit_v2");
    EXPECT_EQ((*lib)->symbol_name("EventSetWait"), "nvmlEventSetWait_v2");
    EXPECT_THAT((*lib)->missing_optional(), ::testing::IsEmpty());
}

}  // namespace
