// The ld.so.cache reader (common/ld_cache.h) and the driver library lookup through it
// (cdi::LibraryLocator): caches built from the format here, and written by the system's own
// ldconfig when it can run (root, /sbin/ldconfig).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cdi/driver_files.h"
#include "common/ld_cache.h"
#include "ld_cache_builder.h"
#include "support/process.h"

using namespace kgpu;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

const std::vector<test::CacheEntry> kEntries = {
    {"libcuda.so.1", "/opt/nv/lib/libcuda.so.1"},
    {"libcuda.so.1", "/opt/nv/lib32/libcuda.so.1", 0x0003},               // i386
    {"libnvidia-ml.so.1", "/opt/nv/lib/libnvidia-ml.so.1", 0x0a03},      // AArch64
    {"libfoo.so.1", "/opt/other/libfoo.so.1", 0x0403},                   // an architecture nobody reads
    {"libbar.so.1", "/opt/other/libbar.so.1", 0x0300},                   // not ELF
    {"libcuda.so.1", "/opt/nv/lib/libcuda.so.1"},                        // the same path again
};

std::vector<std::string> paths(const std::vector<cdi::HostFile>& files) {
    std::vector<std::string> out;
    for (const auto& f : files) out.push_back(f.path);
    return out;
}

std::string ldconfig() {
    for (const char* p : {"/sbin/ldconfig", "/usr/sbin/ldconfig"})
        if (::access(p, X_OK) == 0) return p;
    return "";
}

}  // namespace

TEST(LdCache, NewFormatEntriesAndTheir64BitLibraries) {
    for (bool compat : {false, true}) {
        auto entries = ldcache::parse(test::ld_so_cache(kEntries, compat), "cache");
        ASSERT_TRUE(entries) << entries.error().message;
        ASSERT_EQ(entries->size(), 4u) << compat;  // the unknown architecture and the non-ELF entry are skipped
        EXPECT_EQ((*entries)[0].name, "libcuda.so.1");
        EXPECT_EQ((*entries)[1].bits, 32);
        EXPECT_EQ((*entries)[2].bits, 64);
        EXPECT_THAT(ldcache::libraries64(*entries),
                    ElementsAre("/opt/nv/lib/libcuda.so.1", "/opt/nv/lib/libnvidia-ml.so.1"));
        EXPECT_THAT(ldcache::libraries64(*entries, "/run/nvidia/driver"),
                    ElementsAre("/run/nvidia/driver/opt/nv/lib/libcuda.so.1",
                                "/run/nvidia/driver/opt/nv/lib/libnvidia-ml.so.1"));
    }
}

TEST(LdCache, PathsStayUnderTheRoot) {
    auto entries = ldcache::parse(test::ld_so_cache({{"libx.so.1", "/../../etc/libx.so.1"}, {"liby.so.1", "opt/liby.so.1"}}),
                                  "cache");
    ASSERT_TRUE(entries);
    EXPECT_THAT(ldcache::libraries64(*entries, "/r"), ElementsAre("/r/etc/libx.so.1", "/r/opt/liby.so.1"));
}

TEST(LdCache, MalformedCachesAreErrorsNamingTheFile) {
    auto bad = [](std::string data) {
        auto r = ldcache::parse(data, "/root/etc/ld.so.cache");
        EXPECT_FALSE(r) << data.size();
        if (!r) {
            EXPECT_EQ(r.error().code, Code::parse);
            EXPECT_THAT(r.error().message, HasSubstr("/root/etc/ld.so.cache"));
        }
        return r ? std::string() : r.error().message;
    };
    EXPECT_THAT(bad(""), HasSubstr("shorter than any cache header"));
    EXPECT_THAT(bad(std::string(64, 'x')), HasSubstr("glibc-ld.so.cache1.1"));
    // The old format alone (glibc < 2.2), or its new part cut off.
    std::string old_only("ld.so-1.7.0\0\1\0\0\0", 16);
    old_only += std::string(12, '\0');
    EXPECT_THAT(bad(old_only), HasSubstr("old-format"));
    // A header counting more entries than the file holds, even absurdly many.
    std::string cache = test::ld_so_cache(kEntries);
    EXPECT_THAT(bad(cache.substr(0, 48 + 24)), HasSubstr("cut short"));
    std::string huge = cache;
    huge[20] = huge[21] = huge[22] = huge[23] = '\xff';
    EXPECT_THAT(bad(huge), HasSubstr("4294967295 entries"));
    std::string compat = test::ld_so_cache(kEntries, true);
    compat[12] = compat[13] = compat[14] = compat[15] = '\xff';
    EXPECT_THAT(bad(compat), HasSubstr("old-format"));
}

