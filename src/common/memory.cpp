#include "common/memory.h"

#include <link.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>

#include "common/log.h"

namespace kgpu::memory {

namespace {

struct Want {
    bool main_program;
    std::initializer_list<std::string_view> libraries;
    std::size_t advised = 0;
};

bool wanted(const Want& w, std::string_view name) {
    if (name.empty()) return w.main_program;  // dl_iterate_phdr names the main program ""
    for (auto lib : w.libraries)
        if (name.find(lib) != std::string_view::npos) return true;
    return false;
}

bool has_text_relocations(const dl_phdr_info* info) {
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC) continue;
        for (auto* d = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr); d->d_tag != DT_NULL; ++d)
            if (d->d_tag == DT_TEXTREL || (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_TEXTREL))) return true;
    }
    return false;
}

int release_object(dl_phdr_info* info, std::size_t, void* data) {
    auto& w = *static_cast<Want*>(data);
    if (!wanted(w, info->dlpi_name ? info->dlpi_name : "")) return 0;
    // Text relocations would mean the loader wrote into a read-only segment: its pages are no
    // longer the file's.
    if (has_text_relocations(info)) return 0;
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr)& ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_LOAD || (ph.p_flags & PF_W) || ph.p_memsz != ph.p_filesz) continue;
        // Whole pages strictly inside: a page shared with a writable segment is left alone.
        const std::uintptr_t begin = (info->dlpi_addr + ph.p_vaddr + page - 1) / page * page;
        const std::uintptr_t end = (info->dlpi_addr + ph.p_vaddr + ph.p_memsz) / page * page;
        if (end > begin && ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) == 0)
            w.advised += end - begin;
    }
    return 0;
}

}  // namespace

std::size_t release_readonly_pages(bool main_program, std::initializer_list<std::string_view> libraries) {
    Want w{main_program, libraries};
    ::dl_iterate_phdr(release_object, &w);
    return w.advised;
}

void trim_heap() { ::malloc_trim(0); }

std::size_t resident_bytes() {
    std::FILE* f = std::fopen("/proc/self/statm", "re");
    if (!f) return 0;
    unsigned long size = 0, resident = 0;
    const int n = std::fscanf(f, "%lu %lu", &size, &resident);
    std::fclose(f);
    return n == 2 ? resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

Released release_own_pages() {
    Released r;
    r.before = resident_bytes();
    release_readonly_pages(true, {});
    trim_heap();
    r.after = resident_bytes();
    return r;
}

Settler::Clock::time_point Settler::due() const {
    if (release_at_) return *release_at_;
    if (checked_) return *checked_ + policy_.check;
    return Clock::time_point::max();
}

std::optional<Released> Settler::poll(Clock::time_point now) {
    if (now < due()) return std::nullopt;
    const bool settled = release_at_.has_value();
    checked_ = now;
    if (!settled && resident_bytes() <= released_ + policy_.regrown) return std::nullopt;
    release_at_.reset();
    const Released r = release_own_pages();
    released_ = r.after;
    return r;
}

void Settler::poll_logged(std::string_view who, Clock::time_point now) {
    if (const auto r = poll(now))
        log::debug("{}: resident set {} -> {} KiB (pages of code and read-only data, free heap given back)", who,
                   r->before / 1024, r->after / 1024);
}

}  // namespace kgpu::memory
