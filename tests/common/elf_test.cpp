// elf::read_interpreter, read_rpath and rewrite (src/common/elf.h): what `kgpu runtime install`
// uses to point its copy at the loader and glibc it carries. Real ELF files (this test's binary,
// the padded kgpu), and hostile ones: truncated, not ELF, headers out of bounds, a path too long.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/elf.h"
#include "support/process.h"
#include "support/files.h"

using ::testing::HasSubstr;

namespace {

using kgpu::test::slurp;

TEST(Elf, ReadsThisProgramsInterpreter) {
    auto in = kgpu::elf::read_interpreter(slurp("/proc/self/exe"), "self");
    ASSERT_TRUE(in) << in.error().message;
    EXPECT_THAT(in->value, HasSubstr("/ld-linux"));
    EXPECT_EQ(in->room, in->value.size() + 1);
}

TEST(Elf, KgpuReservesRoomAndRewritesToAnEquivalentRunnableFile) {
    if (!std::filesystem::exists(KGPU_BINARY)) GTEST_SKIP() << KGPU_BINARY << " not built";
    std::string image = slurp(KGPU_BINARY);
    auto in = kgpu::elf::read_interpreter(image, "kgpu");
    ASSERT_TRUE(in) << in.error().message;
    EXPECT_EQ(in->room, 256u);  // src/CMakeLists.txt pads it to 255 bytes
#if defined(__x86_64__)
    EXPECT_EQ(std::filesystem::path(in->value).lexically_normal(), "/lib64/ld-linux-x86-64.so.2");  // the same loader
#endif
    auto rp = kgpu::elf::read_rpath(image, "kgpu");
    ASSERT_TRUE(rp) << rp.error().message;
    EXPECT_TRUE(rp->value.starts_with("$ORIGIN/lib/")) << rp->value;
    EXPECT_EQ(rp->room, 256u);

    ASSERT_TRUE(kgpu::elf::rewrite(image, *in, "/opt/k/lib/ld-linux-x86-64.so.2", "kgpu"));
    ASSERT_TRUE(kgpu::elf::rewrite(image, *rp, "/opt/k/lib", "kgpu"));
    EXPECT_EQ(image.size(), slurp(KGPU_BINARY).size());
    EXPECT_EQ(kgpu::elf::read_interpreter(image, "kgpu")->value, "/opt/k/lib/ld-linux-x86-64.so.2");
    EXPECT_EQ(kgpu::elf::read_rpath(image, "kgpu")->value, "/opt/k/lib");
    // Rewritable again (a second install into another directory): the room stays the build's.
    EXPECT_EQ(kgpu::elf::read_interpreter(image, "kgpu")->room, 256u);

    // Too long, or not absolute: refused, the image untouched.
    const std::string before = image;
    auto too_long = kgpu::elf::rewrite(image, *in, "/" + std::string(255, 'x'), "copy");
    ASSERT_FALSE(too_long);
    EXPECT_EQ(too_long.error().code, kgpu::Code::invalid_argument);
    EXPECT_THAT(too_long.error().message, HasSubstr("does not fit the 255 bytes"));
    EXPECT_FALSE(kgpu::elf::rewrite(image, *in, "relative/ld.so", "copy"));
    EXPECT_EQ(image, before);
}

TEST(Elf, HostileFilesAreParseErrorsNamingTheFile) {
    const std::string self = slurp("/proc/self/exe");
    for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
             {"empty", ""},
             {"text", "#!/bin/sh\necho hi\n"},
             {"header only", self.substr(0, 64)},
             {"truncated", self.substr(0, 600)},
         }) {
        auto in = kgpu::elf::read_interpreter(bytes, name);
        ASSERT_FALSE(in) << name;
        EXPECT_EQ(in.error().code, kgpu::Code::parse) << name;
        EXPECT_THAT(in.error().message, HasSubstr(name));
        EXPECT_FALSE(kgpu::elf::read_rpath(bytes, name)) << name;
    }
    // 32-bit ELF and program headers pointing past the end.
    std::string ident = self.substr(0, 64);
    ident[4] = 1;  // ELFCLASS32
    EXPECT_THAT(kgpu::elf::read_interpreter(ident, "x").error().message, HasSubstr("64-bit"));
    std::string far = self;
    const uint64_t phoff = uint64_t{1} << 40;
    std::memcpy(far.data() + 32, &phoff, sizeof phoff);  // e_phoff
    EXPECT_THAT(kgpu::elf::read_interpreter(far, "x").error().message, HasSubstr("out of bounds"));
}