TEST(LdCache, EveryTruncationIsAnErrorOrASubsetNeverACrash) {
    for (bool compat : {false, true}) {
        const std::string cache = test::ld_so_cache(kEntries, compat);
        for (size_t n = 0; n < cache.size(); ++n) {
            auto r = ldcache::parse(std::string_view(cache).substr(0, n), "cache");
            if (r) {
                EXPECT_LE(r->size(), 4u) << n;
            }
        }
    }
}

TEST(LdCache, StringsOutsideTheFileAreSkipped) {
    std::string cache = test::ld_so_cache({{"liba.so.1", "/a/liba.so.1"}, {"libb.so.1", "/b/libb.so.1"}});
    // The second entry's value: past the end; the first's key: the last byte (a NUL, so empty).
    const uint32_t past = static_cast<uint32_t>(cache.size()) + 10, last = static_cast<uint32_t>(cache.size()) - 1;
    std::memcpy(&cache[48 + 24 + 8], &past, 4);
    std::memcpy(&cache[48 + 4], &last, 4);
    auto r = ldcache::parse(cache, "cache");
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->empty());
    // A string without its NUL at the end of the file.
    std::string cut = test::ld_so_cache({{"liba.so.1", "/a/liba.so.1"}});
    cut.pop_back();
    r = ldcache::parse(cut, "cache");
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->empty());
}

TEST(LdCache, ReadFromARoot) {
    test::TempDir root;
    auto missing = ldcache::read(root.path());
    ASSERT_FALSE(missing);
    EXPECT_EQ(missing.error().code, Code::not_found);
    root.write("etc/ld.so.cache", test::ld_so_cache(kEntries));
    auto r = ldcache::read(root.path());
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->size(), 4u);
}

// A driver in a directory only ld.so.conf names (/opt/nv/lib), found through the root's cache:
// SONAME link -> versioned file; relative and absolute (root-relative) links.
TEST(LdCacheLookup, DriverOnlyInTheCacheIsFound) {
    for (bool absolute : {false, true}) {
        test::TempDir root;
        root.write("opt/nv/lib/libcuda.so.550.54.15", "x");
        root.write("opt/nv/lib/libnvidia-ml.so.550.54.15", "x");
        root.write("opt/nv/lib/vdpau/libvdpau_nvidia.so.550.54.15", "x");
        root.write("opt/nv/lib/libnvidia-egl-gbm.so.1.1.1", "x");
        fs::create_symlink(absolute ? "/opt/nv/lib/libcuda.so.550.54.15" : "libcuda.so.550.54.15",
                           root.path() + "/opt/nv/lib/libcuda.so.1");
        fs::create_symlink("libnvidia-ml.so.550.54.15", root.path() + "/opt/nv/lib/libnvidia-ml.so.1");
        fs::create_symlink("libnvidia-egl-gbm.so.1.1.1", root.path() + "/opt/nv/lib/libnvidia-egl-gbm.so.1");
        root.write("etc/ld.so.cache", test::ld_so_cache({{"libnvidia-ml.so.1", "/opt/nv/lib/libnvidia-ml.so.1"},
                                                         {"libnvidia-egl-gbm.so.1", "/opt/nv/lib/libnvidia-egl-gbm.so.1"},
                                                         {"libcuda.so.1", "/opt/nv/lib/libcuda.so.1"},
                                                         {"libgone.so.1", "/opt/nv/lib/libgone.so.1"}}));
        auto found = cdi::find_driver_libraries(root.path(), "550.54.15");
        EXPECT_EQ(found.dirs, std::vector<std::string>{"/opt/nv/lib"});
        ASSERT_THAT(paths(found.libraries), ElementsAre("/opt/nv/lib/libcuda.so.550.54.15",
                                                        "/opt/nv/lib/libnvidia-ml.so.550.54.15",
                                                        "/opt/nv/lib/vdpau/libvdpau_nvidia.so.550.54.15"));
        EXPECT_EQ(found.libraries[0].host_path, root.path() + "/opt/nv/lib/libcuda.so.550.54.15");
        EXPECT_THAT(found.searched, ::testing::Contains(root.path() + "/etc/ld.so.cache"));
        cdi::LibraryLocator libs(root.path());
        EXPECT_THAT(paths(libs.locate("libnvidia-egl-gbm.so.*.*")), ElementsAre("/opt/nv/lib/libnvidia-egl-gbm.so.1.1.1"));
        EXPECT_TRUE(libs.locate("libnvidia-egl-wayland.so.*.*").empty());
    }
}

