// `kgpu doctor`'s readers of kernel text: the kernel log (NVRM Xid lines), /proc/modules and
// /proc/driver/nvidia/version.
#include "doctor/host.h"
#include "fuzz.h"

using namespace kgpu;

KGPU_FUZZ_TARGET(doctor_kernel_log) {
    const std::string_view text = fuzz::text(data, size);
    for (const auto& x : doctor::parse_xids(text)) {
        KGPU_FUZZ_CHECK(text.find(x.line) != std::string_view::npos, x.line);
        (void)doctor::classify_xid(x.xid);
    }
    for (const auto& m : doctor::parse_modules(text)) KGPU_FUZZ_CHECK(!m.empty(), "an empty module name");
    (void)doctor::parse_driver_version(text);
    return 0;
}