TEST(Elf, AStaticProgramHasNoInterpreter) {
    if (!std::filesystem::exists("/bin/busybox")) GTEST_SKIP() << "no /bin/busybox (busybox-static)";
    auto in = kgpu::elf::read_interpreter(slurp("/bin/busybox"), "busybox");
    ASSERT_FALSE(in);
    EXPECT_EQ(in.error().code, kgpu::Code::not_found);
}

// `runtime install` copies kgpu without its debug information (issue #22 item 7): every container
// start executes the copy. What the loader reads stays byte for byte (so the copy runs, and its
// interpreter and RPATH can still be rewritten); the section headers stay valid for readelf.
TEST(Elf, StripDebugDropsDebugSectionsAndTheSymbolTableOnly) {
    if (!std::filesystem::exists(KGPU_BINARY)) GTEST_SKIP() << KGPU_BINARY << " not built";
    const std::string image = slurp(KGPU_BINARY);
    auto s = kgpu::elf::strip_debug(image, "kgpu");
    ASSERT_TRUE(s) << s.error().message;
    ASSERT_GT(s->sections, 0u) << "the release build has debug information (-g1)";
    EXPECT_LT(s->image.size(), image.size() / 2) << image.size() << " -> " << s->image.size();
    EXPECT_EQ(kgpu::elf::read_interpreter(s->image, "stripped")->value, kgpu::elf::read_interpreter(image, "kgpu")->value);
    EXPECT_EQ(kgpu::elf::read_rpath(s->image, "stripped")->value, kgpu::elf::read_rpath(image, "kgpu")->value);
    // Again: nothing left to drop, the same bytes.
    auto again = kgpu::elf::strip_debug(s->image, "stripped");
    ASSERT_TRUE(again) << again.error().message;
    EXPECT_EQ(again->sections, 0u);
    EXPECT_TRUE(again->image == s->image);

    const auto dir = std::filesystem::temp_directory_path() / ("kgpu-strip-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto copy = dir / "kgpu";
    std::ofstream(copy, std::ios::binary) << s->image;
    std::filesystem::permissions(copy, std::filesystem::perms(0755));
    auto version = kgpu::test::run_process({copy.string(), "--version"});
    EXPECT_EQ(version.exit_code, 0) << version.out << version.err;
    if (std::filesystem::exists("/usr/bin/readelf")) {
        auto sections = kgpu::test::run_process({"/usr/bin/readelf", "-S", "-W", copy.string()});
        EXPECT_EQ(sections.exit_code, 0);
        EXPECT_EQ(sections.err, "");  // no warning about a broken header
        EXPECT_THAT(sections.out, HasSubstr(".text"));
        EXPECT_THAT(sections.out, HasSubstr(".dynsym"));
        EXPECT_THAT(sections.out, HasSubstr(".shstrtab"));
        EXPECT_THAT(sections.out, ::testing::Not(HasSubstr(".debug_")));
        EXPECT_THAT(sections.out, ::testing::Not(HasSubstr(" .symtab")));
    }
    std::filesystem::remove_all(dir);
    // Not ELF: an error naming the file, as the other readers.
    auto bad = kgpu::elf::strip_debug("#!/bin/sh\n", "script");
    ASSERT_FALSE(bad);
    EXPECT_THAT(bad.error().message, HasSubstr("script: not an ELF file"));
}

}  // namespace
