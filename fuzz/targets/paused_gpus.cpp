// `kgpu device-plugin --mig-paused-gpus-file` (written by kgpu mig-manager, or by hand): hostile
// text. It either parses or is refused with a message naming the file and the line; what parses
// is GPU UUIDs only, and the text kgpu writes for them parses back to the same set.
#include "deviceplugin/paused.h"
#include "fuzz.h"

using namespace kgpu;

KGPU_FUZZ_TARGET(paused_gpus) {
    auto parsed = deviceplugin::parse_paused_gpus(fuzz::text(data, size), "paused-gpus");
    if (!parsed) {
        KGPU_FUZZ_CHECK(parsed.error().message.starts_with("paused-gpus:"), parsed.error().message);
        return 0;
    }
    for (const auto& u : *parsed) {
        KGPU_FUZZ_CHECK(u.starts_with("GPU-") && u.size() > 4, u);
        KGPU_FUZZ_CHECK(u.find_first_of(" \t\r\n#") == std::string::npos, u);
    }
    auto again = deviceplugin::parse_paused_gpus(deviceplugin::paused_gpus_text(*parsed, "fuzz"), "again");
    KGPU_FUZZ_CHECK(again && *again == *parsed, "the written text does not parse back");
    return 0;
}
