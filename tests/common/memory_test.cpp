// common/memory.h: the read-only pages of the program go back to the kernel and come back when
// they run again.
#include "common/memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Range {
    std::uintptr_t begin, end;
};

// Whole pages of the main program's read-only PT_LOAD segments (as memory.cpp advises them).
std::vector<Range> readonly_ranges() {
    std::vector<Range> out;
    ::dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* data) {
            if (info->dlpi_name && *info->dlpi_name) return 0;  // the main program only
            const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
            for (int i = 0; i < info->dlpi_phnum; ++i) {
                const ElfW(Phdr)& ph = info->dlpi_phdr[i];
                if (ph.p_type != PT_LOAD || (ph.p_flags & PF_W) || ph.p_memsz != ph.p_filesz) continue;
                const std::uintptr_t b = (info->dlpi_addr + ph.p_vaddr + page - 1) / page * page;
                const std::uintptr_t e = (info->dlpi_addr + ph.p_vaddr + ph.p_memsz) / page * page;
                if (e > b) static_cast<std::vector<Range>*>(data)->push_back({b, e});
            }
            return 0;
        },
        &out);
    return out;
}

// Pages of `ranges` mapped in this process now (/proc/self/pagemap's present bit).
std::size_t present(const std::vector<Range>& ranges) {
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    std::size_t n = 0;
    for (const auto& r : ranges) {
        std::vector<std::uint64_t> entries((r.end - r.begin) / page);
        const auto bytes = static_cast<ssize_t>(entries.size() * 8);
        if (::pread(fd, entries.data(), static_cast<std::size_t>(bytes), static_cast<off_t>(r.begin / page * 8)) != bytes) {
            n = 0;
            break;
        }
        for (auto e : entries) n += (e >> 63) & 1;
    }
    ::close(fd);
    return n;
}

constexpr int kPopulateRead = MADV_POPULATE_READ;  // Linux 5.14

}  // namespace

TEST(Memory, TheProgramsReadOnlyPagesGoBackAndComeBackWhenTheyRun) {
    const auto ranges = readonly_ranges();
    ASSERT_FALSE(ranges.empty());
    // Every page resident first (populated by the kernel: reading them here would trip
    // AddressSanitizer's redzones around read-only globals).
    for (const auto& r : ranges)
        if (::madvise(reinterpret_cast<void*>(r.begin), r.end - r.begin, kPopulateRead) != 0)
            GTEST_SKIP() << "MADV_POPULATE_READ: " << std::strerror(errno) << " (Linux 5.14 or later)";
    std::size_t total = 0;
    for (const auto& r : ranges) total += (r.end - r.begin) / static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t before = present(ranges);
    ASSERT_EQ(before, total);

    const std::size_t advised = kgpu::memory::release_readonly_pages(true, {});
    EXPECT_EQ(advised, total * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)));
    const std::size_t after = present(ranges);
    // Only what ran since (this test's code, gtest's, pagemap reading, each fault bringing the
    // 64 KiB around it) is back.
    EXPECT_LT(after, before) << after << " of " << before << " pages";
}

TEST(Memory, OnlyTheNamedLibrariesAndTheResidentSetIsRead) {
    EXPECT_EQ(kgpu::memory::release_readonly_pages(false, {"/no-such-library.so.0"}), 0u);
    EXPECT_GT(kgpu::memory::resident_bytes(), 0u);
    kgpu::memory::trim_heap();
}

// The release policy in time given by the test: nothing before the first busy(), a release
// `settle` after it, then at each `check` only when the resident set grew by more than `regrown`.
TEST(Settler, ReleasesOnceSettledAndThenOnlyWhenTheResidentSetGrew) {
    using namespace std::chrono_literals;
    using kgpu::memory::Settler;
    Settler s(Settler::Policy{.settle = 10s, .regrown = 16u << 20, .check = 60s});
    const auto t0 = Settler::Clock::now();
    EXPECT_EQ(s.due(), Settler::Clock::time_point::max());
    EXPECT_FALSE(s.poll(t0 + 1h));

    s.busy(t0);
    EXPECT_EQ(s.due(), t0 + 10s);
    EXPECT_FALSE(s.poll(t0 + 9s));
    s.busy(t0 + 5s);  // busy again: the settling starts over
    EXPECT_FALSE(s.poll(t0 + 10s));
    const auto first = s.poll(t0 + 15s);
    ASSERT_TRUE(first);
    EXPECT_GT(first->before, 0u);

    EXPECT_EQ(s.due(), t0 + 15s + 60s);
    EXPECT_FALSE(s.poll(t0 + 74s));
    EXPECT_FALSE(s.poll(t0 + 75s)) << "released at a check though the resident set did not grow by 16 MiB";
    EXPECT_EQ(s.due(), t0 + 135s) << "a check that found no growth waits a whole period again";

    std::vector<char> grown(48u << 20);
    std::memset(grown.data(), 1, grown.size());
    const auto second = s.poll(t0 + 135s);
    ASSERT_TRUE(second);
    EXPECT_GT(second->before, first->after + (16u << 20));
    EXPECT_EQ(grown[grown.size() / 2], 1);
}