// nvidia-ctk's order: the standard directories first; the cache only for a pattern they miss.
// Explicit search paths never read the cache.
TEST(LdCacheLookup, StandardDirectoriesWinAndExplicitPathsSkipTheCache) {
    test::TempDir root;
    root.write("usr/lib64/libcuda.so.550.54.15", "x");
    root.write("opt/nv/lib/libcuda.so.550.54.15", "x");
    root.write("opt/nv/lib/libnvidia-egl-wayland.so.1.1.13", "x");
    root.write("etc/ld.so.cache", test::ld_so_cache({{"libcuda.so.550.54.15", "/opt/nv/lib/libcuda.so.550.54.15"},
                                                     {"libnvidia-egl-wayland.so.1", "/opt/nv/lib/libnvidia-egl-wayland.so.1.1.13"}}));
    auto found = cdi::find_driver_libraries(root.path(), "550.54.15");
    EXPECT_EQ(found.dirs, std::vector<std::string>{"/usr/lib64"});
    EXPECT_THAT(found.searched, ::testing::Not(::testing::Contains(HasSubstr("ld.so.cache"))));
    cdi::LibraryLocator libs(root.path());
    EXPECT_THAT(paths(libs.locate("libnvidia-egl-wayland.so.*.*")),
                ElementsAre("/opt/nv/lib/libnvidia-egl-wayland.so.1.1.13"));
    cdi::LibraryLocator explicit_paths(root.path(), {root.path() + "/usr/lib64"});
    EXPECT_TRUE(explicit_paths.locate("libnvidia-egl-wayland.so.*.*").empty());
    EXPECT_THAT(explicit_paths.searched(), ElementsAre(root.path() + "/usr/lib64"));
}

TEST(LdCacheLookup, ABadCacheIsSkipped) {
    test::TempDir root;
    root.write("opt/nv/lib/libcuda.so.550.54.15", "x");
    std::string cache = test::ld_so_cache({{"libcuda.so.550.54.15", "/opt/nv/lib/libcuda.so.550.54.15"}});
    root.write("etc/ld.so.cache", cache.substr(0, 60));
    auto found = cdi::find_driver_libraries(root.path(), "550.54.15");
    EXPECT_TRUE(found.libraries.empty());
    EXPECT_THAT(found.searched, ::testing::Contains(root.path() + "/etc/ld.so.cache (unreadable)"));
    fs::remove(root.path() + "/etc/ld.so.cache");
    found = cdi::find_driver_libraries(root.path(), "550.54.15");
    EXPECT_THAT(found.searched, ::testing::Contains(root.path() + "/etc/ld.so.cache (missing)"));
}

// The same with caches the system's ldconfig writes for a root (new format, and the compat
// format glibc < 2.32 wrote by default), on real ELF libraries.
TEST(LdCacheLookup, CachesWrittenByLdconfig) {
    const std::string bin = ldconfig();
    if (bin.empty() || ::geteuid() != 0) GTEST_SKIP() << "needs ldconfig and root (ldconfig -r chroots)";
    for (const char* format : {"new", "compat"}) {
        test::TempDir root;
        fs::create_directories(root.path() + "/var/lib/nvidia/lib64");
        for (const char* lib : {"libcuda.so.550.54.15", "libnvidia-ptxjitcompiler.so.550.54.15"})
            fs::copy_file(std::string(KGPU_FAKE_DRIVER_DIR) + "/" + lib, root.path() + "/var/lib/nvidia/lib64/" + lib);
        root.write("etc/ld.so.conf", "/var/lib/nvidia/lib64\n");
        auto r = test::run_process({bin, "-c", format, "-r", root.path(), "-f", "/etc/ld.so.conf", "-C", "/etc/ld.so.cache"});
        ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
        // ldconfig made the SONAME links the cache names.
        ASSERT_TRUE(fs::is_symlink(root.path() + "/var/lib/nvidia/lib64/libcuda.so.1"));
        auto entries = ldcache::read(root.path());
        ASSERT_TRUE(entries) << entries.error().message;
        EXPECT_THAT(ldcache::libraries64(*entries, root.path()),
                    ::testing::UnorderedElementsAre(root.path() + "/var/lib/nvidia/lib64/libcuda.so.1",
                                                    root.path() + "/var/lib/nvidia/lib64/libnvidia-ptxjitcompiler.so.1"));
        auto found = cdi::find_driver_libraries(root.path(), "550.54.15");
        EXPECT_EQ(found.dirs, std::vector<std::string>{"/var/lib/nvidia/lib64"}) << format;
        EXPECT_THAT(paths(found.libraries),
                    ElementsAre("/var/lib/nvidia/lib64/libcuda.so.550.54.15",
                                "/var/lib/nvidia/lib64/libnvidia-ptxjitcompiler.so.550.54.15"));
    }
}
