// Giving resident pages back to the kernel that a long-running process no longer needs.
//
// A loaded object's read-only segments (code, read-only data, the symbol and relocation tables
// only the loader read) are never written, so their resident pages are the file's: dropping them
// from the process (MADV_DONTNEED) loses nothing, and what runs again is faulted back from the
// page cache, 64-128 KiB around each fault (the kernel's fault-around; the kgpu binary keeps what
// its serving processes run together for that reason: src/function-order.txt). Start-up code (command line, config parsing, discovery, the gRPC
// server's setup) otherwise stays in the RSS for good. The writable segment, and with it the
// relocated RELRO data, is never touched. One side effect: a page the kernel or a debugger
// rewrote to hold a breakpoint (a uprobe of an eBPF tracer, a gdb breakpoint) is dropped with the
// rest, so such probes in these objects do not survive the call.
#pragma once

#include <chrono>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string_view>

namespace kgpu::memory {

// Drops the resident pages of the read-only segments of the main executable (when `main_program`)
// and of every loaded object whose path contains one of `libraries` ("/libssl.so.3"): whole pages
// strictly inside each segment; objects with text relocations are left alone. Safe while other
// threads run that code. Returns the bytes advised.
std::size_t release_readonly_pages(bool main_program, std::initializer_list<std::string_view> libraries);

// malloc_trim(0): the free memory at the top and inside every malloc arena back to the kernel.
void trim_heap();

// This process's resident set (/proc/self/statm), in bytes; 0 when it cannot be read.
std::size_t resident_bytes();

// What a settled long-running process gives back: the pages of its own code and read-only data
// (release_readonly_pages of the main executable) and its free heap (trim_heap). Returns the
// resident set before and after.
struct Released {
    std::size_t before = 0, after = 0;
};
Released release_own_pages();

// When a long-running process gives its pages back (release_own_pages): `settle` after it last
// did something (start-up, serving started, a reload), and after that, checked at most once per
// `check`, whenever its resident set has grown by more than `regrown` since the last release (a
// burst of calls brings its serving path's pages and malloc arenas back). The device plugin's and
// the exporter's loops both follow it: they call busy() at start and when their configuration
// changes (the plugin: serving started, a reload, a label or MIG change), wait no longer than
// due(), and call poll() when they wake.
class Settler {
public:
    using Clock = std::chrono::steady_clock;
    struct Policy {
        std::chrono::milliseconds settle{std::chrono::seconds(10)};
        std::size_t regrown = 1u << 20;
        std::chrono::milliseconds check{std::chrono::minutes(1)};
    };
    Settler() = default;
    explicit Settler(Policy p) : policy_(p) {}

    // Something happened: give the pages back `settle` from now (not before).
    void busy(Clock::time_point now = Clock::now()) { release_at_ = now + policy_.settle; }
    // When poll() has something to do next; Clock::time_point::max() before the first busy().
    Clock::time_point due() const;
    // Gives the pages back when due (settled, or grown by `regrown` at a check) and says how much.
    std::optional<Released> poll(Clock::time_point now = Clock::now());
    // poll(), and a debug line "<who>: resident set <before> -> <after> KiB (...)" when it released.
    void poll_logged(std::string_view who, Clock::time_point now = Clock::now());

private:
    Policy policy_;
    std::optional<Clock::time_point> release_at_;
    std::optional<Clock::time_point> checked_;  // the last release or regrowth check
    std::size_t released_ = 0;                   // the resident set after the last release
};

}  // namespace kgpu::memory
