// A PCI configuration space as `kgpu labels` reads it from sysfs for gpu-feature-discovery's vGPU
// labels: the capability list walked to the first vendor-specific capability, and a vGPU
// capability's records walked to the host driver record.
#include "fuzz.h"
#include "inventory/vgpu.h"

using namespace kgpu;

KGPU_FUZZ_TARGET(pci_config) {
    const auto config = fuzz::text(data, size);
    auto cap = inventory::vendor_capability(config, "fuzz");
    if (!cap) {
        KGPU_FUZZ_CHECK(!cap.error().message.empty(), config);
        return 0;
    }
    if (!*cap) return 0;
    const std::string& c = **cap;
    // The capability is the bytes its own length byte counts (a length under 3 counts fewer than
    // its header, as GFD slices it), inside the configuration space.
    KGPU_FUZZ_CHECK(c.empty() || c[0] == '\x09', c);
    KGPU_FUZZ_CHECK(c.size() < 3 || static_cast<unsigned char>(c[2]) == c.size(), c);
    KGPU_FUZZ_CHECK(config.find(c) != std::string_view::npos, c);
    if (!inventory::is_vgpu_capability(c)) return 0;
    if (auto host = inventory::vgpu_host_driver(c)) {
        for (const std::string* f : {&host->version, &host->branch}) {
            KGPU_FUZZ_CHECK(f->size() <= 10, *f);
            KGPU_FUZZ_CHECK(f->empty() || (f->front() != '\0' && f->back() != '\0'), *f);
        }
    }
    return 0;
}
